//! Q1_0 (ggml type 41): the 1-bit Bonsai format, 128 weights per block.
//!
//! Layout: `{ ggml_half d; uint8_t qs[16]; }`, 18 bytes. Weight `j` of a block is bit `j % 8` of `qs[j / 8]`
//! (least significant bit first): set decodes to `+d`, clear to `−d`. The dot product meets four q8_0 blocks per
//! block: q8_0 block `4i + k` meets bytes `qs[4k..4k + 4]`.
//!
//! The two stock builds run different code, so their float orders differ in shape, not only in FMA use:
//! - x64 (the `_generic` C): per block `sumi = 0; sumi += d1[4i+k]·isum_k` for k = 0..3, `sumf += d0·sumi`,
//!   every product and sum rounded on its own; `isum_k = Σ ±q` in `int`, so a cleared bit against q = −128
//!   contributes +128.
//! - haswell (the AVX2 kernel): eight float lanes, lane `j` of q8_0 block `k` holding the sum of the
//!   sign-applied quants `4j..4j+3` (`s_k[j]`). Per block `acc_block = d1_0·s_0`, then
//!   `acc_block = fma(d1_k, s_k, acc_block)` for k = 1..3, then `acc = fma(d0, acc_block, acc)`; at the end
//!   `hsum_float_8(acc) = ((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7))`. The sign is applied to bytes
//!   (`(q ^ m) − m`), so a cleared bit against q = −128 gives −128, not +128.

use super::q8_0::{BlockQ8_0, QK8_0};
use crate::fp16::GgmlHalf;

pub const QK1_0: usize = 128;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockQ1_0 {
    pub d: GgmlHalf,
    pub qs: [u8; QK1_0 / 8],
}
const _: () = assert!(std::mem::size_of::<BlockQ1_0>() == 18);
const _: () = assert!(std::mem::align_of::<BlockQ1_0>() == 1);
const _: () = assert!(QK1_0 == 4 * QK8_0);

/// Whether weight `j` (0..128) of a block is positive.
#[inline(always)]
pub fn bit(qs: &[u8; 16], j: usize) -> bool {
    (qs[j / 8] >> (j % 8)) & 1 == 1
}

/// `dequantize_row_q1_0`: `d` for a set bit, `−d` (the float negation, so NaN payloads keep, signs flip) for a
/// clear one. Same bits in both builds.
pub fn dequantize_row_q1_0_model(x: &[BlockQ1_0], y: &mut [f32]) {
    for (block, out) in x.iter().zip(y.chunks_exact_mut(QK1_0)) {
        let d = block.d.to_f32();
        for (j, o) in out.iter_mut().enumerate() {
            *o = if bit(&block.qs, j) { d } else { -d };
        }
    }
}

/// The x64 build's integer sum of quarter `k` against its q8_0 block: `Σ ±q` in `int` (−(−128) = +128).
#[inline(always)]
pub fn quarter_isum_exact(x: &BlockQ1_0, y: &BlockQ8_0, k: usize) -> i32 {
    (0..QK8_0)
        .map(|j| {
            let q = y.qs[j] as i32;
            if bit(&x.qs, 32 * k + j) {
                q
            } else {
                -q
            }
        })
        .sum()
}

/// The haswell build's eight lane sums of quarter `k`: lane `l` sums quants `4l..4l+3`, each negated as a byte
/// (wrapping, so −128 stays −128) where its bit is clear.
#[inline(always)]
pub fn quarter_lanes_wrapping(x: &BlockQ1_0, y: &BlockQ8_0, k: usize) -> [i32; 8] {
    let mut lanes = [0i32; 8];
    for (j, &q) in y.qs.iter().enumerate() {
        let v = if bit(&x.qs, 32 * k + j) {
            q
        } else {
            q.wrapping_neg()
        };
        lanes[j / 4] += v as i32;
    }
    lanes
}

