//! PQ2_0 and PTQ1_0 have no stock build to compare with (PrismML's fork is not available here), so the fork's
//! generic C is written from the specification (`bench/c/pq2_0_generic.c`, `bench/c/ptq1_0_generic.c`), compiled
//! with and without FMA, and every instruction set's kernel of the matching float order must give its bits,
//! `to_bits()`, on random and adversarial rows, NaN results included (the models take each step's operands in
//! the order of the compiled C, so a row with two NaN scales returns the same one of them).

mod common;

use std::ffi::c_void;

use ggml_lowbit::dispatch::{detected_isa, Isa, Kernels};
use ggml_lowbit::formats::blocks;
use ggml_lowbit::stock::VecDotFn;
use ggml_lowbit::FloatOrder;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

#[derive(Clone, Copy, PartialEq)]
enum Format {
    Pq2_0,
    Ptq1_0,
}

impl Format {
    fn name(self) -> &'static str {
        match self {
            Format::Pq2_0 => "pq2_0",
            Format::Ptq1_0 => "ptq1_0",
        }
    }

    fn block_bytes(self) -> usize {
        match self {
            Format::Pq2_0 => 34,
            Format::Ptq1_0 => 28,
        }
    }

    /// Byte range of the f16 scale: first in PQ2_0, last in PTQ1_0.
    fn scale_at(self) -> std::ops::Range<usize> {
        match self {
            Format::Pq2_0 => 0..2,
            Format::Ptq1_0 => 26..28,
        }
    }

    fn reference(self, r: &common::fork_c::ForkReference) -> VecDotFn {
        match self {
            Format::Pq2_0 => r.vec_dot_pq2_0,
            Format::Ptq1_0 => r.vec_dot_ptq1_0,
        }
    }

    fn ours(self, k: &Kernels, x: &[u8], y: &[u8]) -> f32 {
        match self {
            Format::Pq2_0 => k.vec_dot_pq2_0_q8_0(blocks(x), blocks(y)),
            Format::Ptq1_0 => k.vec_dot_ptq1_0_q8_0(blocks(x), blocks(y)),
        }
    }
}

/// An ordinary f16 scale from `base`, or one time in 40 a special one (±0, subnormal, ±65504, ±Inf, and NaNs
/// of both signs, quiet and signalling, with different payloads, so that which NaN a row returns shows).
fn test_scale(rng: &mut SmallRng, base: u16) -> u16 {
    const SPECIALS: [u16; 13] = [
        0x0000, 0x8000, 0x0001, 0x83ff, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe00,
        0xfd55, 0x7e2a,
    ];
    if rng.gen_ratio(1, 40) {
        SPECIALS[rng.gen_range(0..SPECIALS.len())]
    } else {
        base + rng.gen_range(0..0x1400)
    }
}

/// Gives each `format` block of `x` a `test_scale` scale (ordinary ones around 0.002 to 0.02).
fn set_weight_scales(format: Format, rng: &mut SmallRng, x: &mut [u8]) {
    for blk in x.chunks_exact_mut(format.block_bytes()) {
        blk[format.scale_at()].copy_from_slice(&test_scale(rng, 0x2000).to_le_bytes());
    }
}

/// `n` q8_0 blocks: `test_scale` scales (ordinary ones around 0.03 to 0.3), random quants, all −128 in block
/// `i` where `all_min(i)`.
fn q8_0_blocks(rng: &mut SmallRng, n: usize, all_min: impl Fn(usize) -> bool) -> Vec<u8> {
    let mut y = vec![0u8; n * 34];
    rng.fill(&mut y[..]);
    for (i, blk) in y.chunks_exact_mut(34).enumerate() {
        blk[..2].copy_from_slice(&test_scale(rng, 0x2800).to_le_bytes());
        if all_min(i) {
            blk[2..].fill(0x80);
        }
    }
    y
}

/// Panics with `context()` unless `got` has `want`'s bits; returns whether it is a NaN (to count them).
fn same_bits(got: f32, want: f32, context: impl Fn() -> String) -> bool {
    assert!(
        got.to_bits() == want.to_bits(),
        "{}: {got:e} ({:#010x}) vs {want:e} ({:#010x})",
        context(),
        got.to_bits(),
        want.to_bits()
    );
    got.is_nan()
}

fn call(f: VecDotFn, n: usize, x: &[u8], y: &[u8]) -> f32 {
    let mut s = 0f32;
    // SAFETY: the callers size x for n/128 blocks and y for n/32 q8_0 blocks; `s` is one float.
    unsafe {
        f(
            n as i32,
            &mut s,
            0,
            x.as_ptr() as *const c_void,
            0,
            y.as_ptr() as *const c_void,
            0,
            1,
        )
    };
    s
}

