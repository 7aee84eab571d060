//! AVX-512 kernels (F, BW, VL, VNNI, VBMI), same function names as `avx2.rs`.
//!
//! Q2_0 · q8_0, eight blocks per batch:
//! - one zmm per block: `vpmovzxwq` puts code word `Q` in qword `Q`, `vpmultishiftqb` takes the bits at offset
//!   `2·(j % 8)` for byte `j`, a mask leaves the code of weight `j` in byte `j`;
//! - `vpdpbusd(c, q) − vpdpbusd(1, q)` gives sixteen dword partials of `Σ(c − 1)·q` (eight per half);
//! - the reduction uses in-lane unpacks and two 128-bit-lane shuffles (no cross-lane index permutes), which was
//!   the fastest of the variants measured (`docs/PERFORMANCE.md`);
//! - scales are collected with scalar moves instead of gathers (gathers are microcoded and slow on Zen 4);
//! - the float chain follows the stock build exactly, and is software-pipelined: batch `k + 1`'s vector work is
//!   issued before batch `k`'s sequential `sumf` steps, so the 4-cycle-per-block chain overlaps it.

use std::arch::x86_64::*;

use super::pipelined;
use crate::formats::pq2_0::{vec_dot_pq2_0_q8_0_from, BlockPQ2_0};
use crate::formats::q2_0::{vec_dot_q2_0_q8_0_from, BlockQ2_0};
use crate::formats::q8_0::BlockQ8_0;

const Q2_BYTES: usize = 18;
const Q8_BYTES: usize = 34;
const PQ2_BYTES: usize = 34;

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

/// `Σ(c − 1)·q` of eight 64-weight code groups (`codes(g)` points at group `g`'s 16 code bytes) against the 16
/// q8_0 blocks at `yb`, as floats. Lane `8j + 4h + g` (j = g / 4) holds half `h` of group `4j + (g % 4)`, i.e.
/// q8_0 block `2g + h`. Shared by Q2_0 (a group is a block) and PQ2_0 (a block is two groups).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
unsafe fn group_sums(codes: impl Fn(usize) -> *const u8, yb: *const u8) -> __m512 {
    // SAFETY (whole body): the caller guarantees 16 code bytes at each `codes(g)` and 16 q8_0 blocks at `yb`;
    // features are enabled by this function.
    unsafe {
        let v: [__m512i; 8] = std::array::from_fn(|g| {
            let q0 = yb.add(2 * g * Q8_BYTES + 2);
            q2_block_partials(codes(g), q0, q0.add(Q8_BYTES))
        });
        // Reduction with in-lane unpacks only: after two levels, 128-bit lane l of r[j] holds
        // [v[4j]_l, v[4j+1]_l, v[4j+2]_l, v[4j+3]_l] (sums of lane l's four dwords).
        let unpack32 = |a: __m512i, b: __m512i| {
            _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b))
        };
        let unpack64 = |a: __m512i, b: __m512i| {
            _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b))
        };
        let r = [
            unpack64(unpack32(v[0], v[1]), unpack32(v[2], v[3])),
            unpack64(unpack32(v[4], v[5]), unpack32(v[6], v[7])),
        ];
        // A half is two 128-bit lanes: (0, 1) the first, (2, 3) the second.
        let sums = _mm512_add_epi32(
            _mm512_shuffle_i32x4::<0x88>(r[0], r[1]),
            _mm512_shuffle_i32x4::<0xdd>(r[0], r[1]),
        );
        _mm512_cvtepi32_ps(sums)
    }
}

/// The scales of the 16 q8_0 blocks at `yb` in `group_sums`' lane order (q8_0 block `2g + h` in lane
/// `8(g / 4) + 4h + g % 4`), collected with scalar moves (gathers are microcoded and slow on Zen 4).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
unsafe fn group_d1(yb: *const u8) -> __m512 {
    let mut bits = [0u16; 16];
    for g in 0..8 {
        for h in 0..2 {
            // SAFETY: the caller guarantees 16 q8_0 blocks at `yb`; each read is a block's 2-byte scale.
            bits[8 * (g / 4) + 4 * h + g % 4] =
                unsafe { (yb.add((2 * g + h) * Q8_BYTES) as *const u16).read_unaligned() };
        }
    }
    // SAFETY: a load of the local array.
    unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(bits.as_ptr() as *const __m256i)) }
}

/// Per-batch float terms of eight Q2_0 blocks: for the FMA chain `(d0, sumi)`, for the unfused chain
/// `(d0·sumi, _)`. Block `k` sits in lane `CHAIN_LANES[k]`. Nothing here depends on the running `sumf`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
unsafe fn q2_batch_terms<const FMA: bool>(xb: *const u8, yb: *const u8) -> (__m512, __m512) {
    // SAFETY (whole body): the caller guarantees 8 whole Q2_0 blocks at `xb` and 16 q8_0 blocks at `yb`;
    // features are enabled by this function.
    unsafe {
        let s = group_sums(|g| xb.add(g * Q2_BYTES + 2), yb);
        let d1 = group_d1(yb);
        let mut d0_bits = [0u16; 16];
        for k in 0..8 {
            d0_bits[CHAIN_LANES[k]] = (xb.add(k * Q2_BYTES) as *const u16).read_unaligned();
        }
        let d0 = _mm512_cvtph_ps(_mm256_loadu_si256(d0_bits.as_ptr() as *const __m256i));
        // Swapping 128-bit lanes (0 ↔ 1, 2 ↔ 3) puts each block's second half under its first.
        let swap = |v: __m512| _mm512_shuffle_f32x4::<0xb1>(v, v);
        if FMA {
            let first = _mm512_fmadd_ps(d1, s, _mm512_setzero_ps());
            (d0, _mm512_fmadd_ps(swap(d1), swap(s), first))
        } else {
            let prod = _mm512_mul_ps(d1, s);
            let sumi = _mm512_add_ps(_mm512_add_ps(_mm512_setzero_ps(), prod), swap(prod));
            (_mm512_mul_ps(d0, sumi), d0)
        }
    }
}