/// One block of the haswell chain: `acc` (eight lanes) continued by block `x` against its four q8_0 blocks
/// `y`. The SIMD kernels finish rows with it, so the float order lives here.
#[inline(always)]
pub fn haswell_block(mut acc: [f32; 8], x: &BlockQ1_0, y: &[BlockQ8_0]) -> [f32; 8] {
    use crate::x86_float::{fmadd, mul};
    let d0 = x.d.to_f32();
    let mut acc_block = [0f32; 8];
    for (k, yk) in y[..4].iter().enumerate() {
        let d1 = yk.d.to_f32();
        let s = quarter_lanes_wrapping(x, yk, k);
        for l in 0..8 {
            acc_block[l] = if k == 0 {
                mul(d1, s[l] as f32)
            } else {
                fmadd(d1, s[l] as f32, acc_block[l])
            };
        }
    }
    for l in 0..8 {
        acc[l] = fmadd(d0, acc_block[l], acc[l]);
    }
    acc
}

/// ggml's `hsum_float_8`: high half plus low half, then lanes 0 + 2 and 1 + 3, then their sum. NaNs as GCC
/// compiles it in every stock AVX2 kernel that ends with it: `vaddps hi, lo` (a high lane's NaN first), then
/// `r0 + r2`, `r1 + r3` and their sum, each left operand first.
#[inline(always)]
pub fn hsum_float_8(a: [f32; 8]) -> f32 {
    use crate::x86_float::add;
    let r: [f32; 4] = std::array::from_fn(|k| add(a[k + 4], a[k]));
    add(add(r[0], r[2]), add(r[1], r[3]))
}

/// The haswell lanes over `x` continuing from `acc`.
pub fn haswell_lanes_from(mut acc: [f32; 8], x: &[BlockQ1_0], y: &[BlockQ8_0]) -> [f32; 8] {
    for (i, xb) in x.iter().enumerate() {
        acc = haswell_block(acc, xb, &y[4 * i..4 * i + 4]);
    }
    acc
}

/// The x64 chain over `x`, continuing from `sumf` (0 for a whole row): per block `sumi` from +0, four
/// `sumi += isum·d1`, then `sumf += d0·sumi`, each step rounded. NaNs in the operand order of the x64 build's
/// `mulss`/`addss`: the accumulator first in each sum, `d0` before `sumi`.
pub fn x64_chain_from(mut sumf: f32, x: &[BlockQ1_0], y: &[BlockQ8_0]) -> f32 {
    use crate::x86_float::{add, mul};
    for (i, xb) in x.iter().enumerate() {
        let mut sumi = 0.0f32;
        for (k, yk) in y[4 * i..4 * i + 4].iter().enumerate() {
            sumi = add(
                sumi,
                mul(quarter_isum_exact(xb, yk, k) as f32, yk.d.to_f32()),
            );
        }
        sumf = add(sumf, mul(xb.d.to_f32(), sumi));
    }
    sumf
}

/// The haswell build's `ggml_vec_dot_q1_0_q8_0` (its AVX2 kernel).
pub fn vec_dot_q1_0_q8_0_haswell_model(x: &[BlockQ1_0], y: &[BlockQ8_0]) -> f32 {
    hsum_float_8(haswell_lanes_from([0.0; 8], x, y))
}

/// The x64 build's `ggml_vec_dot_q1_0_q8_0` (the generic C, no FMA).
pub fn vec_dot_q1_0_q8_0_x64_model(x: &[BlockQ1_0], y: &[BlockQ8_0]) -> f32 {
    x64_chain_from(0.0, x, y)
}

