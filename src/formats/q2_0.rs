//! Q2_0 (ggml type 42): the ternary Bonsai format, 64 weights per block.
//!
//! Layout: `{ ggml_half d; uint8_t qs[16]; }`, 18 bytes. Weight `j` of a block is the 2-bit code
//! `c = (qs[j/4] >> 2·(j%4)) & 3` (least significant bits first) and decodes to `(c − 1)·d`, so {−1, 0, +1, +2}·d:
//! the format is not strictly ternary and every kernel accepts code 3.
//!
//! The dot product pairs one Q2_0 block with two q8_0 blocks. Stock x86 has no SIMD kernel: both builds run the
//! generic C, whose float chain per block `i` is
//! `sumi = 0; sumi += d1[2i]·isum0; sumi += d1[2i+1]·isum1; sumf += d0·sumi`, blocks in order from `sumf = 0`.
//! The haswell build is compiled with FMA and GCC contracts each `+= ·` into one fused multiply-add; the x64
//! build rounds the product and the sum separately. Integer sums are exact in any order, so kernels may compute
//! `isum0/isum1` however they like; the float chain is what they must keep.

use super::q8_0::{BlockQ8_0, QK8_0};
use crate::fp16::GgmlHalf;

pub const QK2_0: usize = 64;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockQ2_0 {
    pub d: GgmlHalf,
    pub qs: [u8; QK2_0 / 4],
}
const _: () = assert!(std::mem::size_of::<BlockQ2_0>() == 18);
const _: () = assert!(std::mem::align_of::<BlockQ2_0>() == 1);
const _: () = assert!(QK2_0 == 2 * QK8_0);

/// Code of weight `j` (0..64) of a block.
#[inline(always)]
pub fn code(qs: &[u8; 16], j: usize) -> u8 {
    (qs[j / 4] >> (2 * (j % 4))) & 3
}

/// `dequantize_row_q2_0`: `((int)c − 1) · d` in float, so code 1 gives `0·d` (−0 for a negative scale, NaN for an
/// infinite one), exactly as stock. Same bits in both builds.
pub fn dequantize_row_q2_0_model(x: &[BlockQ2_0], y: &mut [f32]) {
    for (block, out) in x.iter().zip(y.chunks_exact_mut(QK2_0)) {
        let d = block.d.to_f32();
        for (j, o) in out.iter_mut().enumerate() {
            *o = (code(&block.qs, j) as i32 - 1) as f32 * d;
        }
    }
}

/// `Σ (c − 1)·q` over half `k` (0 or 1) of a block: the integer sum stock multiplies by `d1` of q8 block `2i + k`.
#[inline(always)]
pub fn half_block_isum(x: &BlockQ2_0, y: &BlockQ8_0, k: usize) -> i32 {
    (0..QK8_0)
        .map(|j| (code(&x.qs, 32 * k + j) as i32 - 1) * y.qs[j] as i32)
        .sum()
}

/// The stock chain over `x`, continuing from `sumf` (0 for a whole row): `FMA` selects the haswell build's
/// contracted form, otherwise every product and sum rounds on its own. NaNs in the operand order of the
/// builds' instructions: haswell `vfmadd231ss sumi, isum, d1` and `vfmadd231ss sumf, sumi, d0` (a new NaN
/// scale before the accumulator); x64 `mulss isum, d1`, `addss sumi, ·`, `mulss sumi, d0`, `addss sumf, ·`. The SIMD kernels finish their rows with
/// it, so the float order lives in one place.
// Always inlined: the SIMD kernels finish their rows with it inside their own target features, where the
// contracted steps are FMA instructions (compiled on its own, for the baseline CPU, each is a call to `fmaf`).
#[inline(always)]
pub fn vec_dot_q2_0_q8_0_from<const FMA: bool>(
    mut sumf: f32,
    x: &[BlockQ2_0],
    y: &[BlockQ8_0],
) -> f32 {
    use crate::x86_float::{add, fmadd, mul};
    for (i, xb) in x.iter().enumerate() {
        let (y0, y1) = (&y[2 * i], &y[2 * i + 1]);
        let s0 = half_block_isum(xb, y0, 0) as f32;
        let s1 = half_block_isum(xb, y1, 1) as f32;
        let (d0, d10, d11) = (xb.d.to_f32(), y0.d.to_f32(), y1.d.to_f32());
        if FMA {
            let sumi = fmadd(s1, d11, fmadd(s0, d10, 0.0));
            sumf = fmadd(sumi, d0, sumf);
        } else {
            let sumi = add(add(0.0, mul(s0, d10)), mul(s1, d11));
            sumf = add(sumf, mul(sumi, d0));
        }
    }
    sumf
}

