//! The dot-product shape the IQ grid formats share (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S against q8_K).
//!
//! Every one of them decodes a 256-weight block into, per element `e`, an unsigned grid magnitude `g` (a byte
//! of a grid entry), a sign and an odd integer scale `s = 2·nibble + 1` shared by 16 (IQ2_XS, IQ2_S) or 32
//! (IQ2_XXS, IQ3_XXS, IQ3_S) consecutive elements, plus one f16 scale `d`. The formats differ only in where
//! those come from (`IqBlock`); both stock builds then compute the same way for all five:
//! - x64 (`_generic`): per block `bsum = Σ s·g·(±q)` exactly in `int` (a negated −128 is +128),
//!   `sumf += d·(float)bsum` with `d = f16(x.d)·y.d`, each step rounded; `*s = OUTPUT_SCALE·sumf`.
//! - haswell (AVX2): the sign is applied to the q8 byte (`_mm256_sign_epi8`, or `(q ^ m) − m`, so a negated
//!   −128 stays −128); `maddubs` pairs (at most 2·62·128, no saturation) and `madd` with the scales give eight
//!   i32 lanes, lane `m` summing `s·g·q` over the elements with `e mod 32 ∈ 4m..4m+4` (exact); per block
//!   `acc = fma(d, float(lane), acc)`; `*s = OUTPUT_SCALE·hsum_float_8(acc)` (IQ3_S: `hsum_float_8(acc)`, the
//!   same bits as a multiplication by 1).
//!
//! `dequantize_row_*` (ggml-base, the same C in both builds): `y = (db·(float)g)·(±1)` with the format's
//! `db` per group (`IqBlock::group_scale`).

use super::iq_grids::KSIGNS_IQ2XS;
use super::q1_0::hsum_float_8;
use super::q8_k::{BlockQ8K, QK_K};
use super::RawBlock;
use crate::fp16::F16_TO_F32_TABLE;

/// One IQ block's decode, element by element (the scalar models; the SIMD kernels decode whole blocks).
pub trait IqBlock: RawBlock {
    /// The factor of the final `*s = OUTPUT_SCALE · …` (0.125 for IQ2, 0.25 for IQ3_XXS, 1 for IQ3_S).
    const OUTPUT_SCALE: f32;
    /// The raw bits of the f16 block scale `d`.
    fn d_bits(&self) -> u16;
    /// The grid magnitude of element `e` (0..256).
    fn magnitude(&self, e: usize) -> u8;
    /// Whether element `e` is negative.
    fn negative(&self, e: usize) -> bool;
    /// The 4-bit scale field of element `e`.
    fn nibble(&self, e: usize) -> u8;
    /// `dequantize_row_*`'s float scale of a group with scale field `nibble`, from `d = f16(x.d)`.
    fn group_scale(d: f32, nibble: u8) -> f32;
    /// The odd integer scale `2·nibble + 1` of element `e`.
    fn scale(&self, e: usize) -> i32 {
        2 * self.nibble(e) as i32 + 1
    }
}

/// Whether element `e` of a 32-weight chunk is negative under the chunk's sign word `word` of four 7-bit fields
/// (IQ2_XXS, IQ3_XXS): field `(e % 32) / 8`, completed to an even-parity byte by `ksigns_iq2xs`, bit `e % 8`.
pub fn ksigns_negative(word: u32, e: usize) -> bool {
    let field = (word >> (7 * ((e % 32) / 8))) as usize & 127;
    KSIGNS_IQ2XS[field] >> (e % 8) & 1 == 1
}

/// `dequantize_row_*` of an IQ format.
pub fn dequantize_row_iq_model<B: IqBlock>(x: &[B], y: &mut [f32]) {
    for (block, out) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = F16_TO_F32_TABLE[block.d_bits() as usize];
        for (e, o) in out.iter_mut().enumerate() {
            let sign = if block.negative(e) { -1.0f32 } else { 1.0 };
            *o = B::group_scale(d, block.nibble(e)) * block.magnitude(e) as f32 * sign;
        }
    }
}

/// The scalar `d = f16(x.d)·y.d` both builds compute per block: its value, for the kernels (where it is a NaN,
/// the dispatcher takes the model's result instead).
#[inline(always)]
pub fn block_scale<B: IqBlock>(x: &B, y: &BlockQ8K) -> f32 {
    F16_TO_F32_TABLE[x.d_bits() as usize] * y.d()
}

/// `block_scale` with the builds' NaN: `mulss` with `f16(x.d)` first.
#[inline(always)]
fn model_block_scale<B: IqBlock>(x: &B, y: &BlockQ8K) -> f32 {
    crate::x86_float::mul(F16_TO_F32_TABLE[x.d_bits() as usize], y.d())
}

