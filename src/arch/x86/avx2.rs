//! AVX2 + FMA + F16C kernels.
//!
//! Q2_0 · q8_0: per block half, codes are expanded with one cross-lane dword permute, a per-dword variable shift
//! and a mask, which leaves them in a "shift-major" order inside each 128-bit lane (byte `4r + b` holds the code
//! of weight `4b + r`); the q8 bytes get the matching in-lane byte shuffle. `maddubs(c, q) − maddubs(1, q)` then
//! gives `Σ(c − 1)·q` in pairs. A whole half-block sum is bounded by 32·2·128 = 8192, so the reduction of four
//! blocks (eight halves) stays in i16 with a `phaddw` tree. The float chain follows the stock build exactly:
//! per-block `sumi` in SIMD lanes, then `sumf` sequentially in block order.

use std::arch::x86_64::*;

use super::{
    hsum_epi32, hsum_float_8_ps, iq_block_float_step, iq_row_result, pipelined, prefetch_ahead,
    Base3Layout,
};
use crate::formats::iq::{self, IqBlock};
use crate::formats::iq2_s::BlockIQ2S;
use crate::formats::iq2_xs::BlockIQ2XS;
use crate::formats::iq2_xxs::BlockIQ2XXS;
use crate::formats::iq3_s::BlockIQ3S;
use crate::formats::iq3_xxs::BlockIQ3XXS;
use crate::formats::iq_grids::{
    IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS,
};
use crate::formats::pq2_0::{pq2_0_block_chain, vec_dot_pq2_0_q8_0_from, BlockPQ2_0};
use crate::formats::ptq1_0::{element_source, vec_dot_ptq1_0_q8_0_from, BlockPTQ1_0};
use crate::formats::q1_0::{self, BlockQ1_0};
use crate::formats::q2_0::{vec_dot_q2_0_q8_0_from, BlockQ2_0};
use crate::formats::q8_0::{quantize_block_q8_0_ref_model, BlockQ8_0, QK8_0};
use crate::formats::q8_k::{BlockQ8K, QK_K};
use crate::formats::tq1_0::BlockTQ1_0;
use crate::formats::tq2_0::{self, BlockTQ2_0};
use crate::fp16::{f32_to_f16_ggml_soft_model, GgmlHalf, F16_TO_F32_TABLE};
use crate::tiles::{mul_mat_q2_0_tiles, Emit, Q2ColumnBatch, Rows};

const Q2_BYTES: usize = 18;
const Q8_BYTES: usize = 34;
const PQ2_BYTES: usize = 34;
const PTQ1_BYTES: usize = 28;
const Q1_BYTES: usize = 18;

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

/// Both halves of a 64-weight Q2_0 code group (16 code bytes at `codes`) as `q2_half_pairs`.
#[inline(always)]
unsafe fn q2_group_pairs(codes: *const u8, q0: *const u8, q1: *const u8) -> [__m256i; 2] {
    // SAFETY (whole body): the caller guarantees 16 bytes at `codes` and 32 at `q0` and `q1`; AVX2 is enabled
    // by the calling kernel.
    unsafe {
        let c = _mm256_castsi128_si256(_mm_loadu_si128(codes as *const __m128i));
        [
            q2_half_pairs(c, _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), q0),
            q2_half_pairs(c, _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3), q1),
        ]
    }
}