/// The haswell build's `ggml_vec_dot_q2_0_q8_0`: the generic C with FMA contraction.
pub fn vec_dot_q2_0_q8_0_fma_model(x: &[BlockQ2_0], y: &[BlockQ8_0]) -> f32 {
    vec_dot_q2_0_q8_0_from::<true>(0.0, x, y)
}

/// The x64 build's `ggml_vec_dot_q2_0_q8_0`: the same C, every product and sum rounded on its own.
pub fn vec_dot_q2_0_q8_0_nofma_model(x: &[BlockQ2_0], y: &[BlockQ8_0]) -> f32 {
    vec_dot_q2_0_q8_0_from::<false>(0.0, x, y)
}

/// ggml ≥ 0.27.0's own AVX2 `ggml_vec_dot_q2_0_q8_0` (its haswell and later x86 variants; "pattern C" beside
/// the generic C's two chains above), read from the binaries and checked against them (`tests/prebuilt.rs`).
/// Each half block gives eight lane sums of four products `(c − 1)·q` (weights `4l..4l+3` of the half in lane
/// `l`), exact in i32; its scale is one rounded product `d_x·d_y`; each lane then takes
/// `acc = fma(sum, d, acc)`, half 0 before half 1, in one of two eight-lane accumulators: even blocks in the
/// first, odd blocks in the second. At the end the two are added lane by lane and reduced as
/// `((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))`.
///
/// NaN results follow the instructions' operands (`crate::x86_float`), the same in every variant of 0.27.0 and
/// 1.0.0: `d_x` before `d_y`, the scale before the accumulator, the first accumulator before the second, the
/// low lanes before the high ones, then `l2 + l6` before `l0 + l4` and `l3 + l7` before `l1 + l5`.
pub fn vec_dot_q2_0_q8_0_avx2_model(x: &[BlockQ2_0], y: &[BlockQ8_0]) -> f32 {
    use crate::x86_float::{fmadd, mul};
    let mut acc = [[0f32; 8]; 2];
    for (i, xb) in x.iter().enumerate() {
        let a = &mut acc[i % 2];
        for h in 0..2 {
            let yb = &y[2 * i + h];
            let d = mul(xb.d.to_f32(), yb.d.to_f32());
            for (l, lane) in a.iter_mut().enumerate() {
                let sum: i32 = (4 * l..4 * l + 4)
                    .map(|j| (code(&xb.qs, 32 * h + j) as i32 - 1) * yb.qs[j] as i32)
                    .sum();
                *lane = fmadd(sum as f32, d, *lane);
            }
        }
    }
    avx2_model_reduce(avx2_model_lanes(acc[0], acc[1]))
}

/// The two accumulators of `vec_dot_q2_0_q8_0_avx2_model` added lane by lane, the first one's NaN first
/// (stock's `vaddps acc0, acc1`).
pub fn avx2_model_lanes(acc0: [f32; 8], acc1: [f32; 8]) -> [f32; 8] {
    std::array::from_fn(|k| crate::x86_float::add(acc0[k], acc1[k]))
}

/// The end of `vec_dot_q2_0_q8_0_avx2_model` from its eight lanes (the accumulators already added), in the
/// kernel's order and NaN priorities.
pub fn avx2_model_reduce(l: [f32; 8]) -> f32 {
    use crate::x86_float::add;
    let m: [f32; 4] = std::array::from_fn(|k| add(l[k], l[k + 4]));
    add(add(m[2], m[0]), add(m[3], m[1]))
}

