//! The activation quantizers `quantize_row_q8_0` (the stock AVX path's order and the reference order) and
//! `quantize_row_q8_k`, and the F16C scale conversion they share (`f32_to_f16_ggml_f16c`).

use super::*;

/// `quantize_row_q8_0` of the haswell build (`AVX_ORDER = true`: the AVX path) or of the x64 build (the
/// reference path), vectorised.
///
/// # Safety
/// The CPU must have AVX2 and F16C; `y.len() * 32 >= x.len()` rounded down to whole blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_row_q8_0<const AVX_ORDER: bool>(x: &[f32], y: &mut [BlockQ8_0]) {
    for (chunk, out) in x.chunks_exact(QK8_0).zip(y.iter_mut()) {
        // SAFETY: `chunk` has 32 floats; AVX2/F16C are enabled by this function's target features.
        unsafe {
            if AVX_ORDER {
                quantize_block_avx_path(chunk.as_ptr(), out);
            } else {
                quantize_block_ref_path(chunk, out);
            }
        }
    }
}

/// ggml's software f32 → f16 (`fp16::f32_to_f16_ggml_soft_model`, what both stock builds' q8_0 quantizers call)
/// as one `vcvtps2ph`: F16C's round-to-nearest-even gives the routine's bits for every non-NaN input (a tier-1
/// test compares them over every positive f32 whose half is not trivially 0 or Inf and samples of the rest; the
/// bit tests compare the quantizer with both stock builds); a NaN takes the model, whose NaN is `sign | 0x7E00`
/// where F16C would keep payload bits. Per block of 32 quants the model's branches cost about as much as the
/// block's vector work.
///
/// # Safety
/// The CPU must have F16C.
#[inline]
#[target_feature(enable = "f16c")]
pub(crate) unsafe fn f32_to_f16_ggml_f16c(f: f32) -> u16 {
    if f.is_nan() {
        return f32_to_f16_ggml_soft_model(f);
    }
    _mm_extract_epi16::<0>(_mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(f))) as u16
}

/// One block of the AVX path: `maxps` tree in the stock lane order, `id = 127/max`, round-to-even, saturating
/// packs.
#[inline(always)]
pub(super) unsafe fn quantize_block_avx_path(x: *const f32, out: &mut BlockQ8_0) {
    // SAFETY: the caller passes 32 readable floats at `x`.
    unsafe {
        let v = [0, 8, 16, 24].map(|o| _mm256_loadu_ps(x.add(o)));
        let sign = _mm256_set1_ps(-0.0);
        let mut m = _mm256_andnot_ps(sign, v[0]);
        for vk in &v[1..] {
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, *vk));
        }
        let mut m4 = _mm_max_ps(_mm256_extractf128_ps::<1>(m), _mm256_castps256_ps128(m));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        let max = _mm_cvtss_f32(m4);
        let d = max / 127.0;
        out.d = GgmlHalf::from_bits(f32_to_f16_ggml_f16c(d));
        let id = _mm256_set1_ps(if max != 0.0 { 127.0 / max } else { 0.0 });
        let i = v.map(|vk| _mm256_cvtps_epi32(_mm256_round_ps::<0>(_mm256_mul_ps(vk, id))));
        let w = _mm256_packs_epi16(
            _mm256_packs_epi32(i[0], i[1]),
            _mm256_packs_epi32(i[2], i[3]),
        );
        let w = _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(out.qs.as_mut_ptr() as *mut __m256i, w);
    }
}

/// One block of the reference path: sequential max (a NaN block takes the scalar model, whose NaN handling is
/// order-dependent), `id = 1/d`, `roundf` (half away from zero), truncating conversion, low byte.
#[inline(always)]
pub(super) unsafe fn quantize_block_ref_path(x: &[f32], out: &mut BlockQ8_0) {
    // SAFETY: `x` has 32 floats; AVX2 is enabled by the caller's target features.
    unsafe {
        let v = [0, 8, 16, 24].map(|o| _mm256_loadu_ps(x.as_ptr().add(o)));
        let any_nan = v.iter().fold(0, |acc, vk| {
            acc | _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(*vk, *vk))
        });
        if any_nan != 0 {
            *out = quantize_block_q8_0_ref_model(x.try_into().expect("32 floats"));
            return;
        }
        let sign = _mm256_set1_ps(-0.0);
        let mut m = _mm256_andnot_ps(sign, v[0]);
        for vk in &v[1..] {
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, *vk));
        }
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), m);
        let amax = lanes.iter().fold(0.0f32, |a, &b| if a > b { a } else { b });
        let d = amax / 127.0;
        out.d = GgmlHalf::from_bits(f32_to_f16_ggml_f16c(d));
        let id = _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
        let half = _mm256_set1_ps(0.5);
        let one = _mm256_set1_ps(1.0);
        let low_bytes = _mm256_setr_epi8(
            0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1, -1, -1,
            -1, -1, -1, -1, -1, -1, -1, -1, -1,
        );
        let mut bytes = [0u32; 8];
        for (k, vk) in v.iter().enumerate() {
            let p = _mm256_mul_ps(*vk, id);
            // roundf: truncate, then step away from zero when the dropped part is at least one half.
            let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(p);
            let frac = _mm256_andnot_ps(sign, _mm256_sub_ps(p, t));
            let away = _mm256_and_ps(
                _mm256_cmp_ps::<_CMP_GE_OQ>(frac, half),
                _mm256_or_ps(one, _mm256_and_ps(sign, p)),
            );
            let r = _mm256_cvttps_epi32(_mm256_add_ps(t, away));
            let packed = _mm256_shuffle_epi8(r, low_bytes);
            bytes[2 * k] = _mm256_extract_epi32::<0>(packed) as u32;
            bytes[2 * k + 1] = _mm256_extract_epi32::<4>(packed) as u32;
        }
        for (k, word) in bytes.iter().enumerate() {
            for (j, byte) in word.to_le_bytes().iter().enumerate() {
                out.qs[4 * k + j] = *byte as i8;
            }
        }
    }
}

