//! TQ2_0 · q8_K in the haswell or x64 float order, over the parent module's ternary lane sums.

use super::*;

/// `ggml_vec_dot_tq2_0_q8_K` with the haswell build's order (`HASWELL`) or the x64 build's: per 32 weights the
/// codes by a shift and a mask and one `maddubs` against the quants (a pair is at most 2·3·128, eight per lane:
/// no i16 overflow), then `ternary_block_lanes` and stock's float steps (`formats/tq2_0.rs`). The haswell
/// order is stock's own kernel step for step, so against stock haswell it is not faster (not served there).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `y.len() >= x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_tq2_0_q8_k<const HASWELL: bool>(x: &[BlockTQ2_0], y: &[BlockQ8K]) -> f32 {
    debug_assert!(y.len() >= x.len());
    // SAFETY (whole block): block `i` of x and y are inside the slices, every load 32 bytes inside `qs`; this
    // function enables the features.
    unsafe {
        let mut acc = _mm256_setzero_ps();
        let mut sumf = 0f32;
        let (three, ones) = (_mm256_set1_epi8(3), _mm256_set1_epi8(1));
        for (xb, yb) in x.iter().zip(y) {
            let q = yb.qs.as_ptr() as *const u8;
            let (mut cq, mut sq) = (_mm256_setzero_si256(), _mm256_setzero_si256());
            for j in 0..2 {
                let mut codes = _mm256_loadu_si256(xb.qs.as_ptr().add(32 * j) as *const __m256i);
                for l in 0..4 {
                    let qv = _mm256_loadu_si256(q.add(128 * j + 32 * l) as *const __m256i);
                    let c = _mm256_and_si256(codes, three);
                    cq = _mm256_add_epi16(cq, _mm256_maddubs_epi16(c, qv));
                    if !HASWELL {
                        sq = _mm256_add_epi16(sq, _mm256_maddubs_epi16(ones, qv));
                    }
                    codes = _mm256_srli_epi16::<2>(codes);
                }
            }
            let lanes = ternary_block_lanes::<HASWELL>(cq, sq, yb);
            let d = formats::tq2_0::block_scale(xb, yb);
            if HASWELL {
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_set1_ps(d), acc);
            } else {
                sumf += hsum_epi32(lanes) as f32 * d;
            }
        }
        if !HASWELL {
            return sumf;
        }
        hsum_float_8_ps(acc)
    }
}