/// The model of `order`.
pub fn vec_dot_q1_0_q8_0_model(order: crate::FloatOrder, x: &[BlockQ1_0], y: &[BlockQ8_0]) -> f32 {
    match order {
        crate::FloatOrder::Haswell => vec_dot_q1_0_q8_0_haswell_model(x, y),
        crate::FloatOrder::X64 => vec_dot_q1_0_q8_0_x64_model(x, y),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn half(v: f32) -> GgmlHalf {
        GgmlHalf::from_bits(half::f16::from_f32(v).to_bits())
    }

    fn q8(d: f32, qs: [i8; 32]) -> BlockQ8_0 {
        BlockQ8_0 { d: half(d), qs }
    }

    #[test]
    fn decode_is_lsb_first_set_positive() {
        let mut qs = [0u8; 16];
        qs[0] = 0b0000_0101; // weights 0 and 2 positive
        qs[15] = 0x80; // weight 127 positive
        let b = BlockQ1_0 { d: half(0.5), qs };
        let mut y = [0f32; 128];
        dequantize_row_q1_0_model(&[b], &mut y);
        assert_eq!(&y[..4], &[0.5, -0.5, 0.5, -0.5]);
        assert_eq!(y[126], -0.5);
        assert_eq!(y[127], 0.5);
    }

    #[test]
    fn quarter_k_meets_bytes_4k_to_4k_plus_3() {
        // Only quarter 2's bits set: its q8_0 block counts +, the others −.
        let mut qs = [0u8; 16];
        qs[8..12].fill(0xff);
        let b = BlockQ1_0 { d: half(1.0), qs };
        let y: Vec<BlockQ8_0> = (0..4).map(|_| q8(1.0, [1; 32])).collect();
        let s: Vec<i32> = (0..4).map(|k| quarter_isum_exact(&b, &y[k], k)).collect();
        assert_eq!(s, [-32, -32, 32, -32]);
        assert_eq!(vec_dot_q1_0_q8_0_x64_model(&[b], &y), -64.0);
        assert_eq!(vec_dot_q1_0_q8_0_haswell_model(&[b], &y), -64.0);
    }

    #[test]
    fn minus_128_against_a_clear_bit_differs_between_builds() {
        let b = BlockQ1_0 {
            d: half(1.0),
            qs: [0; 16],
        };
        let mut y: Vec<BlockQ8_0> = (0..4).map(|_| q8(1.0, [0; 32])).collect();
        y[0].qs[0] = -128;
        assert_eq!(quarter_isum_exact(&b, &y[0], 0), 128);
        assert_eq!(quarter_lanes_wrapping(&b, &y[0], 0)[0], -128);
        assert_eq!(vec_dot_q1_0_q8_0_x64_model(&[b], &y), 128.0);
        assert_eq!(vec_dot_q1_0_q8_0_haswell_model(&[b], &y), -128.0);
    }

    #[test]
    fn lane_l_sums_quants_4l_to_4l_plus_3() {
        let b = BlockQ1_0 {
            d: half(1.0),
            qs: [0xff; 16],
        };
        let y = q8(1.0, std::array::from_fn(|j| j as i8));
        let lanes = quarter_lanes_wrapping(&b, &y, 0);
        for (l, &v) in lanes.iter().enumerate() {
            assert_eq!(v, (4 * l..4 * l + 4).sum::<usize>() as i32);
        }
    }

    #[test]
    fn hsum_pairs_the_halves_first() {
        // 2^24 + 1 is not a float, 2^24 + 2 is: the order of the additions shows in the result. Lanes 3 and 5
        // meet only in the last addition, as one sum of 2; a left-to-right sum (or pairs of neighbours) would
        // add each 1 to 2^24 on its own and lose both.
        let big = 16_777_216.0f32;
        let c = [big, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0];
        assert_eq!(hsum_float_8(c), big + 2.0);
        assert_eq!(c.iter().fold(0.0f32, |s, v| s + v), big);
        // Lanes 0 and 4 meet first: 2^24 + 1 rounds to even.
        let a = [big, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0];
        assert_eq!(hsum_float_8(a), big);
    }

    #[test]
    fn models_agree_with_f64() {
        let x = [
            BlockQ1_0 {
                d: half(0.25),
                qs: [0xa5; 16],
            },
            BlockQ1_0 {
                d: half(-0.75),
                qs: [0x3c; 16],
            },
        ];
        let y: Vec<BlockQ8_0> = (0..8)
            .map(|b| {
                q8(
                    0.1 * (b + 1) as f32,
                    std::array::from_fn(|j| (j as i8) - 16),
                )
            })
            .collect();
        let mut exact = 0f64;
        for (i, xb) in x.iter().enumerate() {
            for j in 0..128 {
                let w = if bit(&xb.qs, j) { 1.0 } else { -1.0 } * xb.d.to_f32() as f64;
                let yb = &y[4 * i + j / 32];
                exact += w * yb.d.to_f32() as f64 * yb.qs[j % 32] as f64;
            }
        }
        for got in [
            vec_dot_q1_0_q8_0_x64_model(&x, &y),
            vec_dot_q1_0_q8_0_haswell_model(&x, &y),
        ] {
            assert!((got as f64 - exact).abs() < 1e-4 * exact.abs().max(1.0));
        }
    }
}