/// `vpshufb` controls for `quantize_row_q8_k`: the low byte of each dword of a 128-bit lane to dword `h`.
pub(super) static Q8K_LOW_BYTES: [[u8; 32]; 4] = {
    let mut t = [[0x80u8; 32]; 4];
    let mut h = 0;
    while h < 4 {
        let mut b = 0;
        while b < 4 {
            t[h][4 * h + b] = 4 * b as u8;
            t[h][16 + 4 * h + b] = 4 * b as u8;
            b += 1;
        }
        h += 1;
    }
    t
};

/// `quantize_row_q8_K` (ggml-base's reference C, the same in both builds) eight floats at a time, with the
/// AVX-512 kernel's steps (`avx512::quantize_row_q8_k`): the largest magnitude by `vmaxps` with NaN lanes
/// dropped, its first position by an equality mask, `iscale·x + 1.5·2^23` as two roundings, the low mantissa
/// bits minus 2^22, `min(127, ·)` and the low byte of each (the C's conversion to `int8_t`, also for huge or
/// non-finite products); the sums of sixteen by `maddubs`/`madd` and two `phaddd` rounds.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `y.len() >= x.len() / 256`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_row_q8_k(x: &[f32], y: &mut [BlockQ8K]) {
    for (xb, out) in x.chunks_exact(QK_K).zip(y.iter_mut()) {
        // SAFETY (whole block): 32 loads of eight floats inside the 256 of `xb`; 32-byte loads and stores inside
        // `out.qs` and `out.bsums`; this function enables the features.
        unsafe {
            let p = xb.as_ptr();
            let sign = _mm256_set1_ps(-0.0);
            let mut m = _mm256_setzero_ps();
            for k in 0..32 {
                // `vmaxps` returns its second operand when either is NaN: NaN magnitudes are skipped.
                m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(p.add(8 * k))), m);
            }
            let mut lanes = [0f32; 8];
            _mm256_storeu_ps(lanes.as_mut_ptr(), m);
            let amax = lanes.iter().fold(0f32, |a, &b| a.max(b));
            if amax == 0.0 {
                // Stock zeroes the quants and the scale and leaves the bsums as they were.
                out.d = [0; 4];
                out.qs = [0; QK_K];
                continue;
            }
            let target = _mm256_set1_ps(amax);
            let mut first = 0;
            for k in 0..32 {
                let abs = _mm256_andnot_ps(sign, _mm256_loadu_ps(p.add(8 * k)));
                let hit = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(abs, target));
                if hit != 0 {
                    first = 8 * k + hit.trailing_zeros() as usize;
                    break;
                }
            }
            let iscale = -127.0f32 / xb[first];
            let scale = _mm256_set1_ps(iscale);
            let magic = _mm256_set1_ps(12_582_912.0);
            let qs = out.qs.as_mut_ptr() as *mut u8;
            for k in 0..8 {
                // Each vector's eight low bytes go to dword `h` of both 128-bit lanes; one dword permute
                // then puts the 32 quants in order.
                let mut packed = _mm256_setzero_si256();
                for (h, pick) in Q8K_LOW_BYTES.iter().enumerate() {
                    let v = _mm256_add_ps(
                        _mm256_mul_ps(scale, _mm256_loadu_ps(p.add(32 * k + 8 * h))),
                        magic,
                    );
                    let i = _mm256_sub_epi32(
                        _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x007f_ffff)),
                        _mm256_set1_epi32(0x0040_0000),
                    );
                    let i = _mm256_min_epi32(i, _mm256_set1_epi32(127));
                    let pick = _mm256_loadu_si256(pick.as_ptr() as *const __m256i);
                    packed = _mm256_or_si256(packed, _mm256_shuffle_epi8(i, pick));
                }
                let ordered =
                    _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
                _mm256_storeu_si256(qs.add(32 * k) as *mut __m256i, ordered);
            }
            // bsums: per 32 quants, dwords 0..4 sum quants 0..16 and 4..8 quants 16..32; two `phaddd` rounds
            // bring sums 2k (lane 0) and 2k + 1 (lane 1) together.
            let ones8 = _mm256_set1_epi8(1);
            let ones16 = _mm256_set1_epi16(1);
            let s: [__m256i; 8] = std::array::from_fn(|k| {
                let q = _mm256_loadu_si256(qs.add(32 * k) as *const __m256i);
                _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16)
            });
            let r0 =
                _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
            let r1 =
                _mm256_hadd_epi32(_mm256_hadd_epi32(s[4], s[5]), _mm256_hadd_epi32(s[6], s[7]));
            // Lane 0: sums 0, 2, …, 14; lane 1: 1, 3, …, 15 (each within ±2048: no saturation).
            let w = _mm256_packs_epi32(r0, r1);
            let (even, odd) = (_mm256_castsi256_si128(w), _mm256_extracti128_si256::<1>(w));
            let b = out.bsums.as_mut_ptr();
            _mm_storeu_si128(b as *mut __m128i, _mm_unpacklo_epi16(even, odd));
            _mm_storeu_si128(b.add(16) as *mut __m128i, _mm_unpackhi_epi16(even, odd));
            out.d = (1.0f32 / iscale).to_le_bytes();
        }
    }
}
