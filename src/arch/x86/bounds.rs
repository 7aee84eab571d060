//! Tier 1: no kernel reads or writes outside the buffers it is given ("never read outside the buffers ggml
//! passes"). Every buffer a kernel sees is copied against an inaccessible page (`PROT_NONE`): once so that it
//! ends exactly where the page starts (over-reads past the last block, e.g. a 512-bit load of a short tail),
//! once so that it starts exactly where one ends (reads before the first byte). A touch of either page is a
//! fault; the handler (`ab/guard.rs`) names the case on stderr before the process dies, so the test fails
//! loudly and says where. Results are compared with the scalar table's (the models) on the same data, so a
//! kernel that read a neighbour's bytes without faulting would show as a wrong value.
//!
//! Covered, at every instruction set this CPU has, every per-CPU kernel form and both float orders: every
//! `vec_dot`, every tile product (rows and columns strided, the last row ending at the page), every
//! dequantizer and both quantizers, over block counts that hit every tail of the 2-, 4- and 8-block loops.
//! Prefetches are exempt by the hardware: a prefetch of an inaccessible address never faults.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::ab::guard::{
    as_floats, float_bytes, install_fault_handler, set_case, GuardedRegion, Side,
};
use crate::dispatch::{detected_isa, Isa, Kernels, Q2Chain};
use crate::formats::iq2_s::BlockIQ2S;
use crate::formats::iq2_xs::BlockIQ2XS;
use crate::formats::iq2_xxs::BlockIQ2XXS;
use crate::formats::iq3_s::BlockIQ3S;
use crate::formats::iq3_xxs::BlockIQ3XXS;
use crate::formats::pq2_0::BlockPQ2_0;
use crate::formats::ptq1_0::BlockPTQ1_0;
use crate::formats::q1_0::BlockQ1_0;
use crate::formats::q2_0::BlockQ2_0;
use crate::formats::q8_0::BlockQ8_0;
use crate::formats::q8_k::{BlockQ8K, QK_K};
use crate::formats::tq1_0::BlockTQ1_0;
use crate::formats::tq2_0::BlockTQ2_0;
use crate::formats::{block_bytes, blocks, blocks_mut, RawBlock};
use crate::tiles::Rows;
use crate::FloatOrder;

/// Block counts: every tail of the kernels' 2-, 4- and 8-block steps, and longer rows that cross their
/// 32- and 64-block slabs.
const BLOCK_COUNTS: [usize; 19] = [
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 15, 16, 17, 32, 33, 64, 65,
];

const SIDES: [Side; 2] = [Side::After, Side::Before];

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits()
}

/// Every table the library can run here: each instruction set up to the CPU's, each per-CPU form, both orders,
/// and the haswell tables with Q2_0 in ggml ≥ 0.27.0's own AVX2 order (at AVX-512 with either tiles) or unfused.
fn every_table() -> Vec<Kernels> {
    FloatOrder::ALL
        .into_iter()
        .flat_map(|order| {
            Isa::ALL
                .into_iter()
                .filter(|&i| i <= detected_isa())
                .flat_map(move |i| Kernels::every_variant(i, order))
        })
        .flat_map(|k| {
            let ggml_order = k.order == FloatOrder::Haswell;
            [
                Some(k),
                ggml_order.then(|| k.with_q2_0_in_ggml_avx2_order_tiles(false)),
                ggml_order.then(|| k.with_q2_0_unfused()),
                (ggml_order && k.isa == Isa::Avx512)
                    .then(|| k.with_q2_0_in_ggml_avx2_order_tiles(true)),
            ]
        })
        .flatten()
        .collect()
}

/// The scalar table whose values `k`'s must equal: its float order, and its Q2_0 chain.
fn scalar_model_of(k: &Kernels) -> Kernels {
    let model = Kernels::new(Isa::Scalar, k.order);
    match k.q2_0_chain {
        Q2Chain::GenericC => model,
        Q2Chain::GgmlAvx2 => model.with_q2_0_in_ggml_avx2_order_tiles(false),
        Q2Chain::GenericCUnfused => model.with_q2_0_unfused(),
    }
}

fn table_name(k: &Kernels) -> String {
    let chain = match k.q2_0_chain {
        Q2Chain::GenericC => "",
        Q2Chain::GgmlAvx2 => ", Q2_0 in ggml's AVX2 order",
        Q2Chain::GenericCUnfused => ", Q2_0 unfused",
    };
    format!("{:?} {}{}{chain}", k.isa, k.order.name(), k.forms_note())
}

