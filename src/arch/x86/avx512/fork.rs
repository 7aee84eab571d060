//! The PrismML fork's PQ2_0 and PTQ1_0 (128-weight blocks) against q8_0: the Q2_0 group machinery of the parent
//! module through `fork_block_batches`, PQ2_0 with the Q2_0 code expansion per 64-weight half, PTQ1_0 with a
//! trit decode (`ptq1_half_trits`); and their tile kernels (`fork_tile_rows`). `docs/fork.md`.

use super::*;

/// Where `batch_block_scales` finds block `p`'s f16 scale (at byte `BYTES·p + D0_AT` of four blocks): the word
/// index into the pair of 64-byte loads at bytes 0 and `second`, in the form `vpermt2w` takes (≥ 32: the second).
/// Every scale must be word-aligned and inside one of the two loads, and the loads inside the four blocks.
pub(super) const fn scale_words(bytes: usize, d0_at: usize) -> (usize, Align64<[u16; 32]>) {
    let span = 4 * bytes;
    assert!(span >= 64 && bytes.is_multiple_of(2) && d0_at.is_multiple_of(2));
    let second = if span - 64 < 2 * bytes + d0_at {
        span - 64
    } else {
        2 * bytes + d0_at
    };
    let mut idx = [0u16; 32];
    let mut p = 0;
    while p < 4 {
        let at = bytes * p + d0_at;
        idx[p] = if at + 2 <= 64 {
            (at / 2) as u16
        } else {
            assert!(at >= second && at + 2 <= second + 64);
            (32 + (at - second) / 2) as u16
        };
        p += 1;
    }
    (second, Align64(idx))
}

/// The f16 scales of the four blocks at `xb` (block `p`'s at byte `BYTES·p + D0_AT`) as four floats: two 64-byte
/// loads inside the blocks, one `vpermt2w`, one conversion (four word inserts cost twice the operations).
#[inline(always)]
pub(super) unsafe fn batch_block_scales<const BYTES: usize, const D0_AT: usize>(
    xb: *const u8,
) -> __m128 {
    let (second, idx) = const { scale_words(BYTES, D0_AT) };
    // SAFETY: the caller guarantees four whole blocks (4·BYTES bytes) at `xb`; `scale_words` checked that both
    // loads lie inside them; the calling kernel enables the features.
    unsafe {
        let words = _mm512_permutex2var_epi16(
            _mm512_loadu_si512(xb as *const _),
            _mm512_loadu_si512(idx.0.as_ptr() as *const _),
            _mm512_loadu_si512(xb.add(second) as *const _),
        );
        _mm_cvtph_ps(_mm512_castsi512_si128(words))
    }
}

/// The driver shared by the fork's 128-weight formats (PQ2_0, PTQ1_0): four blocks (eight 64-weight groups)
/// per batch through `group_sums`, then each block's four-step `sumi` (the four blocks side by side in one
/// 128-bit vector) and the `sumf` step. `weights(b, h)` gives half `h` of block `b`'s weights (bytes 0..=3);
/// block `b` is `BYTES` bytes at `xp`, its f16 scale at byte `D0_AT`. Returns the running sum after
/// `4·batches` blocks; the caller finishes the tail with its format's chain.
///
/// Software-pipelined in three steps per iteration: batch `k`'s products and reduction, then the weights of
/// batch `k + 1` (decoded a batch ahead), then batch `k − 1`'s float chain. Decoding a batch ahead took PTQ1_0
/// from 6.2 to 5.7 ns per block (its digit decode is a long dependent chain the out-of-order window did not
/// overlap with the products; `docs/PERFORMANCE.md`). The x weights are prefetched `X_PREFETCH_AHEAD` bytes
/// ahead (`prefetch_ahead`).
///
/// Groups are ordered so that quarter `k` of block `p` lands in lane `4k + p`: group `4h + p` is half `h` of
/// block `p`, so `group_sums` puts its halves (quarters `2h`, `2h + 1`) in lanes `8h + p` and `8h + 4 + p`.
///
/// # Safety
/// `xp` points at `4·batches` blocks, `yp` at `16·batches` q8_0 blocks; `weights` is valid for blocks
/// `0..4·batches`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub(super) unsafe fn fork_block_batches<
    const FMA: bool,
    const BYTES: usize,
    const D0_AT: usize,
    const SCALE_GATHER: bool,
