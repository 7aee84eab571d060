//! Q1_0 · q8_0 in both stock float orders: each quarter's quants kept or negated under the block's sign bits,
//! lane sums by `maddubs`, stock's chain per block. `docs/q1_0.md`.

use super::*;

/// The 32 bits at `bits` as bytes: `0xff` where the bit is clear, 0 where set (bit `j % 8` of byte `j / 8`).
#[inline(always)]
pub(super) unsafe fn q1_clear_mask(bits: *const u8) -> __m256i {
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
pub(super) unsafe fn q1_quarter_pairs(bits: *const u8, q: *const u8) -> __m256i {
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
pub(super) unsafe fn broadcast_half(p: *const u8) -> __m256 {
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
        return formats::q1_0::x64_chain_from(sumf, &x[done..], &y[4 * done..]);
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
