//! Metal kernels on the SIMT emulator (docs/METAL.md): the patch is in step with `src/metal/` and applies to the
//! pinned tree; the patched `mul_mv.metal` compiles as C++ and its kernels decode every byte exactly and match
//! the reference (dequantize, f64 dot) and stock's own kernels on the same inputs, over shapes with tails,
//! several columns, broadcast batches and the MoE (`_id`) forms. A missing compiler or stock tree fails.

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;

use ggml_lowbit::fp16::GgmlHalf;
use ggml_lowbit::metal::{self, bytes_of, Emulator, KargsMulMv, KargsMulMvId, Variant};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn cxx() -> PathBuf {
    common::fork_c::cc_compiler(true)
}

fn llama_src() -> PathBuf {
    ggml_lowbit::stock::source_dir().expect("the pinned stock tree (scripts/stock-llama.sh)")
}

fn emulator(variant: Variant) -> &'static Emulator {
    static STOCK: OnceLock<Emulator> = OnceLock::new();
    static PATCHED: OnceLock<Emulator> = OnceLock::new();
    let cell = match variant {
        Variant::Stock => &STOCK,
        Variant::Patched => &PATCHED,
    };
    cell.get_or_init(|| {
        metal::build(&cxx(), &llama_src(), variant)
            .unwrap_or_else(|e| panic!("building the {} emulator: {e}", variant.name()))
    })
}

/// A low-bit format as the Metal kernels see it.
#[derive(Clone, Copy, Debug)]
struct Format {
    name: &'static str,
    qk: usize,
    block_bytes: usize,
    /// Byte offset of the f16 scale in a block.
    scale_at: usize,
    /// The row's weights from its blocks (the crate's dequantize models).
    dequantize: fn(&[u8]) -> Vec<f32>,
}

/// The blocks of a row as `B` (unaligned bytes to the crate's block structs).
fn blocks<B: Copy>(row: &[u8]) -> Vec<B> {
    let n = std::mem::size_of::<B>();
    assert_eq!(row.len() % n, 0);
    // SAFETY: B is one of the crate's repr(C) block structs of plain bytes/integers, valid for any bit pattern;
    // each read is of n bytes inside `row`.
    row.chunks_exact(n)
        .map(|c| unsafe { std::ptr::read_unaligned(c.as_ptr().cast::<B>()) })
        .collect()
}

fn dequantize_iq<B: ggml_lowbit::formats::iq::IqBlock + Copy>(row: &[u8]) -> Vec<f32> {
    let x = blocks::<B>(row);
    let mut y = vec![0.0f32; x.len() * 256];
    ggml_lowbit::formats::iq::dequantize_row_iq_model(&x, &mut y);
    y
}

fn dequantize_q2_0(row: &[u8]) -> Vec<f32> {
    let x = blocks::<ggml_lowbit::formats::q2_0::BlockQ2_0>(row);
    let mut y = vec![0.0f32; x.len() * 64];
    ggml_lowbit::formats::q2_0::dequantize_row_q2_0_model(&x, &mut y);
    y
}

fn dequantize_q1_0(row: &[u8]) -> Vec<f32> {
    let x = blocks::<ggml_lowbit::formats::q1_0::BlockQ1_0>(row);
    let mut y = vec![0.0f32; x.len() * 128];
    ggml_lowbit::formats::q1_0::dequantize_row_q1_0_model(&x, &mut y);
    y
}

const Q2_0: Format = Format {
    name: "q2_0",
    scale_at: 0,
    qk: 64,
    block_bytes: 18,
    dequantize: dequantize_q2_0,
};
const Q1_0: Format = Format {
    name: "q1_0",
    scale_at: 0,
    qk: 128,
    block_bytes: 18,
    dequantize: dequantize_q1_0,
};
const IQ2_XXS: Format = Format {
    name: "iq2_xxs",
    scale_at: 0,
    qk: 256,
    block_bytes: 66,
    dequantize: dequantize_iq::<ggml_lowbit::formats::iq2_xxs::BlockIQ2XXS>,
};
const IQ2_XS: Format = Format {
    name: "iq2_xs",
    scale_at: 0,
    qk: 256,
    block_bytes: 74,
    dequantize: dequantize_iq::<ggml_lowbit::formats::iq2_xs::BlockIQ2XS>,
};
const IQ2_S: Format = Format {
    name: "iq2_s",
    scale_at: 0,
    qk: 256,
    block_bytes: 82,
    dequantize: dequantize_iq::<ggml_lowbit::formats::iq2_s::BlockIQ2S>,
};
const IQ3_S: Format = Format {
    name: "iq3_s",
    scale_at: 0,
    qk: 256,
    block_bytes: 110,
    dequantize: dequantize_iq::<ggml_lowbit::formats::iq3_s::BlockIQ3S>,
};
fn dequantize_pq2_0(row: &[u8]) -> Vec<f32> {
    let x = blocks::<ggml_lowbit::formats::pq2_0::BlockPQ2_0>(row);
    let mut y = vec![0.0f32; x.len() * 128];
    ggml_lowbit::formats::pq2_0::dequantize_row_pq2_0_model(&x, &mut y);
    y
}