/// Random weight blocks: every byte random (grid indices, signs, scales: NaN and Inf scales included, which
/// only change the value the models must also give).
fn weight_blocks<B: RawBlock>(rng: &mut SmallRng, nb: usize) -> Vec<B> {
    let mut bytes = vec![0u8; nb * std::mem::size_of::<B>()];
    rng.fill(&mut bytes[..]);
    blocks::<B>(&bytes).to_vec()
}

/// q8_0 blocks with ordinary scales (0x2000..0x3c00) and random quants.
fn q8_0_blocks(rng: &mut SmallRng, n: usize) -> Vec<BlockQ8_0> {
    (0..n)
        .map(|_| {
            let mut qs = [0i8; 32];
            rng.fill(&mut qs[..]);
            BlockQ8_0 {
                d: crate::fp16::GgmlHalf::from_bits(rng.gen_range(0x2000..0x3c00)),
                qs,
            }
        })
        .collect()
}

/// q8_K blocks as the quantizer makes them (bsums the sums of sixteen), so the TQ kernels stay on their vector
/// path rather than handing the row to the model.
fn q8_k_blocks(rng: &mut SmallRng, n: usize) -> Vec<BlockQ8K> {
    (0..n)
        .map(|_| {
            let mut b = BlockQ8K::default();
            rng.fill(&mut b.qs[..]);
            for m in 0..QK_K / 16 {
                let s: i16 = b.qs[16 * m..16 * m + 16].iter().map(|&q| q as i16).sum();
                b.set_bsum(m, s);
            }
            b.d = rng.gen_range(0.001f32..0.05).to_le_bytes();
            b
        })
        .collect()
}

/// One `vec_dot` format: for every table and block count, the weights and activations each against a guard
/// page (after, then before), the value equal to the scalar table's.
fn vec_dot_stays_inside<B: RawBlock, Y: RawBlock>(
    name: &str,
    y_per_block: usize,
    activations: fn(&mut SmallRng, usize) -> Vec<Y>,
    dot: fn(&Kernels, &[B], &[Y]) -> f32,
) {
    install_fault_handler();
    let (mut gx, mut gy) = (GuardedRegion::new(1 << 16), GuardedRegion::new(1 << 16));
    let mut rng = SmallRng::seed_from_u64(0xb0d5);
    for k in every_table() {
        let model = scalar_model_of(&k);
        for nb in BLOCK_COUNTS {
            let x: Vec<B> = weight_blocks(&mut rng, nb);
            let y = activations(&mut rng, nb * y_per_block);
            let want = dot(&model, &x, &y);
            for side in SIDES {
                set_case(format_args!(
                    "vec_dot {name} {} nb {nb} guard {side:?}",
                    table_name(&k)
                ));
                let got = dot(
                    &k,
                    blocks(gx.place(block_bytes(&x), side)),
                    blocks(gy.place(block_bytes(&y), side)),
                );
                assert!(
                    same(got, want),
                    "{name} {} nb {nb} {side:?}: {got} vs {want}",
                    table_name(&k)
                );
            }
        }
    }
    set_case(format_args!(""));
}

#[test]
fn vec_dots_read_only_their_rows() {
    vec_dot_stays_inside::<BlockQ2_0, _>("q2_0", 2, q8_0_blocks, Kernels::vec_dot_q2_0_q8_0);
    vec_dot_stays_inside::<BlockQ1_0, _>("q1_0", 4, q8_0_blocks, Kernels::vec_dot_q1_0_q8_0);
    vec_dot_stays_inside::<BlockPQ2_0, _>("pq2_0", 4, q8_0_blocks, Kernels::vec_dot_pq2_0_q8_0);
    vec_dot_stays_inside::<BlockPTQ1_0, _>("ptq1_0", 4, q8_0_blocks, Kernels::vec_dot_ptq1_0_q8_0);
    vec_dot_stays_inside::<BlockTQ2_0, _>("tq2_0", 1, q8_k_blocks, Kernels::vec_dot_tq2_0_q8_k);
    vec_dot_stays_inside::<BlockTQ1_0, _>("tq1_0", 1, q8_k_blocks, Kernels::vec_dot_tq1_0_q8_k);
    vec_dot_stays_inside::<BlockIQ2XXS, _>("iq2_xxs", 1, q8_k_blocks, Kernels::vec_dot_iq_q8_k);
    vec_dot_stays_inside::<BlockIQ2XS, _>("iq2_xs", 1, q8_k_blocks, Kernels::vec_dot_iq_q8_k);
    vec_dot_stays_inside::<BlockIQ2S, _>("iq2_s", 1, q8_k_blocks, Kernels::vec_dot_iq_q8_k);
    vec_dot_stays_inside::<BlockIQ3XXS, _>("iq3_xxs", 1, q8_k_blocks, Kernels::vec_dot_iq_q8_k);
    vec_dot_stays_inside::<BlockIQ3S, _>("iq3_s", 1, q8_k_blocks, Kernels::vec_dot_iq_q8_k);
}