/// `Σ(w − 1)·q` of four 64-weight groups against the 8 q8_0 blocks at `yb`, as floats. `pairs(g, q0, q1)` gives
/// the 16 i16 pair sums of each 32-weight half of group `g`, the q8 quants of its halves being at `q0` and `q1`.
/// Lane `4h + g` holds half `h` of group `g`, i.e. q8_0 block `2g + h`. Shared by Q2_0 (a group is a block),
/// PQ2_0 and PTQ1_0 (a block is two groups).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_sums(
    pairs: impl Fn(usize, *const u8, *const u8) -> [__m256i; 2],
    yb: *const u8,
) -> __m256 {
    // SAFETY (whole body): the caller guarantees 8 q8_0 blocks at `yb`; features are enabled by this function.
    unsafe {
        let mut h = [_mm256_setzero_si256(); 8];
        for g in 0..4 {
            let q0 = yb.add((2 * g) * Q8_BYTES + 2);
            [h[g], h[4 + g]] = pairs(g, q0, q0.add(Q8_BYTES));
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
        let s = group_sums(
            |g, q0, q1| q2_group_pairs(xb.add(g * Q2_BYTES + 2), q0, q1),
            yb,
        );
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

/// Lane order of the AVX2 tile kernel's per-batch vectors (`q2_tile_terms`): lane `l` holds block
/// `AVX2_TILE_BLOCKS[l]` (what two `vphaddd` and one `vshufps` leave, kept instead of permuted back).
const AVX2_TILE_BLOCKS: [usize; 8] = [0, 2, 4, 6, 1, 3, 5, 7];

/// `vpshufb` index grouping one 16-quant lane by field: bytes `4k..4k+4` take the quants of weights `4i + k`.
const FIELD_GROUPS: [u8; 32] = {
    let mut t = [0u8; 32];
    let mut j = 0;
    while j < 32 {
        t[j] = (16 * (j / 16) + 4 * (j % 4) + (j % 16) / 4) as u8;
        j += 1;
    }
    t
};

/// Prepares the full batches of one q8_0 column (`y.len() / 16` of them) into `out`, in the layout of
/// `tiles::Q2ColumnBatch` (the quants exactly as the AVX-512 preparation lays them out; `qsum` and `d1` in
/// `AVX2_TILE_BLOCKS` order: lane `8h + l` for q8_0 block `2·AVX2_TILE_BLOCKS[l] + h`).
///
/// # Safety
/// The CPU must have AVX2 and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q2_prepare_column(y: &[BlockQ8_0], out: &mut Vec<Q2ColumnBatch>) {
    out.clear();
    let yp = y.as_ptr() as *const u8;
    // SAFETY: batch k < y.len() / 16 reads q8_0 blocks 16k..16k+16 of `y`; stores go to the local batch.
    unsafe {
        let groups = _mm256_loadu_si256(FIELD_GROUPS.as_ptr() as *const __m256i);
        let interleave = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for k in 0..y.len() / 16 {
            let yb = yp.add(16 * k * Q8_BYTES);
            let mut batch = Q2ColumnBatch::ZERO;
            for b in 0..8 {
                // Block b's 64 quants: lanes L0..L3 of 16; each lane grouped by field, then a 4 × 4 transpose
                // of dwords gathers field f's four dwords [L0, L1, L2, L3].
                let q = yb.add(2 * b * Q8_BYTES + 2);
                let a = _mm256_shuffle_epi8(_mm256_loadu_si256(q as *const __m256i), groups);
                let c = _mm256_shuffle_epi8(
                    _mm256_loadu_si256(q.add(Q8_BYTES) as *const __m256i),
                    groups,
                );
                let f01 = _mm256_permutevar8x32_epi32(_mm256_unpacklo_epi32(a, c), interleave);
                let f23 = _mm256_permutevar8x32_epi32(_mm256_unpackhi_epi32(a, c), interleave);
                let (h, g) = (b / 4, b % 4);
                let fields = [
                    _mm256_castsi256_si128(f01),
                    _mm256_extracti128_si256::<1>(f01),
                    _mm256_castsi256_si128(f23),
                    _mm256_extracti128_si256::<1>(f23),
                ];
                for (f, v) in fields.into_iter().enumerate() {
                    _mm_storeu_si128(batch.q[h][f].as_mut_ptr().add(16 * g) as *mut __m128i, v);
                }
            }
            let mut d1_bits = [0u16; 16];
            for (l, &b) in AVX2_TILE_BLOCKS.iter().enumerate() {
                for h in 0..2 {
                    let block = &y[16 * k + 2 * b + h];
                    batch.qsum[8 * h + l] = block.qs.iter().map(|&v| v as i32).sum();
                    d1_bits[8 * h + l] = block.d.to_bits();
                }
            }
            for h in 0..2 {
                let words = _mm_loadu_si128(d1_bits.as_ptr().add(8 * h) as *const __m128i);
                _mm256_storeu_ps(batch.d1.as_mut_ptr().add(8 * h), _mm256_cvtph_ps(words));
            }
            out.push(batch);
        }
    }
}

/// Eight dword partials of `Σ c·q` for the two blocks whose code bytes are in `codes` (one per 128-bit lane):
/// field `k` of every code byte (shifted down and masked: AVX2 has no GFNI) times the quants prepared for it
/// with `vpmaddubsw` (at most 2·3·128 per i16 pair, 4 fields fit in i16), summed, then widened in pairs.
#[inline(always)]
unsafe fn q2_tile_pair(codes: __m256i, q: &[[u8; 64]; 4], half: usize) -> __m256i {
    // SAFETY (whole body): 32-byte loads inside the prepared arrays; features come from the caller.
    unsafe {
        let three = _mm256_set1_epi8(3);
        let load = |k: usize| _mm256_loadu_si256(q[k].as_ptr().add(32 * half) as *const __m256i);
        let field = |k: i32| match k {
            0 => _mm256_and_si256(codes, three),
            1 => _mm256_and_si256(_mm256_srli_epi16::<2>(codes), three),
            2 => _mm256_and_si256(_mm256_srli_epi16::<4>(codes), three),
            _ => _mm256_and_si256(_mm256_srli_epi16::<6>(codes), three),
        };
        let m01 = _mm256_add_epi16(
            _mm256_maddubs_epi16(field(0), load(0)),
            _mm256_maddubs_epi16(field(1), load(1)),
        );
        let m23 = _mm256_add_epi16(
            _mm256_maddubs_epi16(field(2), load(2)),
            _mm256_maddubs_epi16(field(3), load(3)),
        );
        _mm256_madd_epi16(_mm256_add_epi16(m01, m23), _mm256_set1_epi16(1))
    }
}

/// One row's float terms for one batch against a prepared column, lanes in `AVX2_TILE_BLOCKS` order:
/// `(d0, sumi)` for the FMA chain, `(d0·sumi, _)` for the unfused one, `sumi` computed as the vec_dot kernels do.
#[inline(always)]
unsafe fn q2_tile_terms<const FMA: bool>(xb: *const u8, p: &Q2ColumnBatch) -> (__m256, __m256) {
    // SAFETY (whole body): the caller guarantees eight whole Q2_0 blocks (144 bytes) at `xb`; every load stays
    // inside them or the prepared batch; features come from the caller.
    unsafe {
        // acc[j]: blocks 2j (low lane) and 2j + 1 (high lane); dword 4g + w sums weights 16w..16w+16.
        let codes = |j: usize| {
            let lo = _mm_loadu_si128(xb.add(Q2_BYTES * 2 * j + 2) as *const __m128i);
            let hi = _mm_loadu_si128(xb.add(Q2_BYTES * (2 * j + 1) + 2) as *const __m128i);
            _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(lo), hi)
        };
        let acc = [
            q2_tile_pair(codes(0), &p.q[0], 0),
            q2_tile_pair(codes(1), &p.q[0], 1),
            q2_tile_pair(codes(2), &p.q[1], 0),
            q2_tile_pair(codes(3), &p.q[1], 1),
        ];
        // Per lane, hadd gives [b h0, b h1, b' h0, b' h1]: blocks (0, 2 | 1, 3) and (4, 6 | 5, 7).
        let x = _mm256_castsi256_ps(_mm256_hadd_epi32(acc[0], acc[1]));
        let y = _mm256_castsi256_ps(_mm256_hadd_epi32(acc[2], acc[3]));
        let half = |v: __m256, k: usize| {
            let sums = _mm256_castps_si256(v);
            let qsum = _mm256_loadu_si256(p.qsum.as_ptr().add(8 * k) as *const __m256i);
            _mm256_cvtepi32_ps(_mm256_sub_epi32(sums, qsum))
        };
        let s_lo = half(_mm256_shuffle_ps::<0x88>(x, y), 0);
        let s_hi = half(_mm256_shuffle_ps::<0xdd>(x, y), 1);
        let d1_lo = _mm256_loadu_ps(p.d1.as_ptr());
        let d1_hi = _mm256_loadu_ps(p.d1.as_ptr().add(8));
        let mut d0_bits = [0u16; 8];
        for (l, &b) in AVX2_TILE_BLOCKS.iter().enumerate() {
            d0_bits[l] = (xb.add(b * Q2_BYTES) as *const u16).read_unaligned();
        }
        let d0 = _mm256_cvtph_ps(_mm_loadu_si128(d0_bits.as_ptr() as *const __m128i));
        if FMA {
            let first = _mm256_fmadd_ps(d1_lo, s_lo, _mm256_setzero_ps());
            (d0, _mm256_fmadd_ps(d1_hi, s_hi, first))
        } else {
            let zero = _mm256_setzero_ps();
            let sumi = _mm256_add_ps(
                _mm256_add_ps(zero, _mm256_mul_ps(d1_lo, s_lo)),
                _mm256_mul_ps(d1_hi, s_hi),
            );
            (_mm256_mul_ps(d0, sumi), d0)
        }
    }
}

/// The sequential part of one row's batch: eight chain steps in block order (lanes in `AVX2_TILE_BLOCKS`
/// order, so block `b` is read from lane `2b` or `2b − 7`).
#[inline(always)]
fn q2_tile_chain<const FMA: bool>(mut sumf: f32, terms: (__m256, __m256)) -> f32 {
    let mut a = [0f32; 8];
    let mut b = [0f32; 8];
    // SAFETY: plain stores of two registers into local arrays (AVX is enabled by every caller).
    unsafe {
        _mm256_storeu_ps(a.as_mut_ptr(), terms.0);
        _mm256_storeu_ps(b.as_mut_ptr(), terms.1);
    }
    for block in 0..8 {
        let l = if block % 2 == 0 {
            block / 2
        } else {
            4 + block / 2
        };
        sumf = if FMA {
            a[l].mul_add(b[l], sumf)
        } else {
            sumf + a[l]
        };
    }
    sumf
}

/// The running sums of `R` rows after every full batch of a prepared column, chains interleaved and
/// software-pipelined as in the AVX-512 tile kernel. (Each file keeps its own copy of this loop: one generic
/// helper taking the terms as a closure was not inlined and cost 42 % of the AVX2 speed and 22 % of the
/// AVX-512 one, measured.)
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q2_tile_rows<const FMA: bool, const R: usize>(
    rows: [*const u8; R],
    prep: &[Q2ColumnBatch],
) -> [f32; R] {
    let mut sumf = [0f32; R];
    if prep.is_empty() {
        return sumf;
    }
    // SAFETY: every row holds 8·prep.len() blocks (caller); batch k reads bytes 144k..144k+144.
    unsafe {
        let zero = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut pending = [zero; R];
        for r in 0..R {
            pending[r] = q2_tile_terms::<FMA>(rows[r], &prep[0]);
        }
        for (k, p) in prep.iter().enumerate().skip(1) {
            let mut next = [zero; R];
            for r in 0..R {
                prefetch_ahead(rows[r].wrapping_add(8 * k * Q2_BYTES), 8 * Q2_BYTES);
                next[r] = q2_tile_terms::<FMA>(rows[r].add(8 * k * Q2_BYTES), p);
            }
            for r in 0..R {
                sumf[r] = q2_tile_chain::<FMA>(sumf[r], pending[r]);
            }
            pending = next;
        }
        for r in 0..R {
            sumf[r] = q2_tile_chain::<FMA>(sumf[r], pending[r]);
        }
    }
    sumf
}

/// `W · Y` for Q2_0 weights against q8_0 columns through the shared tile driver, with `vpmaddubsw` in place of
/// VNNI and shifts in place of GFNI; every element with the bits of `vec_dot_q2_0_q8_0::<FMA>`.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `y.nb() >= 2 * x.nb()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn mul_mat_q2_0_q8_0<const FMA: bool>(
    x: Rows<'_, BlockQ2_0>,
    y: Rows<'_, BlockQ8_0>,
    emit: Emit<'_>,
) {
    // SAFETY: the caller's contract covers the functions' features.
    unsafe {
        mul_mat_q2_0_tiles::<FMA>(
            x,
            y,
            emit,
            q2_prepare_column,
            q2_tile_rows::<FMA, 4>,
            q2_tile_rows::<FMA, 1>,
            None,
        )
    }
}

