//! TQ1_0 · q8_K in the haswell or x64 float order: the base-3 digits of the packed bytes, then the parent
//! module's ternary lane sums.

use super::*;

/// The base-3 digit `((v·3) >> 8)` of every byte `v` (`v` already multiplied by the digit's power of three):
/// stock haswell's `subs`, two `avg` and a shift, exact for all 256 values (`formats/tq1_0.rs`).
#[inline(always)]
pub(super) unsafe fn tq1_digits(v: __m256i) -> __m256i {
    // SAFETY: register operations; AVX2 is enabled by the calling kernel.
    unsafe {
        let t = _mm256_subs_epu8(v, _mm256_set1_epi8(1));
        let r = _mm256_avg_epu8(t, _mm256_avg_epu8(t, _mm256_setzero_si256()));
        _mm256_and_si256(_mm256_srli_epi16::<6>(r), _mm256_set1_epi8(3))
    }
}

/// `v·3` per byte, modulo 256.
#[inline(always)]
pub(super) unsafe fn times3(v: __m256i) -> __m256i {
    // SAFETY: register operations; AVX2 is enabled by the calling kernel.
    unsafe { _mm256_add_epi8(_mm256_add_epi8(v, v), v) }
}

/// `ggml_vec_dot_tq1_0_q8_K` with the haswell build's order (`HASWELL`) or the x64 build's: the eight
/// 32-weight groups of a block as stock lays them out (`qs[0..32]` times 1, 3, 9, 27, 81; `qs[32..48]` times
/// 1 and 3, 9 and 27, 81 beside the `qh` bytes times their powers), `tq1_digits` and one `maddubs` per group
/// (pairs at most 2·2·128: no i16 overflow over eight groups), then `ternary_block_lanes` and stock's float
/// steps (`formats/tq1_0.rs`). Stock's haswell kernel does the same work; not served there.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `y.len() >= x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_tq1_0_q8_k<const HASWELL: bool>(x: &[BlockTQ1_0], y: &[BlockQ8K]) -> f32 {
    debug_assert!(y.len() >= x.len());
    // SAFETY (whole block): block `i` of x and y are inside the slices; the loads read `qs[0..32]`,
    // `qs[32..48]`, the four `qh` bytes and 32-byte groups of the quants; this function enables the features.
    unsafe {
        let mut acc = _mm256_setzero_ps();
        let mut sumf = 0f32;
        let ones = _mm256_set1_epi8(1);
        // Group 7's high half (elements 240 + 4l + j): the four `qh` bytes repeated, byte `4l + j` times `3^l`,
        // the words multiplied once per byte parity so no carry crosses into the other byte.
        let qh_pow = _mm_setr_epi16(1, 1, 3, 3, 9, 9, 27, 27);
        let low_bytes = _mm_set1_epi16(0x00ff);
        for (xb, yb) in x.iter().zip(y) {
            let q = yb.qs.as_ptr() as *const u8;
            let (mut dq, mut sq) = (_mm256_setzero_si256(), _mm256_setzero_si256());
            let mut group = |g: usize, v: __m256i| {
                let qv = _mm256_loadu_si256(q.add(32 * g) as *const __m256i);
                dq = _mm256_add_epi16(dq, _mm256_maddubs_epi16(tq1_digits(v), qv));
                if !HASWELL {
                    sq = _mm256_add_epi16(sq, _mm256_maddubs_epi16(ones, qv));
                }
            };
            let mut v = _mm256_loadu_si256(xb.qs.as_ptr() as *const __m256i);
            for g in 0..5 {
                group(g, v);
                v = times3(v);
            }
            let x3 = |v: __m128i| _mm_add_epi8(_mm_add_epi8(v, v), v);
            let w = _mm_loadu_si128(xb.qs.as_ptr().add(32) as *const __m128i);
            let w3 = x3(w);
            let w9 = x3(w3);
            let w27 = x3(w9);
            group(5, _mm256_set_m128i(w3, w));
            group(6, _mm256_set_m128i(w27, w9));
            let h = _mm_set1_epi32(i32::from_le_bytes(xb.qh));
            let h_even = _mm_and_si128(_mm_mullo_epi16(h, qh_pow), low_bytes);
            let h_odd = _mm_mullo_epi16(_mm_andnot_si128(low_bytes, h), qh_pow);
            group(7, _mm256_set_m128i(_mm_or_si128(h_even, h_odd), x3(w27)));
            let lanes = ternary_block_lanes::<HASWELL>(dq, sq, yb);
            if HASWELL {
                let d = yb.d() * F16_TO_F32_TABLE[xb.d.to_bits() as usize];
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_set1_ps(d), acc);
            } else {
                let d = F16_TO_F32_TABLE[xb.d.to_bits() as usize] * yb.d();
                sumf += hsum_epi32(lanes) as f32 * d;
            }
        }
        if !HASWELL {
            return sumf;
        }
        hsum_float_8_ps(acc)
    }
}
