//! AVX2 + FMA + F16C kernels.
//!
//! Q2_0 · q8_0: per block half, codes are expanded with one cross-lane dword permute, a per-dword variable shift
//! and a mask, which leaves them in a "shift-major" order inside each 128-bit lane (byte `4r + b` holds the code
//! of weight `4b + r`); the q8 bytes get the matching in-lane byte shuffle. `maddubs(c, q) − maddubs(1, q)` then
//! gives `Σ(c − 1)·q` in pairs. A whole half-block sum is bounded by 32·2·128 = 8192, so the reduction of four
//! blocks (eight halves) stays in i16 with a `phaddw` tree. The float chain follows the stock build exactly:
//! per-block `sumi` in SIMD lanes, then `sumf` sequentially in block order.

use std::arch::x86_64::*;

use super::pipelined;
use crate::formats::pq2_0::{pq2_0_block_chain, vec_dot_pq2_0_q8_0_from, BlockPQ2_0};
use crate::formats::q2_0::{vec_dot_q2_0_q8_0_from, BlockQ2_0};
use crate::formats::q8_0::{quantize_block_q8_0_ref_model, BlockQ8_0, QK8_0};
use crate::fp16::{f32_to_f16_ggml_soft_model, GgmlHalf};

const Q2_BYTES: usize = 18;
const Q8_BYTES: usize = 34;
const PQ2_BYTES: usize = 34;

/// `Σ(c − 1)·q` of one 32-weight half as 16 i16 pair sums. `codes` points at the block's 16 code bytes
/// (`idx` picks dwords 0,1 or 2,3 of them), `q` at the 32 q8 bytes.
#[inline(always)]
unsafe fn q2_half_pairs(codes: __m256i, idx: __m256i, q: *const u8) -> __m256i {
    // SAFETY (whole body): the caller guarantees 32 readable bytes at `q`; the intrinsics need AVX2, which the
    // enclosing target_feature functions enable.
    unsafe {
        let shifts = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
        let shift_major = _mm256_setr_epi8(
            0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1, 5, 9, 13, 2, 6,
            10, 14, 3, 7, 11, 15,
        );
        let c = _mm256_and_si256(
            _mm256_srlv_epi32(_mm256_permutevar8x32_epi32(codes, idx), shifts),
            _mm256_set1_epi8(3),
        );
        let qv = _mm256_loadu_si256(q as *const __m256i);
        let cq = _mm256_maddubs_epi16(c, _mm256_shuffle_epi8(qv, shift_major));
        _mm256_sub_epi16(cq, _mm256_maddubs_epi16(_mm256_set1_epi8(1), qv))
    }
}

/// `Σ(c − 1)·q` of four 64-weight code groups (`codes(g)` points at group `g`'s 16 code bytes) against the 8
/// q8_0 blocks at `yb`, as floats. Lane `4h + g` holds half `h` of group `g`, i.e. q8_0 block `2g + h`. Shared by
/// Q2_0 (a group is a block) and PQ2_0 (a block is two groups).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_sums(codes: impl Fn(usize) -> *const u8, yb: *const u8) -> __m256 {
    // SAFETY (whole body): the caller guarantees 16 code bytes at each `codes(g)` and 8 q8_0 blocks at `yb`;
    // features are enabled by this function.
    unsafe {
        let idx_lo = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
        let idx_hi = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
        let mut h = [_mm256_setzero_si256(); 8];
        for g in 0..4 {
            let c = _mm256_castsi128_si256(_mm_loadu_si128(codes(g) as *const __m128i));
            h[g] = q2_half_pairs(c, idx_lo, yb.add((2 * g) * Q8_BYTES + 2));
            h[4 + g] = q2_half_pairs(c, idx_hi, yb.add((2 * g + 1) * Q8_BYTES + 2));
        }
        let a = _mm256_hadd_epi16(h[0], h[1]);
        let b = _mm256_hadd_epi16(h[2], h[3]);
        let c = _mm256_hadd_epi16(h[4], h[5]);
        let d = _mm256_hadd_epi16(h[6], h[7]);
        let t = _mm256_hadd_epi16(_mm256_hadd_epi16(a, b), _mm256_hadd_epi16(c, d));
        let sums16 = _mm_add_epi16(_mm256_castsi256_si128(t), _mm256_extracti128_si256::<1>(t));
        _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(sums16))
    }
}