/// The model of `order`.
pub fn vec_dot_q2_0_q8_0_model(order: crate::FloatOrder, x: &[BlockQ2_0], y: &[BlockQ8_0]) -> f32 {
    match order {
        crate::FloatOrder::Haswell => vec_dot_q2_0_q8_0_fma_model(x, y),
        crate::FloatOrder::X64 => vec_dot_q2_0_q8_0_nofma_model(x, y),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(d: f32, codes: [u8; 64]) -> BlockQ2_0 {
        let mut qs = [0u8; 16];
        for (j, &c) in codes.iter().enumerate() {
            qs[j / 4] |= c << (2 * (j % 4));
        }
        BlockQ2_0 {
            d: GgmlHalf::from_bits(half::f16::from_f32(d).to_bits()),
            qs,
        }
    }

    #[test]
    fn decode_is_scale_first_lsb_first_with_code_three_as_plus_two() {
        let mut codes = [1u8; 64];
        codes[0] = 0;
        codes[1] = 2;
        codes[2] = 3;
        codes[63] = 3;
        let b = block(0.5, codes);
        assert_eq!(b.qs[0], 0b11_10_00 | (1 << 6));
        let mut y = [9f32; 64];
        dequantize_row_q2_0_model(&[b], &mut y);
        assert_eq!(&y[..4], &[-0.5, 0.5, 1.0, 0.0]);
        assert_eq!(y[63], 1.0);
    }

    #[test]
    fn zero_code_with_negative_scale_is_negative_zero() {
        let b = block(-2.0, [1; 64]);
        let mut y = [0f32; 64];
        dequantize_row_q2_0_model(&[b], &mut y);
        assert!(y.iter().all(|v| v.to_bits() == (-0.0f32).to_bits()));
    }

    #[test]
    fn models_agree_with_f64() {
        let x = [block(1.0, [2; 64]), block(1.0, [2; 64])];
        let mut y = [BlockQ8_0::default(); 4];
        let d1 = [0.1f32, 0.3, 0.7, 1.3];
        for (k, yb) in y.iter_mut().enumerate() {
            yb.d = GgmlHalf::from_bits(half::f16::from_f32(d1[k]).to_bits());
            yb.qs = [3; 32];
        }
        let fma = vec_dot_q2_0_q8_0_fma_model(&x, &y);
        let nofma = vec_dot_q2_0_q8_0_nofma_model(&x, &y);
        let avx2 = vec_dot_q2_0_q8_0_avx2_model(&x, &y);
        let exact: f64 = y.iter().map(|b| b.d.to_f32() as f64 * 96.0).sum();
        assert!((fma as f64 - exact).abs() < 1e-4 * exact);
        assert!((nofma as f64 - exact).abs() < 1e-4 * exact);
        assert!((avx2 as f64 - exact).abs() < 1e-4 * exact);
    }

    /// The AVX2 model pairs every weight with its own activation and counts it once, over an odd number of
    /// blocks (the tail block in the first accumulator): with scales that make every step exact its result is
    /// the plain sum. (Its float order is checked against the real kernel in `tests/prebuilt.rs`.)
    #[test]
    fn avx2_model_lanes_and_accumulators_cover_every_weight_once() {
        let mut x = Vec::new();
        let mut y = Vec::new();
        let mut want = 0f64;
        for i in 0..3 {
            let mut codes = [1u8; 64];
            for (j, c) in codes.iter_mut().enumerate() {
                *c = [0, 1, 2, 3][(j * 7 + i) % 4];
            }
            x.push(block(1.0, codes));
            for h in 0..2 {
                let mut yb = BlockQ8_0 {
                    d: GgmlHalf::from_bits(half::f16::from_f32(0.5).to_bits()),
                    ..Default::default()
                };
                for (j, q) in yb.qs.iter_mut().enumerate() {
                    *q = (j as i8) - 16 + i as i8;
                    want += 0.5 * ((codes[32 * h + j] as i32 - 1) * *q as i32) as f64;
                }
                y.push(yb);
            }
        }
        assert_eq!(vec_dot_q2_0_q8_0_avx2_model(&x, &y) as f64, want);
    }
}