fn dequantize_ptq1_0(row: &[u8]) -> Vec<f32> {
    let x = blocks::<ggml_lowbit::formats::ptq1_0::BlockPTQ1_0>(row);
    let mut y = vec![0.0f32; x.len() * 128];
    ggml_lowbit::formats::ptq1_0::dequantize_row_ptq1_0_model(&x, &mut y);
    y
}

// PrismML's formats: the pinned tree has no Metal kernel for them, so they are checked against the reference
// only.
const PQ2_0: Format = Format {
    name: "pq2_0",
    qk: 128,
    block_bytes: 34,
    scale_at: 0,
    dequantize: dequantize_pq2_0,
};
const PTQ1_0: Format = Format {
    name: "ptq1_0",
    qk: 128,
    block_bytes: 28,
    scale_at: 26,
    dequantize: dequantize_ptq1_0,
};
const FORMATS: [Format; 8] = [Q2_0, Q1_0, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_S, PQ2_0, PTQ1_0];

#[test]
fn formats_cover_our_kernels() {
    let names: Vec<String> = FORMATS
        .iter()
        .map(|f| format!("kernel_mul_mv_{}_f32", f.name))
        .collect();
    for k in metal::OUR_KERNELS {
        assert!(names.contains(&k.name()), "{} has no test format", k.name());
    }
}

/// Whether the pinned tree has a kernel for `f` (not for PrismML's formats).
fn stock_has(f: Format) -> bool {
    let kernel = format!("kernel_mul_mv_{}_f32", f.name);
    emulator(Variant::Stock)
        .geometry(&kernel)
        .unwrap()
        .is_some()
}

/// Random blocks: codes uniform over every byte value, scales finite f16 over a wide range (zero and
/// subnormal included); `extra_rows` rows of junk after the matrix, which stock's kernels read.
fn random_weights(
    f: Format,
    rows: usize,
    ne00: usize,
    extra_rows: usize,
    rng: &mut SmallRng,
) -> Vec<u8> {
    let nb = ne00 / f.qk;
    let mut w = vec![0u8; (rows + extra_rows) * nb * f.block_bytes];
    rng.fill(&mut w[..]);
    for b in 0..rows * nb {
        let d = match rng.gen_range(0..20) {
            0 => 0.0f32,
            1 => 3.0e-6, // subnormal in f16
            _ => rng.gen_range(-1.0f32..1.0) * 2f32.powi(rng.gen_range(-8..4)),
        };
        w[b * f.block_bytes + f.scale_at..][..2]
            .copy_from_slice(&GgmlHalf::from_bits(half::f16::from_f32(d).to_bits()).0);
    }
    w
}

fn dequantize_row(f: Format, w: &[u8], row: usize, ne00: usize) -> Vec<f64> {
    let bytes = ne00 / f.qk * f.block_bytes;
    (f.dequantize)(&w[row * bytes..][..bytes])
        .into_iter()
        .map(f64::from)
        .collect()
}

/// One output against the reference: |got - want| <= 1e-4·|want| + 2e-6·Σ|w·x| (a reassociated f32 sum over
/// the row; one wrong weight in a row of n costs about Σ|w·x|/n, far above this for every n tested).
fn close(got: f32, want: f64, sum_abs: f64) -> bool {
    (f64::from(got) - want).abs() <= 1e-4 * want.abs() + 2e-6 * sum_abs
}

/// A mat-vec the way ggml-metal encodes MUL_MAT for these formats.
#[derive(Clone, Copy, Debug)]
struct Shape {
    ne00: usize,
    ne01: usize,
    ne02: usize,
    ne03: usize,
    ne11: usize,
    ne12: usize,
    ne13: usize,
}