/// The driver shared by the fork's 128-weight formats (PQ2_0, PTQ1_0): two blocks (four 64-weight groups) per
/// batch through `group_sums`, then each block's four-step `sumi` and the `sumf` step in scalar code,
/// software-pipelined like the Q2_0 kernel. `pairs(b, h, q0, q1)` gives the i16 pair sums of the two quarters of
/// half `h` of block `b` against the q8 quants at `q0` and `q1`; `d0_bits(b)` is the block's f16 scale. Returns the running
/// sum after `2·batches` blocks; the caller finishes the tail with its format's chain.
///
/// # Safety
/// `yp` points at `8·batches` q8_0 blocks; `pairs` and `d0_bits` are valid for blocks `0..2·batches`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn fork_block_batches<const FMA: bool>(
    batches: usize,
    yp: *const u8,
    pairs: impl Fn(usize, usize, *const u8, *const u8) -> [__m256i; 2],
    d0_bits: impl Fn(usize) -> u16,
) -> f32 {
    // SAFETY (both closures): batch k < batches covers blocks 2k..2k+2 and q8_0 blocks 8k..8k+8, inside what
    // the caller guarantees; this function's target features cover the helpers'.
    pipelined(
        batches,
        |k| unsafe {
            let yb = yp.add(8 * k * Q8_BYTES);
            let s = group_sums(|g, q0, q1| pairs(2 * k + g / 2, g % 2, q0, q1), yb);
            // F16C for the block scales (the software conversion costs more than the rest of a block).
            let d0 = _mm_insert_epi16::<1>(
                _mm_cvtsi32_si128(d0_bits(2 * k) as i32),
                d0_bits(2 * k + 1) as i32,
            );
            let mut d0s = [0f32; 4];
            _mm_storeu_ps(d0s.as_mut_ptr(), _mm_cvtph_ps(d0));
            (s, group_d1(yb), [d0s[0], d0s[1]])
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
    )
}

/// The 32 bits at `bits` as bytes: `0xff` where the bit is clear, 0 where set (bit `j % 8` of byte `j / 8`).
#[inline(always)]
unsafe fn q1_clear_mask(bits: *const u8) -> __m256i {
    // SAFETY (whole body): the caller guarantees 4 bytes at `bits`; AVX2 is enabled by the calling kernel.
    unsafe {
        let spread = _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3,
            3, 3, 3,
        );
        let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let word = _mm256_set1_epi32((bits as *const u32).read_unaligned() as i32);
        _mm256_cmpeq_epi8(
            _mm256_and_si256(_mm256_shuffle_epi8(word, spread), bit),
            _mm256_setzero_si256(),
        )
    }
}

