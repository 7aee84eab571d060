//! AVX-512 kernels (F, BW, VL, VNNI, VBMI), same function names as `avx2.rs`.
//!
//! Q2_0 · q8_0: one zmm holds a whole block. Codes are expanded with `vpmovzxwq` (code word `Q` into qword `Q`)
//! and `vpmultishiftqb` (byte `j` of qword `Q` takes the bits from offset `2·(j % 8)`), masked to 2 bits, so byte
//! `j` is the code of weight `j`. `vpdpbusd(c, q) − vpdpbusd(1, q)` gives sixteen dword partials of `Σ(c − 1)·q`
//! (eight per half), which a `vpermt2d` tree over eight blocks reduces to one vector: lanes 0..7 the first
//! halves, 8..15 the second halves. The float chain follows the stock build exactly (see `avx2.rs`).

use std::arch::x86_64::*;

use super::q2_0_tail;
use crate::formats::q2_0::BlockQ2_0;
use crate::formats::q8_0::BlockQ8_0;

const Q2_BYTES: usize = 18;
const Q8_BYTES: usize = 34;

/// Sixteen dword partials of one block: dwords 0..7 sum the first half, 8..15 the second.
#[inline(always)]
unsafe fn q2_block_partials(codes: *const u8, q0: *const u8, q1: *const u8) -> __m512i {
    // SAFETY (whole body): the caller guarantees 16 bytes at `codes` and 32 at `q0` and `q1`; the intrinsics'
    // features are enabled by the calling kernel.
    unsafe {
        let ctrl = _mm512_set1_epi64(0x0e0c_0a08_0604_0200);
        let words = _mm512_cvtepu16_epi64(_mm_loadu_si128(codes as *const __m128i));
        let c = _mm512_and_si512(
            _mm512_multishift_epi64_epi8(ctrl, words),
            _mm512_set1_epi8(3),
        );
        let lo = _mm256_loadu_si256(q0 as *const __m256i);
        let hi = _mm256_loadu_si256(q1 as *const __m256i);
        let q = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
        let zero = _mm512_setzero_si512();
        _mm512_sub_epi32(
            _mm512_dpbusd_epi32(zero, c, q),
            _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(1), q),
        )
    }
}

/// Sum adjacent dword pairs of `a ++ b` (32 lanes → 16).
#[inline(always)]
unsafe fn pair_sums(a: __m512i, b: __m512i) -> __m512i {
    // SAFETY: register-only AVX-512F operations, enabled by the calling kernel.
    unsafe {
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        _mm512_add_epi32(
            _mm512_permutex2var_epi32(a, even, b),
            _mm512_permutex2var_epi32(a, odd, b),
        )
    }
}

/// Per-batch float terms of eight blocks: for the FMA chain `(d0, sumi)`, for the unfused chain `(d0·sumi, _)`,
/// lane `k` belonging to block `k`. Everything up to here is independent of the running `sumf`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
unsafe fn q2_batch_terms<const FMA: bool>(xb: *const u8, yb: *const u8) -> (__m256, __m256) {
    // SAFETY (whole body): the caller guarantees 8 whole Q2_0 blocks at `xb` and 16 q8_0 blocks at `yb`; the
    // gathers read 4 bytes at the start of a block; features are enabled by the calling kernel.
    unsafe {
        // Lane m of the reduced vector: block m % 8, half m / 8 (see the module comment); from the level-2
        // layout, partial p of (block b, half h) sits at lane 4b + 2h + p of the two concatenated vectors.
        let last0 = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 2, 6, 10, 14, 18, 22, 26, 30);
        let last1 = _mm512_setr_epi32(1, 5, 9, 13, 17, 21, 25, 29, 3, 7, 11, 15, 19, 23, 27, 31);
        // d1 in the lane order of the reduced sums (lane m: q8 block 2·(m % 8) + m / 8), collected with scalar
        // moves (load/store ports, idle here) rather than a gather.
        let mut d1_bits = [0u16; 16];
        for m in 0..8 {
            d1_bits[m] = (yb.add(2 * m * Q8_BYTES) as *const u16).read_unaligned();
            d1_bits[8 + m] = (yb.add((2 * m + 1) * Q8_BYTES) as *const u16).read_unaligned();
        }
        let d1 = _mm512_cvtph_ps(_mm256_loadu_si256(d1_bits.as_ptr() as *const __m256i));
        let mut d0_bits = [0u16; 8];
        for (k, d) in d0_bits.iter_mut().enumerate() {
            *d = (xb.add(k * Q2_BYTES) as *const u16).read_unaligned();
        }
        let d0 = _mm256_cvtph_ps(_mm_loadu_si128(d0_bits.as_ptr() as *const __m128i));
        let v: [__m512i; 8] = std::array::from_fn(|b| {
            let q0 = yb.add(2 * b * Q8_BYTES + 2);
            q2_block_partials(xb.add(b * Q2_BYTES + 2), q0, q0.add(Q8_BYTES))
        });
        let w = [
            pair_sums(v[0], v[1]),
            pair_sums(v[2], v[3]),
            pair_sums(v[4], v[5]),
            pair_sums(v[6], v[7]),
        ];
        let u = [pair_sums(w[0], w[1]), pair_sums(w[2], w[3])];
        let sums = _mm512_add_epi32(
            _mm512_permutex2var_epi32(u[0], last0, u[1]),
            _mm512_permutex2var_epi32(u[0], last1, u[1]),
        );
        let s = _mm512_cvtepi32_ps(sums);
        let hi = |v: __m512| _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
        let (s_lo, s_hi) = (_mm512_castps512_ps256(s), hi(s));
        let (d1_lo, d1_hi) = (_mm512_castps512_ps256(d1), hi(d1));
        if FMA {
            (
                d0,
                _mm256_fmadd_ps(
                    d1_hi,
                    s_hi,
                    _mm256_fmadd_ps(d1_lo, s_lo, _mm256_setzero_ps()),
                ),
            )
        } else {
            let sumi = _mm256_add_ps(
                _mm256_add_ps(_mm256_setzero_ps(), _mm256_mul_ps(d1_lo, s_lo)),
                _mm256_mul_ps(d1_hi, s_hi),
            );
            (_mm256_mul_ps(d0, sumi), d0)
        }
    }
}