fn run_mul_mv(emu: &Emulator, f: Format, s: Shape, w: &[u8], x: &[f32]) -> Vec<f32> {
    let kernel = format!("kernel_mul_mv_{}_f32", f.name);
    let geo = emu.geometry(&kernel).unwrap().expect("kernel in the build");
    let (nr0, split) = geo.for_row(s.ne00);
    let nsg = geo.nsg;
    let nb01 = (s.ne00 / f.qk * f.block_bytes) as u64;
    let args = KargsMulMv {
        ne00: s.ne00 as i32,
        ne01: s.ne01 as i32,
        ne02: s.ne02 as i32,
        nb00: f.block_bytes as u64,
        nb01,
        nb02: nb01 * s.ne01 as u64,
        nb03: nb01 * (s.ne01 * s.ne02) as u64,
        ne10: s.ne00 as i32,
        ne11: s.ne11 as i32,
        ne12: s.ne12 as i32,
        nb10: 4,
        nb11: 4 * s.ne00 as u64,
        nb12: 4 * (s.ne00 * s.ne11) as u64,
        nb13: 4 * (s.ne00 * s.ne11 * s.ne12) as u64,
        ne0: s.ne01 as i32,
        ne1: s.ne11 as i32,
        nr0: nr0 as i32,
        r2: (s.ne12 / s.ne02) as i16,
        r3: (s.ne13 / s.ne03) as i16,
        ..Default::default()
    };
    let grid = [
        s.ne01.div_ceil(nr0 * nsg) as u32,
        s.ne11 as u32,
        (s.ne12 * s.ne13) as u32,
    ];
    let mut dst = vec![f32::NAN; s.ne01 * s.ne11 * s.ne12 * s.ne13];
    let x_bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut dst_bytes: Vec<u8> = dst.iter().flat_map(|v| v.to_le_bytes()).collect();
    let fc = [
        nsg as i16,
        0,
        s.ne12 as i16,
        args.r2,
        args.r3,
        i16::from(split),
    ];
    emu.dispatch(
        &kernel,
        fc,
        &bytes_of(&args),
        w,
        &x_bytes,
        &mut dst_bytes,
        None,
        grid,
        nsg,
        geo.smem,
    )
    .unwrap_or_else(|e| panic!("{} {kernel}: {e}", emu.variant.name()));
    for (d, c) in dst.iter_mut().zip(dst_bytes.chunks_exact(4)) {
        *d = f32::from_le_bytes(c.try_into().unwrap());
    }
    dst
}

/// Checks one output set against the f64 reference; returns the normalized MSE.
fn check_against_reference(what: &str, out: &[f32], want: &[(f64, f64)]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (i, (&got, &(r, sum_abs))) in out.iter().zip(want).enumerate() {
        assert!(
            close(got, r, sum_abs),
            "{what}: output {i} is {got}, reference {r} (sum |w x| {sum_abs})"
        );
        num += (f64::from(got) - r).powi(2);
        den += r * r;
    }
    let nmse = if den > 0.0 { num / den } else { num };
    assert!(
        nmse < 5e-4,
        "{what}: normalized MSE {nmse} (test-backend-ops allows 5e-4)"
    );
    nmse
}

fn mul_mv_case(f: Format, s: Shape, seed: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let pad = 64;
    let w = random_weights(f, s.ne01 * s.ne02 * s.ne03, s.ne00, pad, &mut rng);
    let x: Vec<f32> = (0..s.ne00 * s.ne11 * s.ne12 * s.ne13)
        .map(|_| rng.gen_range(-1.0f32..1.0))
        .collect();
    let mut want = Vec::new();
    for i13 in 0..s.ne13 {
        for i12 in 0..s.ne12 {
            for i11 in 0..s.ne11 {
                let col = ((i13 * s.ne12 + i12) * s.ne11 + i11) * s.ne00;
                let xs = &x[col..col + s.ne00];
                let mat = (i13 / (s.ne13 / s.ne03)) * s.ne02 + i12 / (s.ne12 / s.ne02);
                for i01 in 0..s.ne01 {
                    let row = dequantize_row(f, &w, mat * s.ne01 + i01, s.ne00);
                    let (mut dot, mut sum_abs) = (0.0f64, 0.0f64);
                    for (a, &b) in row.iter().zip(xs) {
                        dot += a * f64::from(b);
                        sum_abs += (a * f64::from(b)).abs();
                    }
                    want.push((dot, sum_abs));
                }
            }
        }
    }
    let ours = run_mul_mv(emulator(Variant::Patched), f, s, &w, &x);
    check_against_reference(&format!("ours {} {s:?}", f.name), &ours, &want);
    if !stock_has(f) {
        return;
    }
    let stock = run_mul_mv(emulator(Variant::Stock), f, s, &w, &x);
    check_against_reference(&format!("stock {} {s:?}", f.name), &stock, &want);
    for (i, (a, b)) in ours.iter().zip(&stock).enumerate() {
        let sum_abs = want[i].1;
        assert!(
            (f64::from(*a) - f64::from(*b)).abs() <= 2e-4 * f64::from(b.abs()) + 4e-6 * sum_abs,
            "{} {s:?}: output {i}: ours {a}, stock {b}",
            f.name
        );
    }
}