/// The scales of the 8 q8_0 blocks at `yb` in `group_sums`' lane order (q8_0 block `2g + h` in lane `4h + g`),
/// collected with scalar moves (gathers are slow on some cores).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_d1(yb: *const u8) -> __m256 {
    let mut bits = [0u16; 8];
    for g in 0..4 {
        for h in 0..2 {
            // SAFETY: the caller guarantees 8 q8_0 blocks at `yb`; each read is a block's 2-byte scale.
            bits[4 * h + g] =
                unsafe { (yb.add((2 * g + h) * Q8_BYTES) as *const u16).read_unaligned() };
        }
    }
    // SAFETY: a load of the local array.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(bits.as_ptr() as *const __m128i)) }
}

/// Per-batch float terms of four Q2_0 blocks: for the FMA chain `(d0, sumi)`, for the unfused chain
/// `(d0·sumi, _)`, lane `k` belonging to block `k`. Nothing here depends on the running `sumf`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q2_batch_terms<const FMA: bool>(xb: *const u8, yb: *const u8) -> (__m128, __m128) {
    // SAFETY (whole body): the caller guarantees 4 whole Q2_0 blocks at `xb` and 8 q8_0 blocks at `yb`;
    // features are enabled by this function.
    unsafe {
        let s = group_sums(|g| xb.add(g * Q2_BYTES + 2), yb);
        let d1 = group_d1(yb);
        let mut d0_bits = [0u16; 8];
        for (k, d) in d0_bits.iter_mut().take(4).enumerate() {
            *d = (xb.add(k * Q2_BYTES) as *const u16).read_unaligned();
        }
        let d0 = _mm_cvtph_ps(_mm_loadu_si128(d0_bits.as_ptr() as *const __m128i));
        let (s_lo, s_hi) = (_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
        let (d1_lo, d1_hi) = (_mm256_castps256_ps128(d1), _mm256_extractf128_ps::<1>(d1));
        if FMA {
            (
                d0,
                _mm_fmadd_ps(d1_hi, s_hi, _mm_fmadd_ps(d1_lo, s_lo, _mm_setzero_ps())),
            )
        } else {
            let sumi = _mm_add_ps(
                _mm_add_ps(_mm_setzero_ps(), _mm_mul_ps(d1_lo, s_lo)),
                _mm_mul_ps(d1_hi, s_hi),
            );
            (_mm_mul_ps(d0, sumi), d0)
        }
    }
}

/// The sequential part: four steps of `sumf = fma(d0, sumi, sumf)` (or `sumf += d0·sumi`), in block order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q2_batch_chain<const FMA: bool>(mut sumf: f32, terms: (__m128, __m128)) -> f32 {
    let mut a = [0f32; 4];
    let mut b = [0f32; 4];
    // SAFETY: plain stores of two registers into local arrays.
    unsafe {
        _mm_storeu_ps(a.as_mut_ptr(), terms.0);
        _mm_storeu_ps(b.as_mut_ptr(), terms.1);
    }
    for k in 0..4 {
        sumf = if FMA {
            a[k].mul_add(b[k], sumf)
        } else {
            sumf + a[k]
        };
    }
    sumf
}

/// `ggml_vec_dot_q2_0_q8_0` with the haswell (`FMA = true`) or x64 (`FMA = false`) float chain.
///
/// Software-pipelined: the work of batch `k + 1` is issued before the sequential chain of batch `k`, so the
/// chain runs while the next batch's vector work executes instead of behind it.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `y.len() >= 2 * x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q2_0_q8_0<const FMA: bool>(x: &[BlockQ2_0], y: &[BlockQ8_0]) -> f32 {
    debug_assert!(y.len() >= 2 * x.len());
    let batches = x.len() / 4;
    let xp = x.as_ptr() as *const u8;
    let yp = y.as_ptr() as *const u8;
    // SAFETY (both closures): batch k < batches covers blocks 4k..4k+4 of x and 8k..8k+8 of y, inside the
    // slices; this function's target features cover the helpers'.
    let sumf = pipelined(
        batches,
        |k| unsafe { q2_batch_terms::<FMA>(xp.add(4 * k * Q2_BYTES), yp.add(8 * k * Q8_BYTES)) },
        |sumf, terms| unsafe { q2_batch_chain::<FMA>(sumf, terms) },
    );
    // Up to three blocks left: the scalar chain continues with the same float order.
    let done = 4 * batches;
    vec_dot_q2_0_q8_0_from::<FMA>(sumf, &x[done..], &y[2 * done..])
}