>(
    batches: usize,
    xp: *const u8,
    yp: *const u8,
    weights: impl Fn(usize, usize) -> __m512i,
) -> f32 {
    static QUARTER_MAJOR: D1Tables = D1Tables::new({
        let mut order = [0usize; 16];
        let mut l = 0;
        while l < 16 {
            order[l] = 4 * (l % 4) + l / 4; // lane 4k + p: q8_0 block 4p + k
            l += 1;
        }
        order
    });
    if batches == 0 {
        return 0.0;
    }
    // SAFETY (whole loop): batch k < batches covers blocks 4k..4k+4 and q8_0 blocks 16k..16k+16, inside what
    // the caller guarantees; the prefetch addresses may lie past the row (`wrapping_add`, and a prefetch never
    // faults or reads into the program); this function's target features cover the helpers'.
    unsafe {
        let decode =
            |k: usize| -> [__m512i; 8] { std::array::from_fn(|g| weights(4 * k + g % 4, g / 4)) };
        let mut sumf = 0.0f32;
        let mut w_next = decode(0);
        let mut pending: Option<(__m512, __m512, __m128)> = None;
        for k in 0..batches {
            let w = w_next;
            let yb = yp.add(16 * k * Q8_BYTES);
            prefetch_ahead(xp.wrapping_add(4 * k * BYTES), 4 * BYTES);
            let s = group_sums(|g| {
                let (p, h) = (g % 4, g / 4);
                (w[g], yb.add((4 * p + 2 * h) * Q8_BYTES + 2))
            });
            let d1 = if SCALE_GATHER {
                group_d1_gathered(yb, &QUARTER_MAJOR)
            } else {
                group_d1(yb, &QUARTER_MAJOR)
            };
            let d0 = batch_block_scales::<BYTES, D0_AT>(xp.add(4 * k * BYTES));
            if k + 1 < batches {
                w_next = decode(k + 1);
            }
            if let Some((s, d1, d0)) = pending.take() {
                sumf = fork_chain_step::<FMA>(sumf, s, d1, d0);
            }
            pending = Some((s, d1, d0));
        }
        let (s, d1, d0) = pending.unwrap();
        fork_chain_step::<FMA>(sumf, s, d1, d0)
    }
}

/// One batch of the fork formats' float chain, in the fork's order: each of the four blocks' `sumi` over its
/// four quarters (`sumi += d1·isum`, the blocks side by side in one 128-bit vector, quarter `k` in 128-bit lane
/// `k` of `s` and `d1`), then `sumf += d0·sumi` block by block. `FMA` fuses both as the FMA build does.
#[inline(always)]
pub(super) unsafe fn fork_chain_step<const FMA: bool>(
    mut sumf: f32,
    s: __m512,
    d1: __m512,
    d0: __m128,
) -> f32 {
    // SAFETY (whole body): register operations and stores to locals; features come from the calling kernel.
    unsafe {
        let q = |v: __m512| {
            (
                _mm512_castps512_ps128(v),
                _mm512_extractf32x4_ps::<1>(v),
                _mm512_extractf32x4_ps::<2>(v),
                _mm512_extractf32x4_ps::<3>(v),
            )
        };
        let (s0, s1, s2, s3) = q(s);
        let (e0, e1, e2, e3) = q(d1);
        let sumi = if FMA {
            let acc = _mm_fmadd_ps(e0, s0, _mm_setzero_ps());
            let acc = _mm_fmadd_ps(e1, s1, acc);
            let acc = _mm_fmadd_ps(e2, s2, acc);
            _mm_fmadd_ps(e3, s3, acc)
        } else {
            let acc = _mm_add_ps(_mm_setzero_ps(), _mm_mul_ps(e0, s0));
            let acc = _mm_add_ps(acc, _mm_mul_ps(e1, s1));
            let acc = _mm_add_ps(acc, _mm_mul_ps(e2, s2));
            _mm_add_ps(acc, _mm_mul_ps(e3, s3))
        };
        let (mut d0s, mut sums) = ([0f32; 4], [0f32; 4]);
        _mm_storeu_ps(d0s.as_mut_ptr(), d0);
        _mm_storeu_ps(sums.as_mut_ptr(), sumi);
        for p in 0..4 {
            sumf = if FMA {
                d0s[p].mul_add(sums[p], sumf)
            } else {
                sumf + d0s[p] * sums[p]
            };
        }
        sumf
    }
}