/// The x64 build's `Σ ±q` of one Q1_0 quarter (bits at `bits`) against the quants at `q`, as 16 i16 pair sums:
/// weights as bytes `2·bit`, `maddubs(w, q) − maddubs(1, q)`.
#[inline(always)]
unsafe fn q1_quarter_pairs(bits: *const u8, q: *const u8) -> __m256i {
    // SAFETY (whole body): the caller guarantees 4 bytes at `bits` and 32 at `q`; AVX2 is enabled by the
    // calling kernel.
    unsafe {
        let w = _mm256_andnot_si256(q1_clear_mask(bits), _mm256_set1_epi8(2));
        let qv = _mm256_loadu_si256(q as *const __m256i);
        _mm256_sub_epi16(
            _mm256_maddubs_epi16(w, qv),
            _mm256_maddubs_epi16(_mm256_set1_epi8(1), qv),
        )
    }
}

/// An f16 at `p` as eight equal floats: its bits index `F16_TO_F32_TABLE`, and the broadcast reads memory (load
/// ports only, none of the vector ALU work `vcvtph2ps` costs).
#[inline(always)]
unsafe fn broadcast_half(p: *const u8) -> __m256 {
    // SAFETY: the caller guarantees 2 bytes at `p`; a u16 index is inside the 65536-entry table.
    unsafe {
        let h = (p as *const u16).read_unaligned();
        _mm256_broadcast_ss(&F16_TO_F32_TABLE[h as usize])
    }
}