/// `ggml_vec_dot_pq2_0_q8_0` (PrismML fork) with the FMA (`FMA = true`) or unfused chain: two blocks (four code
/// groups) per batch through `group_sums`, then each block's four-step `sumi` and the `sumf` step in scalar
/// code, software-pipelined like the Q2_0 kernel.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `y.len() >= 4 * x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_pq2_0_q8_0<const FMA: bool>(x: &[BlockPQ2_0], y: &[BlockQ8_0]) -> f32 {
    debug_assert!(y.len() >= 4 * x.len());
    let batches = x.len() / 2;
    let xp = x.as_ptr() as *const u8;
    let yp = y.as_ptr() as *const u8;
    // SAFETY (both closures): batch k < batches covers blocks 2k..2k+2 of x and 8k..8k+8 of y, inside the
    // slices; this function's target features cover the helpers'.
    let sumf = pipelined(
        batches,
        |k| unsafe {
            let (xb, yb) = (xp.add(2 * k * PQ2_BYTES), yp.add(8 * k * Q8_BYTES));
            let s = group_sums(|g| xb.add((g / 2) * PQ2_BYTES + 2 + 16 * (g % 2)), yb);
            (s, group_d1(yb), [0, 1].map(|p| x[2 * k + p].d.to_f32()))
        },
        |mut sumf, (s, d1, d0): (__m256, __m256, [f32; 2])| {
            let (mut sv, mut dv) = ([0f32; 8], [0f32; 8]);
            // SAFETY: stores of two registers into local arrays.
            unsafe {
                _mm256_storeu_ps(sv.as_mut_ptr(), s);
                _mm256_storeu_ps(dv.as_mut_ptr(), d1);
            }
            for (p, d0p) in d0.into_iter().enumerate() {
                // q8_0 block k of block p is half k % 2 of group 2p + k / 2: lane 4·(k % 2) + 2p + k / 2.
                let lane = |k: usize| 4 * (k % 2) + 2 * p + k / 2;
                sumf = pq2_0_block_chain::<FMA>(
                    sumf,
                    d0p,
                    [0, 1, 2, 3].map(|k| dv[lane(k)]),
                    [0, 1, 2, 3].map(|k| sv[lane(k)]),
                );
            }
            sumf
        },
    );
    let done = 2 * batches;
    vec_dot_pq2_0_q8_0_from::<FMA>(sumf, &x[done..], &y[4 * done..])
}

/// `dequantize_row_q2_0`: `((c − 1) as f32) · d`, eight weights per step.
///
/// # Safety
/// The CPU must have AVX2 and F16C; `y.len() >= 64 * x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dequantize_row_q2_0(x: &[BlockQ2_0], y: &mut [f32]) {
    debug_assert!(y.len() >= 64 * x.len());
    // SAFETY: block i < x.len() and 64 floats per block fit in y by the contract above.
    unsafe {
        let shifts = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
        let three = _mm256_set1_epi32(3);
        let one = _mm256_set1_epi32(1);
        let out = y.as_mut_ptr();
        for (i, b) in x.iter().enumerate() {
            let d = _mm256_set1_ps(b.d.to_f32());
            for w in 0..8 {
                let pair = u16::from_le_bytes([b.qs[2 * w], b.qs[2 * w + 1]]) as i32;
                let c = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(pair), shifts), three);
                let v = _mm256_cvtepi32_ps(_mm256_sub_epi32(c, one));
                _mm256_storeu_ps(out.add(64 * i + 8 * w), _mm256_mul_ps(v, d));
            }
        }
    }
}

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

/// One block of the AVX path: `maxps` tree in the stock lane order, `id = 127/max`, round-to-even, saturating
/// packs.
#[inline(always)]
unsafe fn quantize_block_avx_path(x: *const f32, out: &mut BlockQ8_0) {
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
        out.d = GgmlHalf::from_bits(f32_to_f16_ggml_soft_model(d));
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
unsafe fn quantize_block_ref_path(x: &[f32], out: &mut BlockQ8_0) {
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
        out.d = GgmlHalf::from_bits(f32_to_f16_ggml_soft_model(d));
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