type MulMat<B, Y> = fn(&Kernels, Rows<'_, B>, Rows<'_, Y>, crate::tiles::Emit<'_>);

/// One tile product: rows of `nb` blocks at a stride of `nb + gap` (the buffer ending with the last row's
/// last block), columns likewise, each buffer against a guard page; every element equal to the scalar
/// table's.
fn mul_mat_stays_inside<B: RawBlock, Y: RawBlock>(
    name: &str,
    y_per_block: usize,
    activations: fn(&mut SmallRng, usize) -> Vec<Y>,
    mul_mat: MulMat<B, Y>,
) {
    install_fault_handler();
    let (mut gx, mut gy) = (GuardedRegion::new(1 << 16), GuardedRegion::new(1 << 16));
    let mut rng = SmallRng::seed_from_u64(0x711e);
    // (blocks per row, rows, columns): row tails of the 4-row steps, decode columns of 16 and more rows (the
    // staggered streams), prefill column pairs and an odd column, column octets with and without leftovers.
    let shapes = [
        (1, 1, 1),
        (2, 3, 2),
        (3, 5, 3),
        (5, 9, 1),
        (8, 16, 1),
        (9, 17, 2),
        (16, 33, 1),
        (33, 7, 5),
        (65, 18, 1),
        (8, 5, 8),
        (17, 6, 19),
    ];
    for k in every_table() {
        let model = scalar_model_of(&k);
        for (case, &(nb, rows, cols)) in shapes.iter().enumerate() {
            let (x_stride, y_stride) = (nb + case % 2, nb * y_per_block + case % 3);
            let x: Vec<B> = weight_blocks(&mut rng, (rows - 1) * x_stride + nb);
            let y = activations(&mut rng, (cols - 1) * y_stride + nb * y_per_block);
            let run = |k: &Kernels, x: &[B], y: &[Y]| {
                let xr = Rows::new(x, nb, x_stride, rows).expect("rows");
                let yr = Rows::new(y, nb * y_per_block, y_stride, cols).expect("columns");
                let mut out = vec![f32::NAN; rows * cols];
                let mut seen = vec![0u32; rows * cols];
                mul_mat(k, xr, yr, &mut |r, c, v| {
                    out[c * rows + r] = v;
                    seen[c * rows + r] += 1;
                });
                assert!(seen.iter().all(|&s| s == 1), "each element once");
                out
            };
            let want = run(&model, &x, &y);
            for side in SIDES {
                set_case(format_args!(
                    "mul_mat {name} {} nb {nb} rows {rows} cols {cols} guard {side:?}",
                    table_name(&k)
                ));
                let got = run(
                    &k,
                    blocks(gx.place(block_bytes(&x), side)),
                    blocks(gy.place(block_bytes(&y), side)),
                );
                for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        same(g, w),
                        "{name} {} nb {nb} rows {rows} cols {cols} {side:?}: element {i} {g} vs {w}",
                        table_name(&k)
                    );
                }
            }
        }
    }
    set_case(format_args!(""));
}

#[test]
fn tile_products_read_only_their_rows_and_columns() {
    mul_mat_stays_inside::<BlockQ2_0, _>("q2_0", 2, q8_0_blocks, Kernels::mul_mat_q2_0_q8_0);
    mul_mat_stays_inside::<BlockQ1_0, _>("q1_0", 4, q8_0_blocks, Kernels::mul_mat_q1_0_q8_0);
    mul_mat_stays_inside::<BlockPQ2_0, _>("pq2_0", 4, q8_0_blocks, Kernels::mul_mat_pq2_0_q8_0);
    mul_mat_stays_inside::<BlockPTQ1_0, _>("ptq1_0", 4, q8_0_blocks, Kernels::mul_mat_ptq1_0_q8_0);
    mul_mat_stays_inside::<BlockTQ2_0, _>("tq2_0", 1, q8_k_blocks, Kernels::mul_mat_tq2_0_q8_k);
    mul_mat_stays_inside::<BlockTQ1_0, _>("tq1_0", 1, q8_k_blocks, Kernels::mul_mat_tq1_0_q8_k);
}