/// `ggml_vec_dot_q1_0_q8_0` with the haswell build's eight-lane order (`HASWELL = true`) or the x64 build's
/// generic chain.
///
/// Haswell: stock's own steps per quarter (sign applied to bytes with `vpsignb`, which like stock's
/// `(q ^ m) − m` leaves −128 at −128; 4-byte lane sums by `maddubs`/`madd`), the scales broadcast from
/// `F16_TO_F32_TABLE`,
/// `acc_block = d1_0·s_0` then three FMAs, `acc = fma(d0, acc_block, acc)`; `hsum_float_8` at the end.
///
/// x64: the fork formats' unfused chain (`fork_block_batches::<false>`) over `q1_quarter_pairs`.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `y.len() >= 4 * x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q1_0_q8_0<const HASWELL: bool>(x: &[BlockQ1_0], y: &[BlockQ8_0]) -> f32 {
    debug_assert!(y.len() >= 4 * x.len());
    let xp = x.as_ptr() as *const u8;
    let yp = y.as_ptr() as *const u8;
    if !HASWELL {
        let batches = x.len() / 2;
        // SAFETY: blocks 0..2·batches of x and 8·batches q8_0 blocks of y are inside the slices; each half's
        // 8 bit bytes are inside its block.
        let sumf = unsafe {
            fork_block_batches::<false>(
                batches,
                yp,
                |b, h, q0, q1| {
                    let bits = xp.add(b * Q1_BYTES + 2 + 8 * h);
                    [
                        q1_quarter_pairs(bits, q0),
                        q1_quarter_pairs(bits.add(4), q1),
                    ]
                },
                |b| x[b].d.to_bits(),
            )
        };
        let done = 2 * batches;
        return q1_0::x64_chain_from(sumf, &x[done..], &y[4 * done..]);
    }
    // SAFETY (whole block): block `i` of x and q8_0 blocks 4i..4i+4 of y are inside the slices; this function
    // enables AVX2, FMA and F16C.
    unsafe {
        let ones8 = _mm256_set1_epi8(1);
        let ones16 = _mm256_set1_epi16(1);
        let mut acc = _mm256_setzero_ps();
        for i in 0..x.len() {
            let xb = xp.add(i * Q1_BYTES);
            let mut acc_block = _mm256_setzero_ps();
            for k in 0..4 {
                let yb = yp.add((4 * i + k) * Q8_BYTES);
                let qv = _mm256_loadu_si256(yb.add(2) as *const __m256i);
                let sign = _mm256_or_si256(q1_clear_mask(xb.add(2 + 4 * k)), ones8);
                let lanes = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(ones8, _mm256_sign_epi8(qv, sign)),
                    ones16,
                );
                let s = _mm256_cvtepi32_ps(lanes);
                acc_block = if k == 0 {
                    _mm256_mul_ps(broadcast_half(yb), s)
                } else {
                    _mm256_fmadd_ps(broadcast_half(yb), s, acc_block)
                };
            }
            acc = _mm256_fmadd_ps(broadcast_half(xb), acc_block, acc);
        }
        hsum_float_8_ps(acc)
    }
}

/// `ggml_vec_dot_pq2_0_q8_0` (PrismML fork) with the FMA (`FMA = true`) or unfused chain: the Q2_0 code
/// expansion on each 64-weight half, through `fork_block_batches`.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `y.len() >= 4 * x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_pq2_0_q8_0<const FMA: bool>(x: &[BlockPQ2_0], y: &[BlockQ8_0]) -> f32 {
    debug_assert!(y.len() >= 4 * x.len());
    let batches = x.len() / 2;
    let xp = x.as_ptr() as *const u8;
    // SAFETY: blocks 0..2·batches of x and 8·batches q8_0 blocks of y are inside the slices; each half's 16
    // code bytes are inside its block.
    let sumf = unsafe {
        fork_block_batches::<FMA>(
            batches,
            y.as_ptr() as *const u8,
            |b, h, q0, q1| q2_group_pairs(xp.add(b * PQ2_BYTES + 2 + 16 * h), q0, q1),
            |b| x[b].d.to_bits(),
        )
    };
    let done = 2 * batches;
    vec_dot_pq2_0_q8_0_from::<FMA>(sumf, &x[done..], &y[4 * done..])
}

/// PTQ1_0 quarter `k`'s byte shuffle: byte `i` of lane `l` picks the packed byte of element `32k + 16l + i`,
/// counted from the lane's source (`ptq1_quarter_sources`: packed bytes 0..16 or 12..28).
const fn ptq1_quarter_shuffle(k: usize) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut i = 0;
    while i < 32 {
        let base = if ptq1_lane_from_high(k, i / 16) {
            12
        } else {
            0
        };
        out[i] = (element_source(32 * k + i).0 - base) as u8;
        i += 1;
    }
    out
}

/// Whether lane `l` of quarter `k` reads the bytes at 12..28 of the block (else 0..16): elements 80..128 come
/// from packed bytes 16..26.
const fn ptq1_lane_from_high(k: usize, l: usize) -> bool {
    32 * k + 16 * l >= 80
}

static PTQ1_SHUFFLE: [[u8; 32]; 4] = [
    ptq1_quarter_shuffle(0),
    ptq1_quarter_shuffle(1),
    ptq1_quarter_shuffle(2),
    ptq1_quarter_shuffle(3),
];
/// PTQ1_0's per-word multipliers per 32-element quarter (`Base3Layout`).
static PTQ1_MULT_EVEN: [[u16; 16]; 4] = [
    PTQ1.word_mult::<16, false>(0),
    PTQ1.word_mult::<16, false>(32),
    PTQ1.word_mult::<16, false>(64),
    PTQ1.word_mult::<16, false>(96),
];
static PTQ1_MULT_ODD: [[u16; 16]; 4] = [
    PTQ1.word_mult::<16, true>(0),
    PTQ1.word_mult::<16, true>(32),
    PTQ1.word_mult::<16, true>(64),
    PTQ1.word_mult::<16, true>(96),
];
const PTQ1: Base3Layout = Base3Layout::Ptq1_0;