fn check(format: Format, order: FloatOrder, fma: bool) {
    let reference = common::fork_c::build(fma);
    let reference = format.reference(&reference);
    // Every form a CPU may pick (the q8_0 scales by gather or by permutes), not only this CPU's.
    let kernels: Vec<Kernels> = Isa::ALL
        .into_iter()
        .filter(|&i| i <= detected_isa())
        .flat_map(|i| Kernels::every_variant(i, order))
        .collect();
    let bb = format.block_bytes();
    let mut rng = SmallRng::seed_from_u64(if fma { 11 } else { 12 });
    let (mut cases, mut nan_results) = (0, 0);
    for case in 0..50_000usize {
        let nb = 1 + case % 12;
        let mut x = vec![0u8; nb * bb];
        for (b, blk) in x.chunks_exact_mut(bb).enumerate() {
            for (j, q) in blk.iter_mut().enumerate() {
                *q = match case % 4 {
                    0 => ((case / 4 + 7 * b + 31 * j) % 256) as u8,
                    1 => 0xff,
                    _ => rng.gen(),
                };
            }
        }
        set_weight_scales(format, &mut rng, &mut x);
        let y = q8_0_blocks(&mut rng, 4 * nb, |_| case % 7 == 0);
        let want = call(reference, nb * 128, &x, &y);
        for k in &kernels {
            let got = format.ours(k, &x, &y);
            if same_bits(got, want, || {
                format!("{:?} {} case {case}", k.isa, order.name())
            }) {
                nan_results += 1;
            }
            cases += 1;
        }
    }
    println!(
        "{} {} against C built with{} FMA: {cases} comparisons, {nan_results} NaN results, bit-equal",
        format.name(),
        order.name(),
        if fma { "" } else { "out" }
    );
}

#[test]
fn pq2_0_matches_the_fork_generic_c_built_with_fma() {
    check(Format::Pq2_0, FloatOrder::Haswell, true);
}

#[test]
fn pq2_0_matches_the_fork_generic_c_built_without_fma() {
    check(Format::Pq2_0, FloatOrder::X64, false);
}

#[test]
fn ptq1_0_matches_the_fork_generic_c_built_with_fma() {
    check(Format::Ptq1_0, FloatOrder::Haswell, true);
}

#[test]
fn ptq1_0_matches_the_fork_generic_c_built_without_fma() {
    check(Format::Ptq1_0, FloatOrder::X64, false);
}

/// The tile products (`Kernels::mul_mat_pq2_0_q8_0`, `_ptq1_0_q8_0`, the C API's `ggml_lowbit_mul_mat_*`):
/// every element against the C's vec_dot on its (row, column) pair, `to_bits()`, for every instruction set's
/// table of the matching order, both C builds, 60,000 elements each; shapes with row tails (1..=9 rows: the
/// four-row steps and single rows), block tails (every `nb % 4`), several columns, rows and columns with gaps
/// between them, all-0xff rows, q8 = −128 blocks and special scales.
fn check_tiles(format: Format, order: FloatOrder, fma: bool) {
    use ggml_lowbit::tiles::Rows;
    let reference = common::fork_c::build(fma);
    let reference = format.reference(&reference);
    let bb = format.block_bytes();
    let mut rng = SmallRng::seed_from_u64(if fma { 21 } else { 22 });
    let (mut elements, mut nan_results) = (0usize, 0usize);
    for isa in Isa::ALL.into_iter().filter(|&i| i <= detected_isa()) {
        let k = Kernels::new(isa, order);
        let (mut case, start) = (0usize, elements);
        while elements - start < 60_000 {
            let (nb, rows, cols) = (1 + case % 13, 1 + case % 9, 1 + case % 4);
            let (xs, ys) = (nb + case % 2, 4 * nb + case % 3);
            let mut x = vec![0u8; rows * xs * bb];
            if case % 5 == 0 {
                x.fill(0xff);
            } else {
                rng.fill(&mut x[..]);
            }
            set_weight_scales(format, &mut rng, &mut x);
            let y = q8_0_blocks(&mut rng, cols * ys, |i| i % 11 == 0);
            let mut got = vec![f32::NAN; rows * cols];
            let mut emit = |r: usize, c: usize, v: f32| got[c * rows + r] = v;
            match format {
                Format::Pq2_0 => k.mul_mat_pq2_0_q8_0(
                    Rows::new(blocks(&x), nb, xs, rows).unwrap(),
                    Rows::new(blocks(&y), 4 * nb, ys, cols).unwrap(),
                    &mut emit,
                ),
                Format::Ptq1_0 => k.mul_mat_ptq1_0_q8_0(
                    Rows::new(blocks(&x), nb, xs, rows).unwrap(),
                    Rows::new(blocks(&y), 4 * nb, ys, cols).unwrap(),
                    &mut emit,
                ),
            }
            for c in 0..cols {
                for r in 0..rows {
                    let want = call(
                        reference,
                        nb * 128,
                        &x[r * xs * bb..(r * xs + nb) * bb],
                        &y[c * ys * 34..(c * ys + 4 * nb) * 34],
                    );
                    let context = || {
                        let o = order.name();
                        format!("{isa:?} {o} nb {nb} rows {rows} cols {cols}: ({r}, {c})")
                    };
                    if same_bits(got[c * rows + r], want, context) {
                        nan_results += 1;
                    }
                    elements += 1;
                }
            }
            case += 1;
        }
    }
    println!(
        "{} tiles {} against C built with{} FMA: {elements} elements, {nan_results} NaN results, bit-equal",
        format.name(),
        order.name(),
        if fma { "" } else { "out" }
    );
}

