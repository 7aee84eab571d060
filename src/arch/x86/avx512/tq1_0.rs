//! TQ1_0 · q8_K: the base-3 digit decode of the parent module (`base3_digits_in_place`) in four 64-weight
//! groups, in the haswell or x64 float order; the tile kernel through the ternary driver. `docs/tq1_0.md`.

use super::*;

/// TQ1_0: `vec_dot_tq1_0_q8_k`'s four digit groups (the packed bytes each lane reads from broadcast loads and
/// blends, `base3_digits_in_place`), group `k` meeting quants `64k..64k + 64`.
pub(super) struct Tq1Tiles;
impl TqTileFormat for Tq1Tiles {
    const BYTES: usize = size_of::<BlockTQ1_0>();
    const D_OFFSET: usize = 52;
    const QUANTS: TqQuants = TqQuants::InOrder;
    #[inline(always)]
    unsafe fn weight_vectors(x: *const u8) -> [__m512i; 4] {
        // SAFETY: the caller's contract (48 qs and 4 qh bytes at `x`); the tables are statics.
        unsafe { tq1_digit_groups(x) }
    }
}

/// `W · Y` for TQ1_0 weights against q8_K columns, every element with the bits of
/// `vec_dot_tq1_0_q8_k::<HASWELL>` (`mul_mat_tq`).
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI/VBMI, GFNI, AVX2, FMA and F16C; `y.nb() >= x.nb()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c,gfni")]
pub unsafe fn mul_mat_tq1_0_q8_k<const HASWELL: bool>(
    x: Rows<'_, BlockTQ1_0>,
    y: Rows<'_, BlockQ8K>,
    emit: Emit<'_>,
) {
    // SAFETY (both): the caller's contract covers the kernels' features and sizes.
    let vec_dot = |x: &[BlockTQ1_0], y: &[BlockQ8K]| unsafe { vec_dot_tq1_0_q8_k::<HASWELL>(x, y) };
    unsafe { mul_mat_tq::<Tq1Tiles, _, HASWELL>(x, y, emit, vec_dot) }
}

/// TQ1_0's digit tables per 64-weight group (`Base3Layout`, elements of `qs ++ qh`).
pub(super) static TQ1_PERM: [[u8; 64]; 4] = [
    TQ1.byte_perm(0),
    TQ1.byte_perm(64),
    TQ1.byte_perm(128),
    TQ1.byte_perm(192),
];
pub(super) static TQ1_MULT_EVEN: [[u16; 32]; 4] = [
    TQ1.word_mult::<32, false>(0),
    TQ1.word_mult::<32, false>(64),
    TQ1.word_mult::<32, false>(128),
    TQ1.word_mult::<32, false>(192),
];
pub(super) static TQ1_MULT_ODD: [[u16; 32]; 4] = [
    TQ1.word_mult::<32, true>(0),
    TQ1.word_mult::<32, true>(64),
    TQ1.word_mult::<32, true>(128),
    TQ1.word_mult::<32, true>(192),
];
pub(super) const TQ1: Base3Layout = Base3Layout::Tq1_0;

/// Groups 0 and 1's odd-byte multipliers for their shifted broadcast (`TQ1_MULT_ODD` in the high byte).
pub(super) static TQ1_MULT_ODD_HIGH: [[u16; 32]; 2] =
    [in_high_byte(TQ1_MULT_ODD[0]), in_high_byte(TQ1_MULT_ODD[1])];

// The lanes `vec_dot_tq1_0_q8_k` builds from broadcasts are the bytes `TQ1_PERM` names.
const _: () = {
    let mut k = 0;
    while k < 4 {
        let mut p = 0;
        while p < 64 {
            let want = match k {
                0 | 1 => p % 32,
                2 => {
                    if p < 32 {
                        p
                    } else {
                        32 + p % 16
                    }
                }
                _ => {
                    if p < 48 {
                        32 + p % 16
                    } else {
                        48 + p % 4
                    }
                }
            };
            assert!(TQ1_PERM[k][p] as usize == want);
            p += 1;
        }
        k += 1;
    }
};

/// TQ1_0's four groups of 64 digits (group `k` meets quants `64k..64k + 64`), from the packed bytes each lane
/// reads (`TQ1_PERM`), built from broadcast loads and one blend each, no shuffle: groups 0 and 1 read
/// `qs[p % 32]` in lane `p`; group 2 `qs[0..32]` then `qs[32..48]` twice; group 3 `qs[32..48]` three times then
/// `qh[0..4]` four times. Groups 0 and 1 take their odd bytes from a second broadcast one byte further on
/// (`base3_digits_of_words`), which costs a load instead of a mask.
///
/// # Safety
/// A TQ1_0 block at `x` (48 qs bytes, then 4 qh); the calling kernel enables AVX-512 F/BW.
#[inline(always)]
pub(super) unsafe fn tq1_digit_groups(x: *const u8) -> [__m512i; 4] {
    // SAFETY: reads inside the block (the furthest, `x + 1..x + 33` and `x + 48..x + 52`); features from the
    // caller.
    unsafe {
        let low = _mm512_broadcast_i64x4(_mm256_loadu_si256(x as *const __m256i));
        let low_next = _mm512_broadcast_i64x4(_mm256_loadu_si256(x.add(1) as *const __m256i));
        let mid = _mm512_broadcast_i32x4(_mm_loadu_si128(x.add(32) as *const __m128i));
        let qh = _mm512_set1_epi32((x.add(48) as *const i32).read_unaligned());
        [
            base3_digits_of_words(low, low_next, &TQ1_MULT_EVEN[0], &TQ1_MULT_ODD_HIGH[0]),
            base3_digits_of_words(low, low_next, &TQ1_MULT_EVEN[1], &TQ1_MULT_ODD_HIGH[1]),
            base3_digits_in_place(
                _mm512_mask_blend_epi64(0xf0, low, mid),
                &TQ1_MULT_EVEN[2],
                &TQ1_MULT_ODD[2],
            ),
            base3_digits_in_place(
                _mm512_mask_blend_epi32(0xf000, mid, qh),
                &TQ1_MULT_EVEN[3],
                &TQ1_MULT_ODD[3],
            ),
        ]
    }
}

/// `ggml_vec_dot_tq1_0_q8_K` with the haswell build's order (`HASWELL`) or the x64 build's: per 64 weights
/// the digits of `tq1_digit_groups` and one `vpdpbusd` against the quants.
///
/// Haswell: the digit sums per lane minus the pair sums of `bsums` (`vpmaddwd`), which is what stock's i16
/// lanes give whenever none can wrap: a lane's three accumulators stay within ±1536, ±2560 together, so every
/// `|bsums[m]| ≤ 28671` is enough. Checked once per row: the kernel sums the bsums' squares per lane pair,
/// saturating (`vpdpwssds`), and a lane beyond 28671² (a bsum beyond the bound, never the quantizer's own, or a
/// row of 25,000 weights and more at the quantizer's largest |bsum|) has the row redone by the model. Then
/// stock's float steps on eight lanes (`scale_product`) and `hsum_float_8`. x64: per block `Σ digit·q − Σ q`
/// (exact) and the generic chain.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI/VBMI, AVX2, FMA and F16C; `y.len() >= x.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub unsafe fn vec_dot_tq1_0_q8_k<const HASWELL: bool>(x: &[BlockTQ1_0], y: &[BlockQ8K]) -> f32 {
    debug_assert!(y.len() >= x.len());
    // SAFETY (whole block): block `i` of x and y are inside the slices; the masked load reads the first 52 of
    // the block's 54 bytes; the tables are statics; this function enables the features.
    unsafe {
        let mut acc = _mm256_setzero_ps();
        let mut sumf = 0f32;
        let mut bsum_squares = _mm256_setzero_si256();
        let ones = _mm512_set1_epi8(1);
        for (xb, yb) in x.iter().zip(y) {
            prefetch_ahead(
                xb as *const BlockTQ1_0 as *const u8,
                size_of::<BlockTQ1_0>(),
            );
            let q = yb.qs.as_ptr() as *const u8;
            let bs = _mm256_loadu_si256(yb.bsums.as_ptr() as *const __m256i);
            // Haswell: the low half starts from −(bsums[2L] + bsums[2L + 1]), so no subtraction at the end.
            let mut dq = if HASWELL {
                _mm512_zextsi256_si512(_mm256_madd_epi16(bs, _mm256_set1_epi16(-1)))
            } else {
                _mm512_setzero_si512()
            };
            let mut sq = _mm512_setzero_si512();
            let groups = tq1_digit_groups(xb as *const BlockTQ1_0 as *const u8);
            for (k, &digits) in groups.iter().enumerate() {
                let qv = _mm512_loadu_si512(q.add(64 * k) as *const _);
                dq = _mm512_dpbusd_epi32(dq, digits, qv);
                if !HASWELL {
                    sq = _mm512_dpbusd_epi32(sq, ones, qv);
                }
            }
            if HASWELL {
                bsum_squares = _mm256_dpwssds_epi32(bsum_squares, bs, bs);
                let lanes = _mm256_add_epi32(
                    _mm512_castsi512_si256(dq),
                    _mm512_extracti64x4_epi64::<1>(dq),
                );
                let d = scale_product(&yb.d, xb.d.to_bits());
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), d, acc);
            } else {
                let sum = _mm512_reduce_add_epi32(_mm512_sub_epi32(dq, sq));
                sumf += sum as f32 * (F16_TO_F32_TABLE[xb.d.to_bits() as usize] * yb.d());
            }
        }
        if !HASWELL {
            return sumf;
        }
        if _mm256_cmpgt_epi32_mask(bsum_squares, _mm256_set1_epi32(28671 * 28671)) != 0 {
            return formats::tq1_0::vec_dot_tq1_0_q8_k_haswell_model(x, y);
        }
        hsum_float_8_ps(acc)
    }
}
