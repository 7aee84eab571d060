//! The activation quantizers: `quantize_row_q8_0` (the AVX2 code, whose order is the stock AVX path's) and
//! `quantize_row_q8_k` in 512-bit vectors. `docs/q8_k.md`.

use super::*;

/// `quantize_row_q8_0` of either build. The per-block work is a handful of 256-bit operations whose order is
/// the stock AVX path's own, so the AVX2 code is the right one here too.
///
/// # Safety
/// As `avx2::quantize_row_q8_0`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub unsafe fn quantize_row_q8_0<const AVX_ORDER: bool>(x: &[f32], y: &mut [BlockQ8_0]) {
    // SAFETY: the AVX2 kernel's features are a subset of this function's.
    unsafe { crate::arch::x86::avx2::quantize_row_q8_0::<AVX_ORDER>(x, y) }
}

/// `quantize_row_q8_K` (ggml-base's reference C, the same in both builds) sixteen floats at a time: the largest
/// magnitude by `vmaxps` with NaN lanes dropped (the C's `fabsf(x) > amax` never takes a NaN), its first
/// position by an equality mask (the C keeps the first of equal magnitudes); each quant is `iscale·x` and
/// `+ 1.5·2^23` as two roundings (ggml's `nearest_int`), the low mantissa bits minus 2^22, `min(127, ·)` and
/// truncation to `int8_t` (`vpmovdb`), exactly as the C's conversions do also for huge or non-finite products.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI/VBMI, AVX2, FMA and F16C; `y.len() >= x.len() / 256`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub unsafe fn quantize_row_q8_k(x: &[f32], y: &mut [BlockQ8K]) {
    for (xb, out) in x.chunks_exact(256).zip(y.iter_mut()) {
        // SAFETY (whole block): sixteen loads of sixteen floats inside the 256 of `xb`; stores of sixteen bytes
        // inside `out.qs`; this function enables the features.
        unsafe {
            let p = xb.as_ptr();
            let mut m = _mm512_setzero_ps();
            for k in 0..16 {
                // `vmaxps` returns its second operand when either is NaN: NaN magnitudes are skipped.
                m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(p.add(16 * k))), m);
            }
            let amax = _mm512_reduce_max_ps(m);
            if amax == 0.0 {
                // Stock zeroes the quants and the scale and leaves the bsums as they were.
                out.d = [0; 4];
                out.qs = [0; 256];
                continue;
            }
            let target = _mm512_set1_ps(amax);
            let mut first = 0;
            for k in 0..16 {
                let abs = _mm512_abs_ps(_mm512_loadu_ps(p.add(16 * k)));
                let hit = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(abs, target);
                if hit != 0 {
                    first = 16 * k + hit.trailing_zeros() as usize;
                    break;
                }
            }
            let iscale = -127.0f32 / xb[first];
            let scale = _mm512_set1_ps(iscale);
            let magic = _mm512_set1_ps(12_582_912.0);
            for k in 0..16 {
                let v = _mm512_add_ps(_mm512_mul_ps(scale, _mm512_loadu_ps(p.add(16 * k))), magic);
                let i = _mm512_sub_epi32(
                    _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x007f_ffff)),
                    _mm512_set1_epi32(0x0040_0000),
                );
                let q = _mm512_cvtepi32_epi8(_mm512_min_epi32(i, _mm512_set1_epi32(127)));
                _mm_storeu_si128(out.qs.as_mut_ptr().add(16 * k) as *mut __m128i, q);
                let sum = _mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(q));
                out.set_bsum(k, sum as i16);
            }
            out.d = (1.0f32 / iscale).to_le_bytes();
        }
    }
}