/// The sequential part: eight steps of `sumf = fma(d0, sumi, sumf)` (or `sumf += d0·sumi`), in block order.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
unsafe fn q2_batch_chain<const FMA: bool>(mut sumf: f32, terms: (__m256, __m256)) -> f32 {
    let mut a = [0f32; 8];
    let mut b = [0f32; 8];
    // SAFETY: plain stores of two registers into local arrays.
    unsafe {
        _mm256_storeu_ps(a.as_mut_ptr(), terms.0);
        _mm256_storeu_ps(b.as_mut_ptr(), terms.1);
    }
    for k in 0..8 {
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
/// Software-pipelined: the integer and per-block float work of batch `k + 1` is issued before the sequential
/// chain of batch `k`, so the chain (4 cycles per block) runs while the next batch's vector work executes
/// instead of behind it.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI/VBMI, AVX2, FMA and F16C; `y.len() >= 2 * x.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub unsafe fn vec_dot_q2_0_q8_0<const FMA: bool>(x: &[BlockQ2_0], y: &[BlockQ8_0]) -> f32 {
    debug_assert!(y.len() >= 2 * x.len());
    let batches = x.len() / 8;
    let xp = x.as_ptr() as *const u8;
    let yp = y.as_ptr() as *const u8;
    let mut sumf = 0.0f32;
    if batches > 0 {
        // SAFETY: batch k < batches covers blocks 8k..8k+8 of x and 16k..16k+16 of y, inside the slices.
        unsafe {
            let at = |k: usize| (xp.add(8 * k * Q2_BYTES), yp.add(16 * k * Q8_BYTES));
            let (xb, yb) = at(0);
            let mut pending = q2_batch_terms::<FMA>(xb, yb);
            for k in 1..batches {
                let (xb, yb) = at(k);
                let next = q2_batch_terms::<FMA>(xb, yb);
                sumf = q2_batch_chain::<FMA>(sumf, pending);
                pending = next;
            }
            sumf = q2_batch_chain::<FMA>(sumf, pending);
        }
    }
    // Up to seven blocks left: the scalar chain continues with the same float order.
    let done = 8 * batches;
    q2_0_tail::<FMA>(sumf, &x[done..], &y[2 * done..])
}

/// `dequantize_row_q2_0`: the same expansion as the dot product, 64 floats per block.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VBMI; `y.len() >= 64 * x.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub unsafe fn dequantize_row_q2_0(x: &[BlockQ2_0], y: &mut [f32]) {
    debug_assert!(y.len() >= 64 * x.len());
    // SAFETY: block i < x.len() and its 64 floats fit in y by the contract above.
    unsafe {
        let ctrl = _mm512_set1_epi64(0x0e0c_0a08_0604_0200);
        let out = y.as_mut_ptr();
        for (i, b) in x.iter().enumerate() {
            let d = _mm512_set1_ps(b.d.to_f32());
            let words = _mm512_cvtepu16_epi64(_mm_loadu_si128(b.qs.as_ptr() as *const __m128i));
            let c = _mm512_and_si512(
                _mm512_multishift_epi64_epi8(ctrl, words),
                _mm512_set1_epi8(3),
            );
            let w = _mm512_sub_epi8(c, _mm512_set1_epi8(1));
            for k in 0..4 {
                let part = match k {
                    0 => _mm512_extracti32x4_epi32::<0>(w),
                    1 => _mm512_extracti32x4_epi32::<1>(w),
                    2 => _mm512_extracti32x4_epi32::<2>(w),
                    _ => _mm512_extracti32x4_epi32::<3>(w),
                };
                let v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(part));
                _mm512_storeu_ps(out.add(64 * i + 16 * k), _mm512_mul_ps(v, d));
            }
        }
    }
}

/// `quantize_row_q8_0` of either build. The per-block work is a handful of 256-bit operations whose order is
/// the stock AVX path's own, so the AVX2 code is the right one here too.
///
/// # Safety
/// As `avx2::quantize_row_q8_0`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub unsafe fn quantize_row_q8_0<const AVX_ORDER: bool>(x: &[f32], y: &mut [BlockQ8_0]) {
    // SAFETY: the AVX2 kernel's features are a subset of this function's.
    unsafe { super::avx2::quantize_row_q8_0::<AVX_ORDER>(x, y) }
}