const SHAPES: [Shape; 6] = [
    // one block per row, fewer rows than one simdgroup's share
    Shape {
        ne00: 128,
        ne01: 3,
        ne02: 1,
        ne03: 1,
        ne11: 1,
        ne12: 1,
        ne13: 1,
    },
    // rows not a multiple of nsg*nr0, blocks not a multiple of one simdgroup step
    Shape {
        ne00: 640,
        ne01: 37,
        ne02: 1,
        ne03: 1,
        ne11: 1,
        ne12: 1,
        ne13: 1,
    },
    // several src1 columns
    Shape {
        ne00: 1152,
        ne01: 17,
        ne02: 1,
        ne03: 1,
        ne11: 3,
        ne12: 1,
        ne13: 1,
    },
    // broadcast batches (r2 = 2, r3 = 3)
    Shape {
        ne00: 384,
        ne01: 19,
        ne02: 2,
        ne03: 1,
        ne11: 2,
        ne12: 4,
        ne13: 3,
    },
    // a longer row
    Shape {
        ne00: 4096,
        ne01: 33,
        ne02: 1,
        ne03: 1,
        ne11: 1,
        ne12: 1,
        ne13: 1,
    },
    // odd row count, exact simdgroup share otherwise
    Shape {
        ne00: 512,
        ne01: 31,
        ne02: 1,
        ne03: 1,
        ne11: 2,
        ne12: 1,
        ne13: 1,
    },
];

/// Row lengths for the 256-weight formats in place of SHAPES' ne00: with 8 and 16 sub-blocks of 32 the IQ
/// kernels run split (rows shared out over lane groups), with 24, 40, 128 and 32 they do not.
const IQ_NE00: [usize; 6] = [256, 768, 1280, 512, 4096, 1024];

fn mul_mv_format(f: Format, seed: u64) {
    for (i, s) in SHAPES.iter().enumerate() {
        let mut s = *s;
        if f.qk == 256 {
            s.ne00 = IQ_NE00[i];
        }
        mul_mv_case(f, s, seed + i as u64);
    }
}

#[test]
fn mul_mv_q2_0_matches_reference_and_stock() {
    mul_mv_format(Q2_0, 100);
}

#[test]
fn mul_mv_q1_0_matches_reference_and_stock() {
    mul_mv_format(Q1_0, 200);
}

#[test]
fn mul_mv_iq2_xxs_matches_reference_and_stock() {
    mul_mv_format(IQ2_XXS, 300);
}

#[test]
fn mul_mv_iq2_xs_matches_reference_and_stock() {
    mul_mv_format(IQ2_XS, 400);
}

#[test]
fn mul_mv_iq2_s_matches_reference_and_stock() {
    mul_mv_format(IQ2_S, 500);
}

#[test]
fn mul_mv_iq3_s_matches_reference_and_stock() {
    mul_mv_format(IQ3_S, 600);
}

#[test]
fn mul_mv_pq2_0_matches_reference() {
    mul_mv_format(PQ2_0, 700);
}

#[test]
fn mul_mv_ptq1_0_matches_reference() {
    mul_mv_format(PTQ1_0, 800);
}

/// The PTQ1_0 base-3 floor chain, through the kernel's helper, over every byte (243..255 included): with unit
/// activations e_n the staged dot is exactly the fork's digit n, ((uint8)(q·3^n)·3) >> 8.
#[test]
fn ptq1_0_floor_chain_decodes_every_byte() {
    let emu = emulator(Variant::Patched);
    for q in 0..=255u8 {
        for n in 0..5 {
            let mut y = [0.0f32; 5];
            y[n] = 1.0;
            let got = emu.byte_helper("ptq1_0_byte_dot", q, y).unwrap();
            let want = f32::from(ggml_lowbit::formats::ptq1_0::trit(q, n));
            assert_eq!(got.to_bits(), want.to_bits(), "byte {q}, digit {n}");
        }
    }
}