/// One dequantizer: `nb` blocks in, `qk·nb` floats out, both against guard pages; equal to the scalar table's.
fn dequantize_stays_inside<B: RawBlock>(
    name: &str,
    qk: usize,
    dequantize: fn(&Kernels, &[B], &mut [f32]),
) {
    install_fault_handler();
    let (mut gx, mut gout) = (GuardedRegion::new(1 << 16), GuardedRegion::new(1 << 16));
    let mut rng = SmallRng::seed_from_u64(0xde90);
    for k in every_table() {
        let model = scalar_model_of(&k);
        for nb in BLOCK_COUNTS {
            let x: Vec<B> = weight_blocks(&mut rng, nb);
            let mut want = vec![0f32; qk * nb];
            dequantize(&model, &x, &mut want);
            for side in SIDES {
                set_case(format_args!(
                    "dequantize {name} {} nb {nb} guard {side:?}",
                    table_name(&k)
                ));
                let out = as_floats(gout.place(&vec![0u8; 4 * qk * nb], side));
                dequantize(&k, blocks(gx.place(block_bytes(&x), side)), out);
                for (i, (&g, &w)) in out.iter().zip(&want).enumerate() {
                    assert!(same(g, w), "{name} nb {nb} {side:?}: weight {i}");
                }
            }
        }
    }
    set_case(format_args!(""));
}

#[test]
fn dequantizers_stay_inside_their_rows() {
    dequantize_stays_inside::<BlockQ2_0>("q2_0", 64, Kernels::dequantize_row_q2_0);
    dequantize_stays_inside::<BlockQ1_0>("q1_0", 128, Kernels::dequantize_row_q1_0);
    dequantize_stays_inside::<BlockPQ2_0>("pq2_0", 128, Kernels::dequantize_row_pq2_0);
    dequantize_stays_inside::<BlockPTQ1_0>("ptq1_0", 128, Kernels::dequantize_row_ptq1_0);
    dequantize_stays_inside::<BlockTQ2_0>("tq2_0", QK_K, Kernels::dequantize_row_tq2_0);
    dequantize_stays_inside::<BlockTQ1_0>("tq1_0", QK_K, Kernels::dequantize_row_tq1_0);
    dequantize_stays_inside::<BlockIQ2XXS>("iq2_xxs", QK_K, Kernels::dequantize_row_iq);
    dequantize_stays_inside::<BlockIQ2XS>("iq2_xs", QK_K, Kernels::dequantize_row_iq);
    dequantize_stays_inside::<BlockIQ2S>("iq2_s", QK_K, Kernels::dequantize_row_iq);
    dequantize_stays_inside::<BlockIQ3XXS>("iq3_xxs", QK_K, Kernels::dequantize_row_iq);
    dequantize_stays_inside::<BlockIQ3S>("iq3_s", QK_K, Kernels::dequantize_row_iq);
}

/// One quantizer: `qk·nb` floats in (random, with ±0, ±Inf and NaN among them), `nb` blocks out, both
/// against guard pages; equal to the scalar table's.
fn quantize_stays_inside<Y: RawBlock + Default>(
    name: &str,
    qk: usize,
    quantize: fn(&Kernels, &[f32], &mut [Y]),
) {
    install_fault_handler();
    let (mut gx, mut gout) = (GuardedRegion::new(1 << 16), GuardedRegion::new(1 << 16));
    let mut rng = SmallRng::seed_from_u64(0x9a47);
    let specials = [0.0f32, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN];
    for k in every_table() {
        let model = scalar_model_of(&k);
        for nb in BLOCK_COUNTS {
            let x: Vec<f32> = (0..qk * nb)
                .map(|_| match rng.gen_range(0..100) {
                    0 => specials[rng.gen_range(0..specials.len())],
                    _ => rng.gen_range(-3.0f32..3.0),
                })
                .collect();
            let mut want = vec![Y::default(); nb];
            quantize(&model, &x, &mut want);
            for side in SIDES {
                set_case(format_args!(
                    "quantize {name} {} nb {nb} guard {side:?}",
                    table_name(&k)
                ));
                let out = gout.place(&vec![0u8; nb * std::mem::size_of::<Y>()], side);
                quantize(
                    &k,
                    as_floats(gx.place(float_bytes(&x), side)),
                    blocks_mut(out),
                );
                assert!(
                    out == block_bytes(&want),
                    "{name} nb {nb} {side:?}: blocks differ"
                );
            }
        }
    }
    set_case(format_args!(""));
}

#[test]
fn quantizers_stay_inside_their_rows() {
    quantize_stays_inside::<BlockQ8_0>("q8_0", 32, Kernels::quantize_row_q8_0);
    quantize_stays_inside::<BlockQ8K>("q8_K", QK_K, Kernels::quantize_row_q8_k);
}