/// Lane of block `k` in `q2_batch_terms`' result.
const CHAIN_LANES: [usize; 8] = [0, 1, 2, 3, 8, 9, 10, 11];

/// The sequential part: eight steps of `sumf = fma(d0, sumi, sumf)` (or `sumf += d0·sumi`), in block order.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
unsafe fn q2_batch_chain<const FMA: bool>(mut sumf: f32, terms: (__m512, __m512)) -> f32 {
    let mut a = [0f32; 16];
    let mut b = [0f32; 16];
    // SAFETY: plain stores of two registers into local arrays.
    unsafe {
        _mm512_storeu_ps(a.as_mut_ptr(), terms.0);
        _mm512_storeu_ps(b.as_mut_ptr(), terms.1);
    }
    for k in CHAIN_LANES {
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
    // SAFETY (both closures): batch k < batches covers blocks 8k..8k+8 of x and 16k..16k+16 of y, inside the
    // slices; this function's target features cover the helpers'.
    let sumf = pipelined(
        batches,
        |k| unsafe { q2_batch_terms::<FMA>(xp.add(8 * k * Q2_BYTES), yp.add(16 * k * Q8_BYTES)) },
        |sumf, terms| unsafe { q2_batch_chain::<FMA>(sumf, terms) },
    );
    // Up to seven blocks left: the scalar chain continues with the same float order.
    let done = 8 * batches;
    vec_dot_q2_0_q8_0_from::<FMA>(sumf, &x[done..], &y[2 * done..])
}

/// `ggml_vec_dot_pq2_0_q8_0` (PrismML fork) with the FMA (`FMA = true`) or unfused chain: four blocks (eight
/// code groups) per batch through `group_sums`, then each block's four-step `sumi` and the `sumf` step in scalar
/// code, software-pipelined like the Q2_0 kernel.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI/VBMI, AVX2, FMA and F16C; `y.len() >= 4 * x.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub unsafe fn vec_dot_pq2_0_q8_0<const FMA: bool>(x: &[BlockPQ2_0], y: &[BlockQ8_0]) -> f32 {
    debug_assert!(y.len() >= 4 * x.len());
    let batches = x.len() / 4;
    let xp = x.as_ptr() as *const u8;
    let yp = y.as_ptr() as *const u8;
    // SAFETY (both closures): batch k < batches covers blocks 4k..4k+4 of x and 16k..16k+16 of y, inside the
    // slices; this function's target features cover the helpers'.
    let sumf = pipelined(
        batches,
        |k| unsafe {
            let (xb, yb) = (xp.add(4 * k * PQ2_BYTES), yp.add(16 * k * Q8_BYTES));
            let s = group_sums(|g| xb.add((g / 2) * PQ2_BYTES + 2 + 16 * (g % 2)), yb);
            (
                s,
                group_d1(yb),
                [0, 1, 2, 3].map(|p| x[4 * k + p].d.to_f32()),
            )
        },
        |mut sumf, (s, d1, d0): (__m512, __m512, [f32; 4])| {
            // Each block's `sumi` in its own lane: vector k holds quarter k of blocks 0..3. Quarter k of block p is
            // half h = k % 2 of group g = 2p + k / 2, in lane 8(g / 4) + 4h + g % 4 of `s` and `d1`.
            let quarter = |v: __m512, k: i32| {
                let lane = |p: i32| {
                    let g = 2 * p + k / 2;
                    8 * (g / 4) + 4 * (k % 2) + g % 4
                };
                // Register-only AVX-512F operations: safe inside this function's target features.
                _mm512_castps512_ps128(_mm512_permutexvar_ps(
                    _mm512_setr_epi32(
                        lane(0),
                        lane(1),
                        lane(2),
                        lane(3),
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                    ),
                    v,
                ))
            };
            // SAFETY: register-only operations, and a store into a local array.
            let sumi = unsafe {
                let mut acc = _mm_setzero_ps();
                for k in 0..4 {
                    acc = if FMA {
                        _mm_fmadd_ps(quarter(d1, k), quarter(s, k), acc)
                    } else {
                        _mm_add_ps(acc, _mm_mul_ps(quarter(d1, k), quarter(s, k)))
                    };
                }
                let mut lanes = [0f32; 4];
                _mm_storeu_ps(lanes.as_mut_ptr(), acc);
                lanes
            };
            for (d0p, sumip) in d0.into_iter().zip(sumi) {
                sumf = if FMA {
                    d0p.mul_add(sumip, sumf)
                } else {
                    sumf + d0p * sumip
                };
            }
            sumf
        },
    );
    let done = 4 * batches;
    vec_dot_pq2_0_q8_0_from::<FMA>(sumf, &x[done..], &y[4 * done..])
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
