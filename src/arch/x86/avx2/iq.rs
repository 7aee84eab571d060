//! The five IQ formats against q8_K: one kernel (`vec_dot_iq_q8_k`) over a per-format decoder of 32-weight
//! chunks (`IqChunkDecode`). `docs/iq.md`.

use super::*;

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
pub(super) static KSIGN_MASKS: [u64; 128] = {
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
pub(super) unsafe fn ksign_masks(fields: [usize; 4]) -> __m256i {
    // SAFETY: register operations on table entries indexed `& 127` (128 entries); AVX2 is enabled by the
    // calling kernel.
    unsafe { entries4(fields.map(|f| KSIGN_MASKS[f & 127])) }
}

/// The byte masks of a sign word's four 7-bit fields (bits `7l..7l + 7`; IQ2_XXS, IQ3_XXS).
#[inline(always)]
pub(super) unsafe fn ksign_word_masks(word: u32) -> __m256i {
    let word = word as usize;
    // SAFETY: as `ksign_masks`.
    unsafe { ksign_masks(std::array::from_fn(|l| word >> (7 * l))) }
}

/// `vpshufb` control spreading the four sign bytes of a broadcast dword: byte `j` takes byte `j / 8`.
pub(super) static SIGN_SPREAD: [u8; 32] = {
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
pub(super) unsafe fn sign_bit_masks(bits: u32) -> __m256i {
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
pub(super) unsafe fn entries4(e: [u64; 4]) -> __m256i {
    // SAFETY: a register operation; AVX2 is enabled by the calling kernel.
    unsafe { _mm256_setr_epi64x(e[0] as i64, e[1] as i64, e[2] as i64, e[3] as i64) }
}

/// Eight four-byte grid entries as one vector, entry 0 lowest.
#[inline(always)]
pub(super) unsafe fn entries8(e: [u32; 8]) -> __m256i {
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
pub(super) fn iq2_xs_words(b: &BlockIQ2XS, ib: usize) -> u64 {
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
            iq_block_float_step::<HASWELL>(
                &mut acc,
                &mut sumf,
                formats::iq::block_scale(xb, yb),
                lanes,
            );
        }
        let negated = _mm256_movemask_epi8(negated_min) != 0;
        iq_row_result::<B, HASWELL>(acc, sumf, negated, x, y)
    }
}