/// The 32 trits (0..=2, element order) of quarter `k` of the PTQ1_0 block at `b`, from its two 16-byte windows
/// `low` (bytes 0..16) and `high` (bytes 12..28, so nothing past the block is read): an in-lane shuffle to each
/// element's byte, `vpmullw` to `v = q·3ⁿ` in each word's high byte, `vpmulhuw` by 3 (even byte) or 768 (odd byte)
/// for `(v·3) >> 8`, and a merge.
#[inline(always)]
unsafe fn ptq1_quarter_trits(low: __m128i, high: __m128i, k: usize) -> __m256i {
    // SAFETY (whole body): register operations and loads of 32-byte statics; AVX2 is enabled by the calling
    // kernel.
    unsafe {
        let pick = |l: usize| if ptq1_lane_from_high(k, l) { high } else { low };
        let src = _mm256_set_m128i(pick(1), pick(0));
        let x = _mm256_shuffle_epi8(
            src,
            _mm256_loadu_si256(PTQ1_SHUFFLE[k].as_ptr() as *const __m256i),
        );
        let high_bytes = _mm256_set1_epi16(0xff00u16 as i16);
        let even = _mm256_mulhi_epu16(
            _mm256_mullo_epi16(
                x,
                _mm256_loadu_si256(PTQ1_MULT_EVEN[k].as_ptr() as *const __m256i),
            ),
            _mm256_set1_epi16(3),
        );
        let odd = _mm256_mulhi_epu16(
            _mm256_mullo_epi16(
                _mm256_and_si256(x, high_bytes),
                _mm256_loadu_si256(PTQ1_MULT_ODD[k].as_ptr() as *const __m256i),
            ),
            _mm256_set1_epi16(768),
        );
        _mm256_or_si256(even, _mm256_and_si256(odd, high_bytes))
    }
}

/// `Σ(t − 1)·q` of 32 trits in element order against 32 q8 bytes at `q`, as 16 i16 pair sums (each pair is at
/// most 2·128 in magnitude, so `maddubs` never saturates).
#[inline(always)]
unsafe fn trit_pairs(t: __m256i, q: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 32 bytes at `q`; AVX2 is enabled by the calling kernel.
    unsafe {
        let qv = _mm256_loadu_si256(q as *const __m256i);
        _mm256_sub_epi16(
            _mm256_maddubs_epi16(t, qv),
            _mm256_maddubs_epi16(_mm256_set1_epi8(1), qv),
        )
    }
}

/// `ggml_vec_dot_ptq1_0_q8_0` (PrismML fork) with the FMA (`FMA = true`) or unfused chain:
/// `ptq1_quarter_trits` on each 32-weight quarter, through `fork_block_batches`.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `y.len() >= 4 * x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_ptq1_0_q8_0<const FMA: bool>(x: &[BlockPTQ1_0], y: &[BlockQ8_0]) -> f32 {
    debug_assert!(y.len() >= 4 * x.len());
    let batches = x.len() / 2;
    let xp = x.as_ptr() as *const u8;
    // SAFETY: blocks 0..2·batches of x and 8·batches q8_0 blocks of y are inside the slices; both 16-byte
    // windows (0..16 and 12..28) are inside a block.
    let sumf = unsafe {
        fork_block_batches::<FMA>(
            batches,
            y.as_ptr() as *const u8,
            |b, h, q0, q1| {
                let block = xp.add(b * PTQ1_BYTES);
                let low = _mm_loadu_si128(block as *const __m128i);
                let high = _mm_loadu_si128(block.add(12) as *const __m128i);
                [
                    trit_pairs(ptq1_quarter_trits(low, high, 2 * h), q0),
                    trit_pairs(ptq1_quarter_trits(low, high, 2 * h + 1), q1),
                ]
            },
            |b| x[b].d.to_bits(),
        )
    };
    let done = 2 * batches;
    vec_dot_ptq1_0_q8_0_from::<FMA>(sumf, &x[done..], &y[4 * done..])
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
static Q8K_LOW_BYTES: [[u8; 32]; 4] = {
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

/// A ternary block's integer sums against q8_K as eight i32 lanes, from `w_q`, its groups' i16 pair sums
/// `Σ w·q` added up (`maddubs` of the unsigned weight bytes `w` against the quants), and `q_sum`, the same over
/// the quants alone: haswell, `w_q − bsums` with stock's i16 wrap-around (wrapping adds give the same i16 in any
/// order) and `madd` by ones; x64, `w_q − q_sum` (the block's own quants, not its `bsums`) the same way, exact
/// while every i16 sum stays in range (the callers' bounds). The x64 total is the sum of the lanes.
#[inline(always)]
unsafe fn ternary_block_lanes<const HASWELL: bool>(
    w_q: __m256i,
    q_sum: __m256i,
    yb: &BlockQ8K,
) -> __m256i {
    // SAFETY: a 32-byte load of `yb.bsums`; AVX2 is enabled by the calling kernel.
    unsafe {
        let minus = if HASWELL {
            _mm256_loadu_si256(yb.bsums.as_ptr() as *const __m256i)
        } else {
            q_sum
        };
        _mm256_madd_epi16(_mm256_sub_epi16(w_q, minus), _mm256_set1_epi16(1))
    }
}

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
            let d = tq2_0::block_scale(xb, yb);
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

/// The base-3 digit `((v·3) >> 8)` of every byte `v` (`v` already multiplied by the digit's power of three):
/// stock haswell's `subs`, two `avg` and a shift, exact for all 256 values (`formats/tq1_0.rs`).
#[inline(always)]
unsafe fn tq1_digits(v: __m256i) -> __m256i {
    // SAFETY: register operations; AVX2 is enabled by the calling kernel.
    unsafe {
        let t = _mm256_subs_epu8(v, _mm256_set1_epi8(1));
        let r = _mm256_avg_epu8(t, _mm256_avg_epu8(t, _mm256_setzero_si256()));
        _mm256_and_si256(_mm256_srli_epi16::<6>(r), _mm256_set1_epi8(3))
    }
}

/// `v·3` per byte, modulo 256.
#[inline(always)]
unsafe fn times3(v: __m256i) -> __m256i {
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

/// One IQ format's 32-weight chunks for the AVX2 `vec_dot_iq_q8_k`, each format from its own fields
/// (`formats/iq*.rs`): grid entries by one scalar load each (as stock's AVX2 kernels do; AVX2 has no byte
/// permute wide enough for the permute lookups of the AVX-512 decoder), signs as a byte mask.
pub trait IqChunkDecode: IqBlock {
    /// The 32 grid magnitudes of chunk `ib` (elements `32·ib..32·ib + 32`) in element order.
    ///
    /// # Safety
    /// Only inside `vec_dot_iq_q8_k`, which enables AVX2.
    unsafe fn chunk_magnitudes(&self, ib: usize) -> __m256i;
    /// Byte `j` all ones where element `32·ib + j` is negative, else zero.
    ///
    /// # Safety
    /// As `chunk_magnitudes`.
    unsafe fn chunk_negative(&self, ib: usize) -> __m256i;
}

/// `KSIGNS_IQ2XS` as byte masks: byte `j` of entry `f` is all ones where bit `j` of `KSIGNS_IQ2XS[f]` is set.
static KSIGN_MASKS: [u64; 128] = {
    let mut t = [0u64; 128];
    let mut f = 0;
    while f < 128 {
        let mut j = 0;
        while j < 8 {
            if KSIGNS_IQ2XS[f] >> j & 1 == 1 {
                t[f] |= 0xff << (8 * j);
            }
            j += 1;
        }
        f += 1;
    }
    t
};

/// The byte masks of four 7-bit sign fields (IQ2_XXS, IQ2_XS, IQ3_XXS), field 0 lowest.
#[inline(always)]
unsafe fn ksign_masks(fields: [usize; 4]) -> __m256i {
    // SAFETY: register operations on table entries indexed `& 127` (128 entries); AVX2 is enabled by the
    // calling kernel.
    unsafe { entries4(fields.map(|f| KSIGN_MASKS[f & 127])) }
}

/// The byte masks of a sign word's four 7-bit fields (bits `7l..7l + 7`; IQ2_XXS, IQ3_XXS).
#[inline(always)]
unsafe fn ksign_word_masks(word: u32) -> __m256i {
    let word = word as usize;
    // SAFETY: as `ksign_masks`.
    unsafe { ksign_masks(std::array::from_fn(|l| word >> (7 * l))) }
}

/// `vpshufb` control spreading the four sign bytes of a broadcast dword: byte `j` takes byte `j / 8`.
static SIGN_SPREAD: [u8; 32] = {
    let mut t = [0u8; 32];
    let mut j = 0;
    while j < 32 {
        t[j] = (j / 8) as u8;
        j += 1;
    }
    t
};

/// The byte mask of 32 sign bits (IQ2_S, IQ3_S store them so): bit `j` of `bits` to byte `j`.
#[inline(always)]
unsafe fn sign_bit_masks(bits: u32) -> __m256i {
    // SAFETY: a load of a 32-byte static and register operations; AVX2 is enabled by the calling kernel.
    unsafe {
        let spread = _mm256_loadu_si256(SIGN_SPREAD.as_ptr() as *const __m256i);
        let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), spread);
        _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit)
    }
}