/// `ggml-patch/metal.patch` is exactly the diff from the pinned `mul_mv.metal` to the one with
/// `src/metal/lowbit_mul_mv.metal` in place of stock's Q1_0/Q2_0 kernels, and applies with `git apply -p1`.
/// `GGML_LOWBIT_BLESS=1` rewrites it.
#[test]
fn metal_patch_is_in_step_with_the_sources() {
    let src = llama_src();
    let stock = std::fs::read_to_string(src.join(metal::MUL_MV_PATH)).unwrap();
    let ours = std::fs::read_to_string(metal::our_kernels_path()).unwrap();
    let patched = metal::patched_mul_mv(&stock, &ours).unwrap();
    let want = metal::make_patch(&stock, &patched).unwrap();
    if std::env::var_os("GGML_LOWBIT_BLESS").is_some() {
        std::fs::write(metal::patch_path(), &want).unwrap();
    }
    let have = std::fs::read_to_string(metal::patch_path()).unwrap_or_default();
    assert!(
        have == want,
        "ggml-patch/metal.patch is stale: run GGML_LOWBIT_BLESS=1 cargo test --release --test metal metal_patch"
    );
    let applied = metal::apply_patch(&stock, &metal::patch_path()).unwrap();
    assert!(
        applied == patched,
        "the patch applied gives another mul_mv.metal than the sources do"
    );
}

/// The Q2_0 floor chain, through the kernel's own helpers, over every byte: with the activations a unit vector
/// e_k the staged dot is exactly code k (the field extraction itself), and with random activations it is the
/// dot of the decoded codes within rounding.
#[test]
fn q2_0_floor_chain_decodes_every_byte() {
    let emu = emulator(Variant::Patched);
    let mut rng = SmallRng::seed_from_u64(7);
    for b in 0..=255u8 {
        let codes: [f32; 4] = std::array::from_fn(|k| f32::from((b >> (2 * k)) & 3));
        for k in 0..4 {
            let mut y = [0.0f32; 4];
            y[k] = 1.0;
            let got = emu.byte_helper("q2_0_byte_dot", b, y).unwrap();
            assert_eq!(
                got.to_bits(),
                codes[k].to_bits(),
                "byte {b:#04x}, field {k}"
            );
        }
        for _ in 0..64 {
            let y: [f32; 4] = std::array::from_fn(|_| rng.gen_range(-1.0f32..1.0));
            let want: f64 = (0..4).map(|k| f64::from(codes[k]) * f64::from(y[k])).sum();
            let sum_abs: f64 = (0..4)
                .map(|k| (f64::from(codes[k]) * f64::from(y[k])).abs())
                .sum();
            let got = emu.byte_helper("q2_0_byte_dot", b, y).unwrap();
            // The chain's terms reach 255·|y0|: bound the rounding by that, not by the result.
            let scale = 255.0 * f64::from(y.iter().fold(0.0f32, |m, v| m.max(v.abs())));
            assert!(
                (f64::from(got) - want).abs() <= 1e-6 * (scale + sum_abs),
                "byte {b:#04x}, y {y:?}: {got} vs {want}"
            );
        }
    }
}

/// The Q1_0 nibble tables, through the kernel's helper: every nibble's entry with unit activations is its bit,
/// and with random activations the sum of the activations of its set bits.
#[test]
fn q1_0_tables_decode_every_nibble() {
    let emu = emulator(Variant::Patched);
    let mut rng = SmallRng::seed_from_u64(8);
    for m in 0..16u8 {
        for k in 0..4 {
            let mut y = [0.0f32; 4];
            y[k] = 1.0;
            let got = emu.byte_helper("q1_0_nibble_sum", m, y).unwrap();
            assert_eq!(got, f32::from((m >> k) & 1), "nibble {m:#x}, bit {k}");
        }
        for _ in 0..256 {
            let y: [f32; 4] = std::array::from_fn(|_| rng.gen_range(-1.0f32..1.0));
            let want: f64 = (0..4)
                .filter(|k| (m >> k) & 1 == 1)
                .map(|k| f64::from(y[k]))
                .sum();
            let got = emu.byte_helper("q1_0_nibble_sum", m, y).unwrap();
            assert!(
                (f64::from(got) - want).abs() <= 4e-7 * 4.0,
                "nibble {m:#x}: {got} vs {want}"
            );
        }
    }
}