/// The fork formats' tile kernel: `R` rows (pointers to their first block, `BYTES`-byte blocks with the f16
/// scale at `D0_AT`) against `C` prepared columns of equal length (`tiles::ForkColumnBatch`), returning each
/// element's running sum after every batch. Per row and batch: the eight groups' weight bytes
/// (`weights(block, half)`, 0..=3 or 0..=2), decoded once for all columns, against each column's prepared
/// quants by one `vpdpbusd` each (the column's `Σ q` is subtracted once per batch, where `vec_dot` spends a
/// second `vpdpbusd` per group), `vec_dot`'s reduction and lane order, then its chain (`fork_chain_step`) with
/// the column's scales; the `R·C` chains interleaved and issued a batch late (`pipelined_one_site`). Integer sums
/// are exact in any order, so every element has `vec_dot`'s bits.
///
/// # Safety
/// The CPU must have the features below; each row pointer addresses `4·cols[j].len()` blocks.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub(super) unsafe fn fork_tile_rows<
    const FMA: bool,
    const R: usize,
    const C: usize,
    const BYTES: usize,
    const D0_AT: usize,
>(
    rows: [*const u8; R],
    cols: [&[ForkColumnBatch]; C],
    weights: impl Fn(*const u8, usize) -> __m512i,
) -> [[f32; R]; C] {
    type Batch<const R: usize, const C: usize> = ([[__m512; R]; C], [__m128; R], [__m512; C]);
    pipelined_one_site(
        cols[0].len(),
        [[0f32; R]; C],
        // SAFETY: batch k < cols[j].len() covers blocks 4k..4k+4 of every row, inside what the caller
        // guarantees; the columns' arrays are 64-byte aligned (`repr(align(64))`); this function enables the
        // features.
        |k| unsafe {
            let c: [&ForkColumnBatch; C] = std::array::from_fn(|j| &cols[j][k]);
            let mut s = [[_mm512_setzero_ps(); R]; C];
            let d0: [__m128; R] = std::array::from_fn(|r| {
                let xb = rows[r].add(4 * k * BYTES);
                prefetch_ahead(xb, 4 * BYTES);
                let w: [__m512i; 8] =
                    std::array::from_fn(|g| weights(xb.add((g % 4) * BYTES), g / 4));
                for j in 0..C {
                    let v: [__m512i; 8] = std::array::from_fn(|g| {
                        _mm512_dpbusd_epi32(
                            _mm512_setzero_si512(),
                            w[g],
                            _mm512_load_si512(c[j].q[g].as_ptr() as *const _),
                        )
                    });
                    let qsum = _mm512_load_si512(c[j].qsum.as_ptr() as *const _);
                    s[j][r] = _mm512_cvtepi32_ps(_mm512_sub_epi32(reduce_group_partials(v), qsum));
                }
                batch_block_scales::<BYTES, D0_AT>(xb)
            });
            let d1: [__m512; C] = std::array::from_fn(|j| _mm512_load_ps(c[j].d1.as_ptr()));
            (s, d0, d1)
        },
        |mut sums: [[f32; R]; C], (s, d0, d1): Batch<R, C>| {
            for j in 0..C {
                for r in 0..R {
                    // SAFETY: register operations; this function enables the features.
                    sums[j][r] =
                        unsafe { fork_chain_step::<FMA>(sums[j][r], s[j][r], d1[j], d0[r]) };
                }
            }
            sums
        },
    )
}

/// PTQ1_0 rows through `fork_tile_rows` (`ptq1_half_trits` per half).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub(super) unsafe fn ptq1_tile_rows<const FMA: bool, const R: usize, const C: usize>(
    rows: [*const u8; R],
    cols: [&[ForkColumnBatch]; C],
) -> [[f32; R]; C] {
    // SAFETY: the caller's contract, passed on; each block is whole, as `ptq1_half_trits` needs.
    unsafe {
        fork_tile_rows::<FMA, R, C, PTQ1_BYTES, PTQ1_D0_AT>(rows, cols, |b, h| {
            ptq1_half_trits(b, h)
        })
    }
}