/// Four eight-byte grid entries as one vector, entry 0 lowest.
#[inline(always)]
unsafe fn entries4(e: [u64; 4]) -> __m256i {
    // SAFETY: a register operation; AVX2 is enabled by the calling kernel.
    unsafe { _mm256_setr_epi64x(e[0] as i64, e[1] as i64, e[2] as i64, e[3] as i64) }
}

/// Eight four-byte grid entries as one vector, entry 0 lowest.
#[inline(always)]
unsafe fn entries8(e: [u32; 8]) -> __m256i {
    // SAFETY: an unaligned load of a local array; AVX2 is enabled by the calling kernel.
    unsafe { _mm256_loadu_si256(e.as_ptr() as *const __m256i) }
}

impl IqChunkDecode for BlockIQ2XXS {
    #[inline(always)]
    unsafe fn chunk_magnitudes(&self, ib: usize) -> __m256i {
        // SAFETY: register operations on byte-indexed (in-range) table entries.
        unsafe {
            entries4(std::array::from_fn(|l| {
                IQ2XXS_GRID[self.qs[8 * ib + l] as usize]
            }))
        }
    }
    #[inline(always)]
    unsafe fn chunk_negative(&self, ib: usize) -> __m256i {
        // SAFETY: as `ksign_word_masks`.
        unsafe { ksign_word_masks(self.sign_word(ib)) }
    }
}

/// IQ2_XS chunk `ib`'s four index/sign words as one qword, word `l` in bits `16l..16l + 16`.
#[inline(always)]
fn iq2_xs_words(b: &BlockIQ2XS, ib: usize) -> u64 {
    u64::from_le_bytes(b.qs[8 * ib..8 * ib + 8].try_into().unwrap())
}