#[test]
fn tiles_match_the_fork_generic_c_built_with_fma() {
    check_tiles(Format::Pq2_0, FloatOrder::Haswell, true);
    check_tiles(Format::Ptq1_0, FloatOrder::Haswell, true);
}

#[test]
fn tiles_match_the_fork_generic_c_built_without_fma() {
    check_tiles(Format::Pq2_0, FloatOrder::X64, false);
    check_tiles(Format::Ptq1_0, FloatOrder::X64, false);
}

#[test]
fn the_two_c_builds_differ_so_the_check_can_fail() {
    let (a, b) = (common::fork_c::build(true), common::fork_c::build(false));
    for format in [Format::Pq2_0, Format::Ptq1_0] {
        let bb = format.block_bytes();
        let mut rng = SmallRng::seed_from_u64(3);
        let differ = (0..2000).any(|_| {
            let mut x = vec![0u8; 8 * bb];
            let mut y = vec![0u8; 32 * 34];
            rng.fill(&mut x[..]);
            rng.fill(&mut y[..]);
            for blk in x.chunks_exact_mut(bb) {
                let d = 0x2400u16 + rng.gen_range(0..0x800);
                blk[format.scale_at()].copy_from_slice(&d.to_le_bytes());
            }
            for blk in y.chunks_exact_mut(34) {
                blk[..2].copy_from_slice(&(0x2400u16 + rng.gen_range(0..0x800)).to_le_bytes());
            }
            let s = call(format.reference(&a), 1024, &x, &y);
            let t = call(format.reference(&b), 1024, &x, &y);
            s.to_bits() != t.to_bits()
        });
        assert!(
            differ,
            "the FMA and non-FMA builds of the reference never differed"
        );
    }
}

/// `dequantize_row_pq2_0` / `dequantize_row_ptq1_0`: every instruction set's export path against the C, bit for
/// bit, on every byte value in every position (the PTQ1_0 rows also carry bytes 243..=255) and special scales.
#[test]
fn dequantize_matches_the_fork_generic_c() {
    let reference = common::fork_c::build(true);
    let specials = [
        0x0000u16, 0x8000, 0x0001, 0x83ff, 0x7c00, 0xfc00, 0x7e00, 0xfd55,
    ];
    for format in [Format::Pq2_0, Format::Ptq1_0] {
        let bb = format.block_bytes();
        let deq = match format {
            Format::Pq2_0 => reference.dequantize_pq2_0,
            Format::Ptq1_0 => reference.dequantize_ptq1_0,
        };
        for value in 0..=255u8 {
            let nb = 8;
            let mut x = vec![0u8; nb * bb];
            for (b, blk) in x.chunks_exact_mut(bb).enumerate() {
                for (j, q) in blk.iter_mut().enumerate() {
                    *q = value.wrapping_add((b * 29 + j * 7) as u8 & if b == 0 { 0 } else { 0xff });
                }
                let d = if b < specials.len() && value % 2 == 0 {
                    specials[b]
                } else {
                    0x2000 + value as u16 * 16 + b as u16
                };
                blk[format.scale_at()].copy_from_slice(&d.to_le_bytes());
            }
            let mut want = vec![0f32; nb * 128];
            // SAFETY: nb blocks in, nb·128 floats out.
            unsafe {
                deq(
                    x.as_ptr() as *const c_void,
                    want.as_mut_ptr(),
                    (nb * 128) as i64,
                )
            };
            for isa in Isa::ALL.into_iter().filter(|&i| i <= detected_isa()) {
                let k = Kernels::new(isa, FloatOrder::Haswell);
                let mut got = vec![0f32; nb * 128];
                match format {
                    Format::Pq2_0 => k.dequantize_row_pq2_0(blocks(&x), &mut got),
                    Format::Ptq1_0 => k.dequantize_row_ptq1_0(blocks(&x), &mut got),
                }
                for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        a.to_bits() == b.to_bits(),
                        "{isa:?} byte {value} element {i}: {a:e} vs {b:e}"
                    );
                }
            }
        }
    }
}