/// The x64 build's exact integer sum of one block.
pub fn x64_block_sum<B: IqBlock>(x: &B, y: &BlockQ8K) -> i32 {
    (0..QK_K)
        .map(|e| {
            let p = x.scale(e) * x.magnitude(e) as i32 * y.qs[e] as i32;
            if x.negative(e) {
                -p
            } else {
                p
            }
        })
        .sum()
}

/// The x64 build's `ggml_vec_dot_*_q8_K` of an IQ format.
pub fn vec_dot_iq_q8_k_x64_model<B: IqBlock>(x: &[B], y: &[BlockQ8K]) -> f32 {
    let mut sumf = 0f32;
    for (xb, yb) in x.iter().zip(y) {
        sumf = crate::x86_float::add(
            sumf,
            model_block_scale(xb, yb) * x64_block_sum(xb, yb) as f32,
        );
    }
    B::OUTPUT_SCALE * sumf
}

/// The haswell kernels' eight i32 lanes of one block: lane `m` over `e mod 32 ∈ 4m..4m+4`, the sign applied to
/// the q8 byte with wrap-around.
pub fn haswell_block_lanes<B: IqBlock>(x: &B, y: &BlockQ8K) -> [i32; 8] {
    let mut lanes = [0i32; 8];
    for e in 0..QK_K {
        let q = if x.negative(e) {
            y.qs[e].wrapping_neg()
        } else {
            y.qs[e]
        };
        lanes[(e % 32) / 4] += x.scale(e) * x.magnitude(e) as i32 * q as i32;
    }
    lanes
}

/// The haswell build's `ggml_vec_dot_*_q8_K` of an IQ format.
pub fn vec_dot_iq_q8_k_haswell_model<B: IqBlock>(x: &[B], y: &[BlockQ8K]) -> f32 {
    let mut acc = [0f32; 8];
    for (xb, yb) in x.iter().zip(y) {
        let d = model_block_scale(xb, yb);
        let lanes = haswell_block_lanes(xb, yb);
        for l in 0..8 {
            acc[l] = crate::x86_float::fmadd(d, lanes[l] as f32, acc[l]);
        }
    }
    B::OUTPUT_SCALE * hsum_float_8(acc)
}

/// The model of `order`.
pub fn vec_dot_iq_q8_k_model<B: IqBlock>(order: crate::FloatOrder, x: &[B], y: &[BlockQ8K]) -> f32 {
    match order {
        crate::FloatOrder::Haswell => vec_dot_iq_q8_k_haswell_model(x, y),
        crate::FloatOrder::X64 => vec_dot_iq_q8_k_x64_model(x, y),
    }
}

/// Shared unit checks of an IQ format's models: both orders agree with an f64 dot of the dequantized weights
/// on `block` against quants that avoid −128, and a negated −128 differs between the orders exactly as the
/// builds do.
#[cfg(test)]
pub fn check_models_against_f64<B: IqBlock>(block: B) {
    let mut y = BlockQ8K {
        d: 0.01f32.to_le_bytes(),
        ..Default::default()
    };
    for (i, q) in y.qs.iter_mut().enumerate() {
        *q = ((i * 29) % 255) as i8 | 1; // odd: never −128
    }
    let mut w = [0f32; 256];
    dequantize_row_iq_model(&[block], &mut w);
    let exact: f64 = (0..256).map(|e| w[e] as f64 * y.qs[e] as f64 * 0.01).sum();
    // The dequantizer's scale is the dot's `s·OUTPUT_SCALE·d`.
    for got in [
        vec_dot_iq_q8_k_x64_model(&[block], &[y]),
        vec_dot_iq_q8_k_haswell_model(&[block], &[y]),
    ] {
        assert!(
            (got as f64 - exact).abs() <= 1e-4 * exact.abs().max(1.0),
            "{got} vs {exact}"
        );
    }
    if let Some(e) = (0..256).find(|&e| block.negative(e)) {
        y.qs[e] = -128;
        let m = block.scale(e) * block.magnitude(e) as i32;
        let wrapped = haswell_block_lanes(&block, &y)[(e % 32) / 4];
        let unwrapped = x64_block_sum(&block, &y);
        y.qs[e] = 1;
        let base_lane = haswell_block_lanes(&block, &y)[(e % 32) / 4];
        let base_sum = x64_block_sum(&block, &y);
        assert_eq!(wrapped - base_lane, -128 * m + m, "haswell keeps −128");
        assert_eq!(unwrapped - base_sum, 128 * m + m, "x64 negates to +128");
    }
}