impl IqChunkDecode for BlockIQ2XS {
    #[inline(always)]
    unsafe fn chunk_magnitudes(&self, ib: usize) -> __m256i {
        let w = iq2_xs_words(self, ib);
        // SAFETY: register operations on table entries indexed `& 511` (512 entries).
        unsafe {
            entries4(std::array::from_fn(|l| {
                IQ2XS_GRID[(w >> (16 * l)) as usize & 511]
            }))
        }
    }
    #[inline(always)]
    unsafe fn chunk_negative(&self, ib: usize) -> __m256i {
        let w = iq2_xs_words(self, ib);
        // SAFETY: as `ksign_masks`.
        unsafe { ksign_masks(std::array::from_fn(|l| (w >> (16 * l + 9)) as usize)) }
    }
}

impl IqChunkDecode for BlockIQ2S {
    #[inline(always)]
    unsafe fn chunk_magnitudes(&self, ib: usize) -> __m256i {
        let low = u32::from_le_bytes(self.qs[4 * ib..4 * ib + 4].try_into().unwrap()) as usize;
        let high = self.qh[ib] as usize;
        // SAFETY: register operations on table entries with 10-bit indices (1024 entries).
        unsafe {
            entries4(std::array::from_fn(|l| {
                IQ2S_GRID[(low >> (8 * l)) & 255 | ((high >> (2 * l)) & 3) << 8]
            }))
        }
    }
    #[inline(always)]
    unsafe fn chunk_negative(&self, ib: usize) -> __m256i {
        let bits = u32::from_le_bytes(self.qs[32 + 4 * ib..36 + 4 * ib].try_into().unwrap());
        // SAFETY: as `sign_bit_masks`.
        unsafe { sign_bit_masks(bits) }
    }
}

impl IqChunkDecode for BlockIQ3XXS {
    #[inline(always)]
    unsafe fn chunk_magnitudes(&self, ib: usize) -> __m256i {
        // SAFETY: a load of byte-indexed (in-range) table entries.
        unsafe {
            entries8(std::array::from_fn(|k| {
                IQ3XXS_GRID[self.qs[8 * ib + k] as usize]
            }))
        }
    }
    #[inline(always)]
    unsafe fn chunk_negative(&self, ib: usize) -> __m256i {
        // SAFETY: as `ksign_word_masks`.
        unsafe { ksign_word_masks(self.sign_word(ib)) }
    }
}

impl IqChunkDecode for BlockIQ3S {
    #[inline(always)]
    unsafe fn chunk_magnitudes(&self, ib: usize) -> __m256i {
        // SAFETY: a load of table entries with 9-bit indices (512 entries).
        unsafe {
            entries8(std::array::from_fn(|k| {
                IQ3S_GRID[self.grid_index(8 * ib + k) & 511]
            }))
        }
    }
    #[inline(always)]
    unsafe fn chunk_negative(&self, ib: usize) -> __m256i {
        let bits = u32::from_le_bytes(self.signs[4 * ib..4 * ib + 4].try_into().unwrap());
        // SAFETY: as `sign_bit_masks`.
        unsafe { sign_bit_masks(bits) }
    }
}

/// `ggml_vec_dot_*_q8_K` of an IQ format in the haswell build's eight-lane order (`HASWELL`) or the x64
/// build's chain, per 32-weight chunk: the format's magnitudes and sign byte masks (`IqChunkDecode`), the
/// masks applied to the q8 bytes as `(q ^ m) − m` (a negated −128 stays −128, as stock's `sign_epi8`),
/// `maddubs` and `madd` against the two 16-weight scales, which leaves lane `m` summing `e mod 32 ∈ 4m..4m+4`:
/// stock haswell's lanes (`formats/iq.rs`). The x64 order's rare negated −128 (the quantizer never writes
/// −128) sends the row to the model. Stock's haswell kernels are AVX2 too: not served against them.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `y.len() >= x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_iq_q8_k<B: IqChunkDecode, const HASWELL: bool>(
    x: &[B],
    y: &[BlockQ8K],
) -> f32 {
    debug_assert!(y.len() >= x.len());
    // SAFETY (whole block): block `i` of x and y are inside the slices, each quant load 32 bytes inside `qs`;
    // the decoders' loads are inside their blocks; this function enables the features.
    unsafe {
        let mut acc = _mm256_setzero_ps();
        let mut sumf = 0f32;
        // Lanes where a −128 was negated, collected as a vector and read once per row.
        let mut negated_min = _mm256_setzero_si256();
        let min = _mm256_set1_epi8(-128);
        for (xb, yb) in x.iter().zip(y) {
            let q8 = yb.qs.as_ptr() as *const u8;
            let mut lanes = _mm256_setzero_si256();
            for ib in 0..8 {
                let neg = xb.chunk_negative(ib);
                let q = _mm256_loadu_si256(q8.add(32 * ib) as *const __m256i);
                if !HASWELL {
                    let hit = _mm256_and_si256(neg, _mm256_cmpeq_epi8(q, min));
                    negated_min = _mm256_or_si256(negated_min, hit);
                }
                let qs = _mm256_sub_epi8(_mm256_xor_si256(q, neg), neg);
                let pairs = _mm256_maddubs_epi16(xb.chunk_magnitudes(ib), qs);
                let scales = _mm256_set_m128i(
                    _mm_set1_epi16(xb.scale(32 * ib + 16) as i16),
                    _mm_set1_epi16(xb.scale(32 * ib) as i16),
                );
                lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(pairs, scales));
            }
            iq_block_float_step::<HASWELL>(&mut acc, &mut sumf, iq::block_scale(xb, yb), lanes);
        }
        let negated = _mm256_movemask_epi8(negated_min) != 0;
        iq_row_result::<B, HASWELL>(acc, sumf, negated, x, y)
    }
}
