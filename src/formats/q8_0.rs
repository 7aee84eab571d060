//! Q8_0 (ggml type 8): the activation side of Q1_0 and Q2_0 products, and `quantize_row_q8_0`.
//!
//! Layout: `{ ggml_half d; int8_t qs[32]; }`, 34 bytes per 32 values.
//!
//! The two stock builds quantize differently (`formats.md` §4), so each has a scalar model:
//! - haswell (the AVX path of `arch/x86/quants.c`): `max|x|` through `maxps` in a fixed lane order, `d = max/127`,
//!   `id = 127/max` (0 when max is 0), round half to even, `cvtps2dq` then two saturating packs;
//! - x64 (`quantize_row_q8_0_ref`): a sequential `a > b ? a : b` max, `id = 1/d`, `roundf` (half away from zero),
//!   truncating conversion to int8 through int32.
//!
//! Both narrow `d` to f16 with ggml's software routine, not F16C (the haswell disassembly shows the bit-trick
//! code, with one multiply fused into the add; that fusion cannot change a result, see `fp16.rs`), so a NaN
//! scale is stored as `0x7E00` in both. ggml ≥ 0.27.0's AVX path narrows with F16C's `vcvtps2ph` instead, which
//! gives the same half for every number but keeps a NaN's top payload bits (`f16c_nan_scale`): the same bytes
//! except where `max|x|` is NaN, and only a NaN that survives the `maxps` tree reaches the scale.

use crate::fp16::{f32_to_f16_ggml_soft_model, GgmlHalf};

pub const QK8_0: usize = 32;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockQ8_0 {
    pub d: GgmlHalf,
    pub qs: [i8; QK8_0],
}
const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);
const _: () = assert!(std::mem::align_of::<BlockQ8_0>() == 1);