/// The MoE forms: `kernel_mul_mv_id_*` (stock's instantiation over our impl in the patched build), dispatched
/// as ggml-metal encodes MUL_MAT_ID: 4 experts, 3 tokens, 2 experts used per token, activations per token and
/// slot (ne11 = 2) or broadcast over slots (ne11 = 1).
#[test]
fn mul_mv_id_forms_match_reference_and_stock() {
    for (fi, f) in FORMATS.iter().enumerate() {
        // the IQ kernels split rows of 512 (16 sub-blocks) and not rows of 1536
        for (ne11, ne00) in [(1usize, 512usize), (2, 1536)] {
            let (ne01, ne02, nei0, nei1) = (21usize, 4usize, 2usize, 3usize);
            let mut rng = SmallRng::seed_from_u64(300 + fi as u64 * 10 + ne11 as u64);
            let w = random_weights(*f, ne01 * ne02, ne00, 64, &mut rng);
            let x: Vec<f32> = (0..ne00 * ne11 * nei1)
                .map(|_| rng.gen_range(-1.0f32..1.0))
                .collect();
            let ids: Vec<i32> = (0..nei0 * nei1)
                .map(|i| ((i * 3 + 1) % ne02) as i32)
                .collect();
            let mut want = Vec::new();
            for t in 0..nei1 {
                for slot in 0..nei0 {
                    let e = ids[t * nei0 + slot] as usize;
                    let col = (t * ne11 + slot % ne11) * ne00;
                    for r in 0..ne01 {
                        let row = dequantize_row(*f, &w, e * ne01 + r, ne00);
                        let dot: f64 = row
                            .iter()
                            .zip(&x[col..col + ne00])
                            .map(|(a, &b)| a * f64::from(b))
                            .sum();
                        let sum_abs: f64 = row
                            .iter()
                            .zip(&x[col..col + ne00])
                            .map(|(a, &b)| (a * f64::from(b)).abs())
                            .sum();
                        want.push((dot, sum_abs));
                    }
                }
            }
            let mut outs = Vec::new();
            let variants: &[Variant] = if stock_has(*f) {
                &[Variant::Patched, Variant::Stock]
            } else {
                &[Variant::Patched]
            };
            for &variant in variants {
                let emu = emulator(variant);
                let kernel = format!("kernel_mul_mv_id_{}_f32", f.name);
                let geo = emu.geometry(&kernel).unwrap().expect("kernel in the build");
                let (nr0, split) = geo.for_row(ne00);
                let nsg = geo.nsg;
                let nb01 = (ne00 / f.qk * f.block_bytes) as u64;
                let args = KargsMulMvId {
                    nei0: nei0 as i32,
                    nei1: nei1 as i32,
                    nbi1: 4 * nei0 as u64,
                    ne00: ne00 as i32,
                    ne01: ne01 as i32,
                    ne02: ne02 as i32,
                    nb00: f.block_bytes as u64,
                    nb01,
                    nb02: nb01 * ne01 as u64,
                    ne10: ne00 as i32,
                    ne11: ne11 as i32,
                    ne12: nei1 as i32,
                    ne13: 1,
                    nb10: 4,
                    nb11: 4 * ne00 as u64,
                    nb12: 4 * (ne00 * ne11) as u64,
                    ne0: ne01 as i32,
                    ne1: nei0 as i32,
                    nb1: 4 * ne01 as u64,
                    nr0: nr0 as i32,
                    ..Default::default()
                };
                let x_bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
                let id_bytes: Vec<u8> = ids.iter().flat_map(|v| v.to_le_bytes()).collect();
                let mut dst = vec![0xffu8; 4 * ne01 * nei0 * nei1];
                let grid = [ne01.div_ceil(nr0 * nsg) as u32, 1, (nei0 * nei1) as u32];
                emu.dispatch(
                    &kernel,
                    [nsg as i16, 0, 1, 1, 1, i16::from(split)],
                    &bytes_of(&args),
                    &w,
                    &x_bytes,
                    &mut dst,
                    Some(&id_bytes),
                    grid,
                    nsg,
                    geo.smem,
                )
                .unwrap_or_else(|e| panic!("{} {kernel}: {e}", variant.name()));
                let out: Vec<f32> = dst
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                    .collect();
                check_against_reference(
                    &format!("{} {kernel} ne11={ne11}", variant.name()),
                    &out,
                    &want,
                );
                outs.push(out);
            }
            if outs.len() < 2 {
                continue;
            }
            for (i, (a, b)) in outs[0].iter().zip(&outs[1]).enumerate() {
                assert!(
                    (f64::from(*a) - f64::from(*b)).abs()
                        <= 2e-4 * f64::from(b.abs()) + 4e-6 * want[i].1,
                    "{} _id output {i}: ours {a}, stock {b}",
                    f.name
                );
            }
        }
    }
}