/// PQ2_0 rows through `fork_tile_rows` (the Q2_0 code expansion of each half's 16 code bytes).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub(super) unsafe fn pq2_tile_rows<const FMA: bool, const R: usize, const C: usize>(
    rows: [*const u8; R],
    cols: [&[ForkColumnBatch]; C],
) -> [[f32; R]; C] {
    // SAFETY: the caller's contract, passed on; a half's code bytes are inside its block.
    unsafe {
        fork_tile_rows::<FMA, R, C, PQ2_BYTES, 0>(rows, cols, |b, h| {
            q2_group_codes(b.add(2 + 16 * h))
        })
    }
}

/// `W · Y` for PTQ1_0 weights against q8_0 columns, every element with the bits of
/// `vec_dot_ptq1_0_q8_0::<FMA>`: the fork tile driver (`tiles::mul_mat_fork_tiles`) over `ptq1_tile_rows`.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI/VBMI, AVX2, FMA and F16C; `y.nb() >= 4 * x.nb()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub unsafe fn mul_mat_ptq1_0_q8_0<const FMA: bool>(
    x: Rows<'_, BlockPTQ1_0>,
    y: Rows<'_, BlockQ8_0>,
    emit: Emit<'_>,
) {
    // SAFETY: the caller's contract covers the kernels' features.
    unsafe {
        mul_mat_fork_tiles(
            x,
            y,
            emit,
            ptq1_tile_rows::<FMA, 4, 1>,
            ptq1_tile_rows::<FMA, 1, 1>,
            ptq1_tile_rows::<FMA, 4, 2>,
            ptq1_tail::<FMA>,
        )
    }
}

/// `W · Y` for PQ2_0 weights against q8_0 columns, every element with the bits of `vec_dot_pq2_0_q8_0::<FMA>`:
/// the fork tile driver (`tiles::mul_mat_fork_tiles`) over `pq2_tile_rows`.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI/VBMI, AVX2, FMA and F16C; `y.nb() >= 4 * x.nb()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub unsafe fn mul_mat_pq2_0_q8_0<const FMA: bool>(
    x: Rows<'_, BlockPQ2_0>,
    y: Rows<'_, BlockQ8_0>,
    emit: Emit<'_>,
) {
    // SAFETY: the caller's contract covers the kernels' features.
    unsafe {
        mul_mat_fork_tiles(
            x,
            y,
            emit,
            pq2_tile_rows::<FMA, 4, 1>,
            pq2_tile_rows::<FMA, 1, 1>,
            pq2_tile_rows::<FMA, 4, 2>,
            pq2_tail::<FMA>,
        )
    }
}