/// `maxps`/`maxss` on one lane: the first operand when it is greater, else the second (so a NaN in either picks
/// the second).
#[inline(always)]
fn maxps_lane(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// `cvtps2dq` on one lane (the value is already integral): out-of-range and NaN give the "integer indefinite"
/// `i32::MIN`.
#[inline(always)]
pub(crate) fn cvtps2dq_lane(v: f32) -> i32 {
    if (-2147483648.0..2147483648.0).contains(&v) {
        v as i32
    } else {
        i32::MIN
    }
}

/// `packssdw` then `packsswb` on one lane.
#[inline(always)]
pub(crate) fn saturate_i32_to_i8(v: i32) -> i8 {
    v.clamp(i16::MIN as i32, i16::MAX as i32)
        .clamp(i8::MIN as i32, i8::MAX as i32) as i8
}

/// `max|x|` of one block in the AVX path's order: four 8-lane `maxps` steps, then the 8 → 4 → 2 → 1 tree.
pub(crate) fn block_amax_avx_order(x: &[f32; QK8_0]) -> f32 {
    let mut m = [0f32; 8];
    for (lane, slot) in m.iter_mut().enumerate() {
        let mut acc = x[lane].abs();
        for v in 1..4 {
            acc = maxps_lane(acc, x[8 * v + lane].abs());
        }
        *slot = acc;
    }
    let m4 = [0, 1, 2, 3].map(|k| maxps_lane(m[4 + k], m[k]));
    let l0 = maxps_lane(m4[0], m4[2]);
    let l1 = maxps_lane(m4[1], m4[3]);
    maxps_lane(l0, l1)
}

/// One block of the haswell build's `quantize_row_q8_0`.
pub fn quantize_block_q8_0_avx_model(x: &[f32; QK8_0]) -> BlockQ8_0 {
    let max = block_amax_avx_order(x);
    let d = max / 127.0;
    let id = if max != 0.0 { 127.0 / max } else { 0.0 };
    let mut out = BlockQ8_0 {
        d: GgmlHalf::from_bits(f32_to_f16_ggml_soft_model(d)),
        qs: [0; QK8_0],
    };
    for (q, &v) in out.qs.iter_mut().zip(x) {
        *q = saturate_i32_to_i8(cvtps2dq_lane((v * id).round_ties_even()));
    }
    out
}

/// The scale ggml ≥ 0.27.0's AVX quantizer stores for a block whose `max|x|` (in the AVX path's order) is NaN,
/// `None` for any other block: `d = max/127` keeps the NaN's payload and quiets it (`divss`), and `vcvtps2ph`
/// keeps the sign, sets the exponent and takes the top ten mantissa bits.
pub fn f16c_nan_scale(x: &[f32; QK8_0]) -> Option<u16> {
    let max = block_amax_avx_order(x);
    if !max.is_nan() {
        return None;
    }
    let d = max.to_bits() | 0x0040_0000;
    Some((((d >> 16) & 0x8000) | 0x7c00 | ((d >> 13) & 0x3ff)) as u16)
}

/// One block of ggml ≥ 0.27.0's AVX `quantize_row_q8_0`: the haswell build's, with F16C's NaN scale.
pub fn quantize_block_q8_0_avx_f16c_model(x: &[f32; QK8_0]) -> BlockQ8_0 {
    let mut out = quantize_block_q8_0_avx_model(x);
    if let Some(d) = f16c_nan_scale(x) {
        out.d = GgmlHalf::from_bits(d);
    }
    out
}

/// One block of the x64 build's `quantize_row_q8_0` (= `quantize_row_q8_0_ref`).
pub fn quantize_block_q8_0_ref_model(x: &[f32; QK8_0]) -> BlockQ8_0 {
    let mut amax = 0.0f32;
    for &v in x {
        let a = v.abs();
        amax = if amax > a { amax } else { a };
    }
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut out = BlockQ8_0 {
        d: GgmlHalf::from_bits(f32_to_f16_ggml_soft_model(d)),
        qs: [0; QK8_0],
    };
    for (q, &v) in out.qs.iter_mut().zip(x) {
        // C's float → int8_t goes through a 32-bit cvttss2si and keeps the low byte.
        *q = cvtps2dq_lane((v * id).round()) as i8;
    }
    out
}

/// A whole row with the model of `order`; `k` values, tail values past the last full block are ignored like a
/// release build does.
pub fn quantize_row_q8_0_model(order: crate::FloatOrder, x: &[f32], y: &mut [BlockQ8_0]) {
    for (chunk, out) in x.chunks_exact(QK8_0).zip(y.iter_mut()) {
        let block: &[f32; QK8_0] = chunk.try_into().expect("chunks_exact gives full blocks");
        *out = match order {
            crate::FloatOrder::Haswell => quantize_block_q8_0_avx_model(block),
            crate::FloatOrder::X64 => quantize_block_q8_0_ref_model(block),
        };
    }
}

impl super::RandomActivation for BlockQ8_0 {
    fn fill_random(out: &mut [u8], state: &mut u64) {
        for blk in out.chunks_exact_mut(std::mem::size_of::<BlockQ8_0>()) {
            let d = 0x2800 + (super::xorshift64(state) % 0x1400) as u16;
            blk[..2].copy_from_slice(&d.to_le_bytes());
            blk[2..]
                .iter_mut()
                .for_each(|q| *q = super::xorshift64(state) as u8);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_round_differently_in_the_two_builds() {
        // max = 127 → id = 1 in both; 2.5 rounds to 2 (even) in the AVX path, 3 (away) in the reference.
        let mut x = [0f32; QK8_0];
        x[0] = 127.0;
        x[1] = 2.5;
        x[2] = -0.5;
        let avx = quantize_block_q8_0_avx_model(&x);
        let r = quantize_block_q8_0_ref_model(&x);
        assert_eq!((avx.qs[0], avx.qs[1], avx.qs[2]), (127, 2, 0));
        assert_eq!((r.qs[0], r.qs[1], r.qs[2]), (127, 3, -1));
        assert_eq!(avx.d.to_f32(), 1.0);
    }

    #[test]
    fn non_finite_inputs_follow_the_instruction_semantics() {
        let mut x = [1.0f32; QK8_0];
        x[3] = f32::INFINITY;
        let avx = quantize_block_q8_0_avx_model(&x);
        // id = 127/Inf = 0: finite values give 0, Inf·0 = NaN gives the indefinite integer, saturated to -128.
        assert_eq!(avx.qs[0], 0);
        assert_eq!(avx.qs[3], -128);
        let r = quantize_block_q8_0_ref_model(&x);
        assert_eq!(r.qs[3], 0); // NaN → 0x80000000 → low byte 0
        assert_eq!(r.d.to_bits(), 0x7c00);
    }

    #[test]
    fn amax_lane_order_decides_nan() {
        let mut x = [0f32; QK8_0];
        x[0] = f32::NAN; // lane 0 of v0, then max(NaN, |v1[0]|) picks |v1[0]|
        x[8] = 5.0;
        assert_eq!(block_amax_avx_order(&x), 5.0);
        // Lane 3 of v3 is the second operand at every later step, so its NaN survives to the end; the same NaN
        // in lane 0 is dropped at the 4 → 2 step.
        let mut y = [0f32; QK8_0];
        y[27] = f32::NAN;
        assert!(block_amax_avx_order(&y).is_nan());
        let mut z = [0f32; QK8_0];
        z[24] = f32::NAN;
        assert_eq!(block_amax_avx_order(&z), 0.0);
    }

    /// `f16c_nan_scale` against the instructions it models: `divss` by 127 and F16C's `vcvtps2ph` on the
    /// surviving NaN, for NaNs of every sign, quiet bit and payload (1 << 16 of them, spread over the 23 bits).
    #[test]
    fn f16c_nan_scale_gives_the_instructions_bits() {
        #[cfg(target_arch = "x86_64")]
        {
            if !std::arch::is_x86_feature_detected!("f16c") {
                println!("SKIPPED: no F16C on this CPU to compare with");
                return;
            }
            let mut state = 0x9e37_79b9_7f4a_7c15u64;
            for i in 0..1u32 << 16 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let payload = ((state as u32) & 0x7f_ffff).max(1);
                let nan = f32::from_bits(0x7f80_0000 | payload | ((i & 1) << 31));
                let mut x = [1.0f32; QK8_0];
                x[27] = nan;
                let max = block_amax_avx_order(&x);
                let d = std::hint::black_box(max) / std::hint::black_box(127.0f32);
                // SAFETY: F16C was detected above.
                let hw = unsafe {
                    use std::arch::x86_64::*;
                    _mm_extract_epi16::<0>(_mm_cvtps_ph::<0>(_mm_set_ss(d))) as u16
                };
                assert_eq!(f16c_nan_scale(&x), Some(hw), "{:#010x}", nan.to_bits());
            }
            let finite = [3.0f32; QK8_0];
            assert_eq!(f16c_nan_scale(&finite), None);
        }
    }
}