/// The emulator's own semantics, on kernels with known answers: simd_sum, simd_shuffle_down (the top lanes
/// keep their value), simd_broadcast, simd_max per simdgroup; threadgroup memory read across barriers; and an
/// error, not a result, for a simd_sum only half the lanes reach or lanes at different simd functions.
#[test]
fn emulator_semantics() {
    let t = metal::build_selftest(&cxx()).unwrap();
    let nsg = 3;
    let out = t.run(0, nsg).unwrap();
    for tid in 0..32 * nsg {
        let (lane, sg) = (tid % 32, tid / 32);
        assert_eq!(out[tid * 4], 496.0, "simd_sum of lanes, thread {tid}");
        let down = if lane + 3 < 32 { lane + 3 } else { lane };
        assert_eq!(
            out[tid * 4 + 1],
            down as f32,
            "simd_shuffle_down, thread {tid}"
        );
        assert_eq!(
            out[tid * 4 + 2],
            (100 * sg + 5) as f32,
            "simd_broadcast, thread {tid}"
        );
        assert_eq!(out[tid * 4 + 3], 31.0, "simd_max, thread {tid}");
    }
    let out = t.run(1, nsg).unwrap();
    let n = 32 * nsg;
    for (tid, v) in out.iter().take(n).enumerate() {
        assert_eq!(
            *v,
            2.0 * ((tid + 2) % n) as f32,
            "barrier ring, thread {tid}"
        );
    }
    let e = t.run(2, nsg).unwrap_err();
    assert!(e.contains("deadlock") && e.contains("simd_sum"), "{e}");
    let e = t.run(3, nsg).unwrap_err();
    assert!(e.contains("simd_sum") && e.contains("simd_max"), "{e}");
}

fn probe(gimple: &str, name: &str) -> Result<metal::opcount::OpCounts, String> {
    let f = metal::opcount::functions(gimple, &format!("{name} "));
    assert_eq!(f.len(), 1, "{name} in the probe dump");
    metal::opcount::hot_loop(f[0], 1)
}

/// The op counter on loops of known work (src/metal/emu/opcount_probe.cpp).
#[test]
fn op_counter_counts_known_loops() {
    let g = metal::probe_gimple(&cxx()).unwrap();
    use metal::opcount::OpCounts;
    let once = probe(&g, "probe_convert_fma").unwrap();
    assert_eq!(
        (
            once.fma,
            once.convert,
            once.loads,
            once.float_arith,
            once.float_round
        ),
        (1, 1, 2, 0, 0),
        "{once:?}"
    );
    // loop control: the counter, the compare-and-branch, address arithmetic
    assert!(once.branches == 1 && once.int_arith <= 4, "{once:?}");
    let twice = probe(&g, "probe_convert_fma_x2").unwrap();
    assert_eq!(
        (twice.fma, twice.convert, twice.loads),
        (2, 2, 4),
        "{twice:?}"
    );
    // GCC keeps the select as a branch on the tested bit: one and, one branch, one add per element
    let sel = probe(&g, "probe_select").unwrap();
    assert_eq!(
        (sel.float_arith, sel.loads, sel.branches),
        (1, 2, 2),
        "{sel:?}"
    );
    assert!(sel.int_arith >= 1, "{sel:?}");
    let unrolled = probe(&g, "probe_floor_unrolled").unwrap();
    assert_eq!(
        (
            unrolled.float_round,
            unrolled.convert,
            unrolled.loads,
            unrolled.float_arith
        ),
        (4, 4, 4, 8),
        "{unrolled:?}"
    );
    let rolled = probe(&g, "probe_rolled").unwrap_err();
    assert!(rolled.contains("inner loop"), "{rolled}");
    assert_eq!(
        OpCounts {
            fma: 1,
            loads: 2,
            ..Default::default()
        }
        .total(),
        3
    );
}