/// `ggml_vec_dot_pq2_0_q8_0` (PrismML fork) with the FMA (`FMA = true`) or unfused chain: the Q2_0 code
/// expansion on each 64-weight half, through `fork_block_batches` (`SCALE_GATHER`: the q8_0 scales by a
/// gather, `group_d1_gathered`).
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI/VBMI, AVX2, FMA and F16C; `y.len() >= 4 * x.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub unsafe fn vec_dot_pq2_0_q8_0<const FMA: bool, const SCALE_GATHER: bool>(
    x: &[BlockPQ2_0],
    y: &[BlockQ8_0],
) -> f32 {
    debug_assert!(y.len() >= 4 * x.len());
    let batches = x.len() / 4;
    let xp = x.as_ptr() as *const u8;
    // SAFETY: blocks 0..4·batches of x and 16·batches q8_0 blocks of y are inside the slices; each half's 16
    // code bytes are inside its block.
    let sumf = unsafe {
        fork_block_batches::<FMA, PQ2_BYTES, 0, SCALE_GATHER>(
            batches,
            xp,
            y.as_ptr() as *const u8,
            |b, h| q2_group_codes(xp.add(b * PQ2_BYTES + 2 + 16 * h)),
        )
    };
    let done = 4 * batches;
    vec_dot_pq2_0_q8_0_from::<FMA>(sumf, &x[done..], &y[4 * done..])
}

/// PTQ1_0's digit tables per 64-element half (`Base3Layout`).
pub(super) static PTQ1_PERM: [[u8; 64]; 2] = [PTQ1.byte_perm(0), PTQ1.byte_perm(64)];
pub(super) static PTQ1_MULT_EVEN: [[u16; 32]; 2] = [
    PTQ1.word_mult::<32, false>(0),
    PTQ1.word_mult::<32, false>(64),
];
pub(super) static PTQ1_MULT_ODD: [[u16; 32]; 2] = [
    PTQ1.word_mult::<32, true>(0),
    PTQ1.word_mult::<32, true>(64),
];
pub(super) const PTQ1: Base3Layout = Base3Layout::Ptq1_0;

/// The 64 trits (0..=2, one per byte, element order) of half `h` of the PTQ1_0 block at `b`: half 0 from a
/// broadcast of bytes 0..16, half 1 from one masked load of the 26 packed bytes (never past the block) through
/// `base3_digits`' permute.
#[inline(always)]
pub(super) unsafe fn ptq1_half_trits(b: *const u8, h: usize) -> __m512i {
    // SAFETY (whole body): the caller guarantees a whole 28-byte block at `b`; the masked load reads bytes 0..26
    // of it only (masked-off bytes are not accessed); features are enabled by the calling kernel.
    unsafe {
        if h == 0 {
            // Half 0 is digits 0..3 of bytes 0..15, digit n in 128-bit lane n (checked below): a broadcast
            // load puts every byte in place, no permute.
            const {
                let mut p = 0;
                while p < 64 {
                    assert!(PTQ1_PERM[0][p] as usize == p % 16);
                    p += 1;
                }
            }
            let packed = _mm512_broadcast_i32x4(_mm_loadu_si128(b as *const __m128i));
            return base3_digits_in_place(packed, &PTQ1_MULT_EVEN[0], &PTQ1_MULT_ODD[0]);
        }
        let packed = _mm256_maskz_loadu_epi8(0x03ff_ffff, b as *const i8);
        base3_digits(
            _mm512_castsi256_si512(packed),
            &PTQ1_PERM[h],
            &PTQ1_MULT_EVEN[h],
            &PTQ1_MULT_ODD[h],
        )
    }
}

/// `ggml_vec_dot_ptq1_0_q8_0` (PrismML fork) with the FMA (`FMA = true`) or unfused chain: `ptq1_half_trits`
/// on each 64-weight half, through `fork_block_batches` (`SCALE_GATHER` as for PQ2_0).
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI/VBMI, AVX2, FMA and F16C; `y.len() >= 4 * x.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub unsafe fn vec_dot_ptq1_0_q8_0<const FMA: bool, const SCALE_GATHER: bool>(
    x: &[BlockPTQ1_0],
    y: &[BlockQ8_0],
) -> f32 {
    debug_assert!(y.len() >= 4 * x.len());
    let batches = x.len() / 4;
    let xp = x.as_ptr() as *const u8;
    // SAFETY: blocks 0..4·batches of x and 16·batches q8_0 blocks of y are inside the slices.
    let sumf = unsafe {
        fork_block_batches::<FMA, PTQ1_BYTES, PTQ1_D0_AT, SCALE_GATHER>(
            batches,
            xp,
            y.as_ptr() as *const u8,
            |b, h| ptq1_half_trits(xp.add(b * PTQ1_BYTES), h),
        )
    };
    let done = 4 * batches;
    vec_dot_ptq1_0_q8_0_from::<FMA>(sumf, &x[done..], &y[4 * done..])
}

/// PTQ1_0's scalar chain for a row's blocks past its last full batch, compiled with FMA so that its contracted
/// steps are instructions, not calls to libm's `fmaf` (`tiles::TailChain`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn ptq1_tail<const FMA: bool>(sumf: f32, x: &[BlockPTQ1_0], y: &[BlockQ8_0]) -> f32 {
    vec_dot_ptq1_0_q8_0_from::<FMA>(sumf, x, y)
}

/// PQ2_0's scalar chain for a row's blocks past its last full batch (as `ptq1_tail`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pq2_tail<const FMA: bool>(sumf: f32, x: &[BlockPQ2_0], y: &[BlockQ8_0]) -> f32 {
    vec_dot_pq2_0_q8_0_from::<FMA>(sumf, x, y)
}