/// Counted work per weight in each kernel's hot loop, stock against ours (docs/METAL.md has the table):
/// ours must be lower in arithmetic and in everything counted; Q2_0 at most 3 floors and 4 FMAs per byte of
/// weights in its decode (plus the per-row scale and the activation staging shared by all rows).
#[test]
fn op_counts_per_weight_ours_below_stock() {
    let reports = metal::op_reports(
        &cxx(),
        &llama_src(),
        emulator(Variant::Patched),
        emulator(Variant::Stock),
    )
    .unwrap();
    for r in &reports {
        let per = |n: usize| n as f64 / r.weights as f64;
        let o = r.ours;
        eprintln!(
            "{}: per weight ours alu {:.3} (fma {:.3} float {:.3} round {:.3} cvt {:.3} int {:.3} br {:.3}) loads {:.3} stores {:.3}",
            r.format, per(o.alu()), per(o.fma), per(o.float_arith), per(o.float_round), per(o.convert),
            per(o.int_arith), per(o.branches), per(o.loads), per(o.stores)
        );
        assert_eq!(o.calls, 0, "{}: a call left in our hot loop", r.format);
        if let Some(s) = r.stock {
            eprintln!(
                "  stock alu {:.3} loads {:.3} stores {:.3}; {s:?}",
                per(s.alu()),
                per(s.loads),
                per(s.stores)
            );
            assert!(
                o.alu() < s.alu(),
                "{}: ours {} ALU ops per iteration, stock {}",
                r.format,
                o.alu(),
                s.alu()
            );
            assert!(
                o.total() < s.total(),
                "{}: ours {} ops per iteration, stock {}",
                r.format,
                o.total(),
                s.total()
            );
        }
        if r.format == "q2_0" || r.format == "pq2_0" {
            // The seed's bound: 3 floors and 4 FMAs per byte of codes (4 bytes per row per lane), beside one
            // scale FMA per row and the 12 staging FMAs shared by all rows.
            let nr0 = r.weights / 16;
            let bytes = nr0 * 4;
            assert!(o.float_round <= 3 * bytes, "{o:?}");
            assert!(o.fma <= 4 * bytes + nr0 + 12, "{o:?}");
        }
    }
    assert_eq!(reports.len(), metal::OUR_KERNELS.len());
}

/// Every grid index and every sign byte of the four IQ formats through the kernels' own decoders (index bits,
/// sign packing, scales): sweeps that put index b and sign byte b & 255 in every group of block b, decoded
/// weight for weight to the bits of the crate's dequantize model (the kernels' scalings by 1/4 are exact).
#[test]
fn iq_decoders_decode_every_index_and_sign() {
    let emu = emulator(Variant::Patched);
    let mut rng = SmallRng::seed_from_u64(9);
    for (fmt, f) in [IQ2_XXS, IQ2_XS, IQ2_S, IQ3_S].iter().enumerate() {
        let indices: usize = match f.name {
            "iq2_xxs" => 256,
            "iq2_xs" | "iq3_s" => 512,
            _ => 1024,
        };
        for b in 0..indices {
            let mut blk = vec![0u8; f.block_bytes];
            rng.fill(&mut blk[..]);
            // a normal f16 scale, so that every product is exact in both
            let d = rng.gen_range(0.25f32..2.0) * if rng.gen() { 1.0 } else { -1.0 };
            blk[..2].copy_from_slice(&half::f16::from_f32(d).to_bits().to_le_bytes());
            let sign = (b & 255) as u8;
            match f.name {
                "iq2_xxs" => {
                    let s7 = u32::from(sign & 127);
                    let aux = s7 | s7 << 7 | s7 << 14 | s7 << 21 | (rng.gen_range(0..16u32) << 28);
                    for ib in 0..8 {
                        let q = &mut blk[2 + 8 * ib..][..8];
                        q[..4].fill(b as u8);
                        q[4..].copy_from_slice(&aux.to_le_bytes());
                    }
                }
                "iq2_xs" => {
                    let q = (b as u16 & 511) | (u16::from(sign & 127) << 9);
                    for g in 0..32 {
                        blk[2 + 2 * g..][..2].copy_from_slice(&q.to_le_bytes());
                    }
                }
                "iq2_s" => {
                    blk[2..34].fill(b as u8);
                    blk[34..66].fill(sign);
                    blk[66..74].fill((b >> 8) as u8 * 0x55);
                }
                _ => {
                    blk[2..66].fill(b as u8);
                    blk[66..74].fill(if b >> 8 == 1 { 0xff } else { 0 });
                    blk[74..106].fill(sign);
                }
            }
            let want = (f.dequantize)(&blk);
            for ib in 0..8 {
                let got = emu.iq_dequant_sub(fmt as i32, &blk, ib).unwrap();
                for k in 0..32 {
                    assert_eq!(
                        got[k].to_bits(),
                        want[32 * ib + k].to_bits(),
                        "{} index {b} sign {sign:#04x} sub-block {ib} weight {k}: {} vs {}",
                        f.name,
                        got[k],
                        want[32 * ib + k]
                    );
                }
            }
        }
    }
}
