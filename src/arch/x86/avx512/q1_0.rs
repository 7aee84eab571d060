//! Q1_0 · q8_0 in both stock float orders: two blocks per step in 512-bit vectors (`q1_pair_lanes`,
//! `q1_pair_chain`), the tile kernels over prepared column pairs, and the decode lookups over per-column nibble
//! tables (`mul_mat_q1_0_lookups`). `docs/q1_0.md`.

use super::*;

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

/// The haswell build's lane sums of two Q1_0 quarters as floats, quarter `2h` in the low eight lanes and
/// `2h + 1` in the high eight: the quants of the two q8_0 blocks (at `q0`, `q1`) side by side, each kept where
/// its bit (of the eight bytes at `bits`) is set and negated as a byte where it is clear (`vpsubb` wraps, so
/// −128 stays −128 as in stock's `(q ^ m) − m`), chosen by a mask blend straight from the bits; then `vpdpbusd`
/// against ones for the 4-byte lane sums.
#[inline(always)]
pub(super) unsafe fn q1_quarter_pair_lanes(
    bits: *const u8,
    q0: *const u8,
    q1: *const u8,
) -> (__m256, __m256) {
    // SAFETY (whole body): the caller guarantees 8 bytes at `bits` and 32 at `q0` and `q1`; the calling kernel
    // enables the features.
    unsafe {
        let zero = _mm512_setzero_si512();
        let lo = _mm256_loadu_si256(q0 as *const __m256i);
        let q = _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(lo),
            _mm256_loadu_si256(q1 as *const __m256i),
        );
        let set = (bits as *const u64).read_unaligned();
        let signed = _mm512_mask_blend_epi8(set, _mm512_sub_epi8(zero, q), q);
        let s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, _mm512_set1_epi8(1), signed));
        (
            _mm512_castps512_ps256(s),
            _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(s))),
        )
    }
}

/// `[table[lo] ×8 | table[hi] ×8]` of `F16_TO_F32_TABLE` for two f16 bit patterns: a broadcast load and a
/// merge-masked broadcast load, two loads and one vector operation, each addressed from the table and the index
/// (no address arithmetic). Written out because the compiler turns the intrinsics' broadcasts and insert into
/// shuffles (up to three on Intel's shuffle port).
///
/// # Safety
/// The CPU must have AVX-512 F.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn scale_halves(lo: u16, hi: u16) -> __m512 {
    let v: __m512;
    // SAFETY: every u16 indexes the 65536-entry table, so both loads are inside it; the caller's CPU has
    // AVX-512 F; the instructions only read the table and write `v` (the mask register is written and read
    // inside).
    unsafe {
        std::arch::asm!(
            "vbroadcastss {v}, dword ptr [{t} + {lo} * 4]",
            "vbroadcastss {v} {{{k}}}, dword ptr [{t} + {hi} * 4]",
            t = in(reg) F16_TO_F32_TABLE.as_ptr(),
            lo = in(reg) lo as usize,
            hi = in(reg) hi as usize,
            k = in(kreg) 0xff00u16,
            v = out(zmm_reg) v,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    v
}

/// The integer half of stock's haswell order for the two Q1_0 blocks at `xb` against their eight q8_0 blocks at
/// `yb`, in 512-bit vectors: for quarter `k`, block `2p`'s q8_0 quants in the low half and block `2p + 1`'s in
/// the high half (one insert from memory), negated as bytes where their bit is clear (one masked `vpsubb` under
/// the two blocks' 32-bit quarter masks joined in scalar registers; −128 stays −128 as in stock's
/// `(q ^ m) − m`), `vpdpbusd` against ones for the 4-byte lane sums, converted; with them the scales
/// `[d1 ×8 | d1' ×8]`. `q1_pair_chain` then runs stock's per-lane chain once for both blocks.
///
/// The sign bits come in four 8-byte loads (two quarters of one block each), not eight 4-byte ones: on Zen 5
/// this loop is bound by its loads (about three a cycle, a vector load across a cache line counting twice), and
/// the extra shifts and masks cost nothing there (measured: PERFORMANCE.md).
pub(super) struct Q1PairLanes {
    sums: [__m512; 4],
    scales: [__m512; 4],
}

/// `Q1PairLanes` of the pair at `xb`, `yb`.
///
/// # Safety
/// Two blocks at `xb` and their eight q8_0 blocks at `yb`; the calling kernel enables the features.
#[inline(always)]
pub(super) unsafe fn q1_pair_lanes(xb: *const u8, yb: *const u8) -> Q1PairLanes {
    // SAFETY (whole body): every read is inside the two blocks or their q8_0 blocks (sign bits at bytes 2..18 of
    // each block, quants at byte 2 of each q8_0 block, scales at byte 0); features from the caller.
    unsafe {
        let zero = _mm512_setzero_si512();
        let xb1 = xb.add(Q1_BYTES);
        // Bytes 2 + 8h.. of a block: quarter 2h in the low 32 bits, quarter 2h + 1 in the high 32. Quarter k's
        // mask is the first block's 32 bits below the second's, inverted (the negated bytes are the clear bits).
        let bits = |x: *const u8, h: usize| (x.add(2 + 8 * h) as *const u64).read_unaligned();
        let (a0, b0, a1, b1) = (bits(xb, 0), bits(xb1, 0), bits(xb, 1), bits(xb1, 1));
        let clear_masks = [
            !((a0 & 0xffff_ffff) | b0 << 32),
            !(a0 >> 32 | (b0 & 0xffff_ffff_0000_0000)),
            !((a1 & 0xffff_ffff) | b1 << 32),
            !(a1 >> 32 | (b1 & 0xffff_ffff_0000_0000)),
        ];
        let half = |q8: *const u8| (q8 as *const u16).read_unaligned();
        let mut out = Q1PairLanes {
            sums: [_mm512_setzero_ps(); 4],
            scales: [_mm512_setzero_ps(); 4],
        };
        for (k, &clear) in clear_masks.iter().enumerate() {
            let (y0, y1) = (yb.add(k * Q8_BYTES), yb.add((k + 4) * Q8_BYTES));
            let q = _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(_mm256_loadu_si256(y0.add(2) as *const __m256i)),
                _mm256_loadu_si256(y1.add(2) as *const __m256i),
            );
            let signed = _mm512_mask_sub_epi8(q, clear, zero, q);
            out.sums[k] =
                _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, _mm512_set1_epi8(1), signed));
            out.scales[k] = scale_halves(half(y0), half(y1));
        }
        out
    }
}

/// Stock's haswell chain of the pair at `xb` from its `lanes`, continuing `acc`: `acc_block = d1_0·s_0` and
/// three FMAs on sixteen lanes (both blocks at once), then `acc = fma(d0, acc_block, acc)` for each block in
/// order on eight.
///
/// # Safety
/// Two blocks at `xb`; the calling kernel enables the features.
#[inline(always)]
pub(super) unsafe fn q1_pair_chain(acc: __m256, xb: *const u8, lanes: &Q1PairLanes) -> __m256 {
    // SAFETY: the two blocks' f16 scales at bytes 0 and Q1_BYTES are inside them; features from the caller.
    unsafe {
        let mut acc_block = _mm512_mul_ps(lanes.scales[0], lanes.sums[0]);
        for k in 1..4 {
            acc_block = _mm512_fmadd_ps(lanes.scales[k], lanes.sums[k], acc_block);
        }
        let lo = _mm512_castps512_ps256(acc_block);
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(acc_block)));
        let acc = _mm256_fmadd_ps(broadcast_half(xb), lo, acc);
        _mm256_fmadd_ps(broadcast_half(xb.add(Q1_BYTES)), hi, acc)
    }
}

/// `ggml_vec_dot_q1_0_q8_0` with the haswell build's eight-lane order (`HASWELL = true`) or the x64 build's
/// generic chain.
///
/// Haswell: two blocks at a time (`q1_pair_lanes`, then `q1_pair_chain` one pair behind), a last lone block by
/// two `q1_quarter_pair_lanes` (quarters 0, 1 and 2, 3 in 512-bit steps) and stock's chain on eight lanes; the
/// only dependent chain across pairs is the `acc` FMA per block. `hsum_float_8` at the end.
///
/// x64: the generic chain is the fork formats' unfused chain (`fork_block_batches::<false>`), each 64-weight
/// half's weights as bytes `2·bit` (so `Σ(w − 1)·q = Σ ±q` with −(−128) = +128, as C's `int`).
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI/VBMI, AVX2, FMA and F16C; `y.len() >= 4 * x.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub unsafe fn vec_dot_q1_0_q8_0<const HASWELL: bool>(x: &[BlockQ1_0], y: &[BlockQ8_0]) -> f32 {
    debug_assert!(y.len() >= 4 * x.len());
    let batches = x.len() / 4;
    let done = 4 * batches;
    let xp = x.as_ptr() as *const u8;
    let yp = y.as_ptr() as *const u8;
    if !HASWELL {
        // SAFETY: blocks 0..4·batches of x and 16·batches q8_0 blocks of y are inside the slices; each half's
        // 8 bit bytes are inside its block.
        let sumf = unsafe {
            fork_block_batches::<false, Q1_BYTES, 0, false>(batches, xp, yp, |b, h| {
                let bits = (xp.add(b * Q1_BYTES + 2 + 8 * h) as *const u64).read_unaligned();
                _mm512_maskz_mov_epi8(bits, _mm512_set1_epi8(2))
            })
        };
        return formats::q1_0::x64_chain_from(sumf, &x[done..], &y[4 * done..]);
    }
    // SAFETY (whole block): blocks 2p, 2p + 1 (and the lone last block `i`) of x and their q8_0 blocks of y are
    // inside the slices; this function enables the helpers' features.
    unsafe {
        let mut acc = _mm256_setzero_ps();
        let pairs = x.len() / 2;
        let pair_x = |p: usize| xp.add(2 * p * Q1_BYTES);
        if pairs > 0 {
            // Software-pipelined: pair p's integer half is written before pair p − 1's float chain, so that
            // the chain's operations enter the scheduler behind independent work rather than waiting in it
            // (Zen 5: 5–9 % faster in the VM's disturbed minutes, the same in quiet ones: PERFORMANCE.md).
            let mut lanes = q1_pair_lanes(pair_x(0), yp);
            for p in 1..pairs {
                // The pair's 36 bytes, 2 KiB ahead (once per four blocks measured no faster: PERFORMANCE.md).
                prefetch_ahead(pair_x(p), 2 * Q1_BYTES);
                let next = q1_pair_lanes(pair_x(p), yp.add(8 * p * Q8_BYTES));
                acc = q1_pair_chain(acc, pair_x(p - 1), &lanes);
                lanes = next;
            }
            acc = q1_pair_chain(acc, pair_x(pairs - 1), &lanes);
        }
        if x.len() % 2 == 1 {
            let i = x.len() - 1;
            let xb = xp.add(i * Q1_BYTES);
            let yb = yp.add(4 * i * Q8_BYTES);
            let y = |k: usize| yb.add(k * Q8_BYTES);
            let (s0, s1) = q1_quarter_pair_lanes(xb.add(2), y(0).add(2), y(1).add(2));
            let (s2, s3) = q1_quarter_pair_lanes(xb.add(10), y(2).add(2), y(3).add(2));
            let mut acc_block = _mm256_mul_ps(broadcast_half(y(0)), s0);
            acc_block = _mm256_fmadd_ps(broadcast_half(y(1)), s1, acc_block);
            acc_block = _mm256_fmadd_ps(broadcast_half(y(2)), s2, acc_block);
            acc_block = _mm256_fmadd_ps(broadcast_half(y(3)), s3, acc_block);
            acc = _mm256_fmadd_ps(broadcast_half(xb), acc_block, acc);
        }
        hsum_float_8_ps(acc)
    }
}

/// One Q1_0 row's step over a pair of blocks (at `xb`; the second only where `SECOND`) against `C` prepared
/// columns' entries for that pair (`tiles::Q1ColumnPair`): every 512-bit vector holds one quarter of the first
/// block in its low half and the same quarter of the second in its high half, so stock's per-lane chain
/// (`d1_0·s_0`, three FMAs) runs once for both blocks. Per quarter: the two blocks' 32 sign bits joined into one
/// mask (the compiler's scalar shift and OR and one `kmovq`; `kmovd` from memory and `kunpckdq`, written out,
/// measured slower), bytes `2·bit` under it (shared by the columns), one `vpdpbusd` onto the column's all-clear
/// lane sums against its quants gives stock's sixteen lane sums exactly, then `vcvtdq2ps` and the chain; the
/// halves then continue `acc = fma(d0, acc_block, acc)` in block order. With `MASKED_LOADS` the mask selects
/// the column's quants instead (a zero-masked load, `Σ 2·(bit ? h : 0)` against the constant 2: the same
/// sums), which takes a load port where the masked move took a 512-bit vector port
/// (`dispatch::FORMS_BY_CPU`, `q1_masked_loads`). Without `SECOND` only the low half is used and the second block is never
/// read.
///
/// # Safety
/// One block at `xb`, two where `SECOND`; the calling kernel enables the features.
// Column `j` indexes the columns and the accumulators at once.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
pub(super) unsafe fn q1_row_pair_step<
    const C: usize,
    const SECOND: bool,
    const MASKED_LOADS: bool,
>(
    xb: *const u8,
    cols: [&Q1ColumnPair; C],
    acc: &mut [__m256; C],
) {
    // SAFETY (whole body): the quarter masks (bytes 2..18 of each block) and scales (bytes 0..2) are inside the
    // blocks the caller vouches for; the column entries are references; features from the caller.
    unsafe {
        let two = _mm512_set1_epi8(2);
        let xb1 = xb.add(Q1_BYTES);
        let bits = |x: *const u8, k: usize| -> __mmask64 {
            (x.add(2 + 4 * k) as *const u32).read_unaligned() as __mmask64
        };
        let masks: [__mmask64; 4] = std::array::from_fn(|k| {
            let hi = if SECOND { bits(xb1, k) } else { 0 };
            bits(xb, k) | hi << 32
        });
        // Without masked loads: the bytes `2·bit`, made once for all columns.
        let w: [__m512i; 4] = std::array::from_fn(|k| {
            if MASKED_LOADS {
                two
            } else {
                _mm512_maskz_mov_epi8(masks[k], two)
            }
        });
        for j in 0..C {
            let c = cols[j];
            let mut acc_block = _mm512_setzero_ps();
            for (k, &wk) in w.iter().enumerate() {
                let base = _mm512_load_si512(c.base[k].as_ptr() as *const _);
                let h = if MASKED_LOADS {
                    _mm512_maskz_loadu_epi8(masks[k], c.h[k].as_ptr() as *const _)
                } else {
                    _mm512_load_si512(c.h[k].as_ptr() as *const _)
                };
                let s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(base, wk, h));
                let d1 = _mm512_load_ps(c.d1[k].as_ptr());
                acc_block = if k == 0 {
                    _mm512_mul_ps(d1, s)
                } else {
                    _mm512_fmadd_ps(d1, s, acc_block)
                };
            }
            acc[j] = _mm256_fmadd_ps(
                broadcast_half(xb),
                _mm512_castps512_ps256(acc_block),
                acc[j],
            );
            if SECOND {
                let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(acc_block)));
                acc[j] = _mm256_fmadd_ps(broadcast_half(xb1), hi, acc[j]);
            }
        }
    }
}

/// The haswell-order lanes of `R` Q1_0 rows against `C` prepared columns (`tiles::Q1ColumnPair`), the rows'
/// steps interleaved pair by pair (`q1_row_pair_step`): `R·C` independent chains, each column entry loaded
/// once for all rows, each row's masks made once for all columns. Decode (`R = 4, C = 1`), prefill
/// (`R = 4, C = 2`) and the tail rows (`R = C = 1`). (With the lone last block as a runtime branch inside one
/// step, or the step as a closure called twice, the compiler kept the two-column instance rolled or out of
/// line, its accumulators in memory: prefill tiles ran at 1.4–1.8× stock against 1.9–2.3× for the kernel
/// before the two-block chains; now 2.5–2.6×.)
///
/// # Safety
/// The CPU must have the features below; each row pointer addresses `blocks` Q1_0 blocks and every column
/// holds `(blocks + 1) / 2` pairs.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn q1_tile_rows<const R: usize, const C: usize, const MASKED_LOADS: bool>(
    blocks: usize,
    rows: [*const u8; R],
    cols: [&[Q1ColumnPair]; C],
) -> [[[f32; 8]; R]; C] {
    debug_assert!(cols.iter().all(|c| c.len() == blocks.div_ceil(2)));
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    let entries = |p: usize| -> [&Q1ColumnPair; C] { std::array::from_fn(|j| &cols[j][p]) };
    // Whole pairs, then a lone last block: a loop body without branches, which the compiler unrolls over the
    // rows with every accumulator in registers.
    for p in 0..blocks / 2 {
        let e = entries(p);
        for r in 0..R {
            // SAFETY: blocks 2p and 2p + 1 of every row are inside what the caller guarantees; this function
            // enables the features.
            unsafe {
                q1_row_pair_step::<C, true, MASKED_LOADS>(
                    rows[r].add(2 * p * Q1_BYTES),
                    e,
                    &mut acc[r],
                )
            };
        }
    }
    if blocks % 2 == 1 {
        let p = blocks / 2;
        let e = entries(p);
        for r in 0..R {
            // SAFETY: block 2p of every row is inside what the caller guarantees (its partner is not read).
            unsafe {
                q1_row_pair_step::<C, false, MASKED_LOADS>(
                    rows[r].add(2 * p * Q1_BYTES),
                    e,
                    &mut acc[r],
                )
            };
        }
    }
    tile_lanes(acc)
}

/// One q8_0 column prepared for `q1_tile_rows` (`tiles::Q1ColumnPair`; equal entry for entry to the plain
/// model `tiles::q1_prepare_column`): per pair and quarter `k`, the two q8_0 blocks' quants side by side (one
/// insert), `h` with −128 replaced by 0 (a compare and a masked move), `base` = the lanes' `Σ wn(q)` (a wrapping
/// byte negation and `vpdpbusd` against ones), `d1` from two table broadcasts; a lone last block leaves its
/// pair's second half zero. Every activation column of every Q1_0 product goes through this once per call.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn q1_prepare_column(y: &[BlockQ8_0], out: &mut Vec<Q1ColumnPair>) {
    let blocks = y.len() / 4;
    out.clear();
    out.reserve(blocks.div_ceil(2));
    let yp = y.as_ptr() as *const u8;
    for p in 0..blocks.div_ceil(2) {
        let second = 2 * p + 1 < blocks;
        let mut entry = Q1ColumnPair {
            h: [[0; 64]; 4],
            base: [[0; 16]; 4],
            d1: [[0.0; 16]; 4],
        };
        for k in 0..4 {
            // SAFETY: q8_0 blocks 8p + k (and 8p + 4 + k where `second`) are inside `y`: 4·blocks ≤ y.len();
            // the destinations are the entry's own arrays of 64 bytes, each 64-byte aligned (`Q1ColumnPair` is
            // `align(64)` and its arrays are multiples of 64 bytes); this function enables the features.
            unsafe {
                let y0 = yp.add((8 * p + k) * Q8_BYTES);
                let lo = _mm256_loadu_si256(y0.add(2) as *const __m256i);
                let (hi, d_hi) = if second {
                    let y1 = yp.add((8 * p + 4 + k) * Q8_BYTES);
                    let d = (y1 as *const u16).read_unaligned();
                    (
                        _mm256_loadu_si256(y1.add(2) as *const __m256i),
                        F16_TO_F32_TABLE[d as usize],
                    )
                } else {
                    (_mm256_setzero_si256(), 0.0)
                };
                let q = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
                let h = _mm512_mask_mov_epi8(
                    q,
                    _mm512_cmpeq_epi8_mask(q, _mm512_set1_epi8(i8::MIN)),
                    _mm512_setzero_si512(),
                );
                let neg = _mm512_sub_epi8(_mm512_setzero_si512(), q);
                let base = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), neg);
                let d_lo = F16_TO_F32_TABLE[(y0 as *const u16).read_unaligned() as usize];
                let d1 = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(d_lo), _mm512_set1_ps(d_hi));
                _mm512_store_si512(entry.h[k].as_mut_ptr() as *mut _, h);
                _mm512_store_si512(entry.base[k].as_mut_ptr() as *mut _, base);
                _mm512_store_ps(entry.d1[k].as_mut_ptr(), d1);
            }
        }
        out.push(entry);
    }
}

/// One Q1_0 block's share of an activation column for the decode lookups (`mul_mat_q1_0_lookups`): for quarter
/// `k` and lane `L`, the sixteen values `d1 · s` that stock's lane sum `s = Σ (bit ? q : wn(q))` over quants
/// `4L..4L + 4` of q8_0 block `4b + k` (`wn` the wrapping byte negation) takes for the sixteen patterns of the
/// lane's four bits: entry `n` has element `4L + i`'s bit equal to bit `i` of `n`, which is how the four bits
/// sit in the row (bits `4L..4L + 4` of the quarter's 32-bit word). `d1 · s` is exact in f32 (an 11-bit
/// scale times an integer of at most 10 bits), so stock's `d1_0·s_0` is entry 0's value and each of its FMAs
/// `fma(d1_k, s_k, acc)` is an addition of the entry: one rounding, the same.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub(crate) struct Q1NibbleTables {
    t: [[[f32; 16]; 8]; 4],
}

/// For entry `n` of a nibble table, the lanes whose bit `i` is set (`n = 0..16`).
pub(super) const NIBBLE_BIT: [u16; 4] = [0xaaaa, 0xcccc, 0xf0f0, 0xff00];

/// The nibble tables of one column's first `nb` Q1_0 blocks (`4·nb` q8_0 blocks of `y`) into `out`.
///
/// # Safety
/// The CPU must have AVX-512 F; `y.len() >= 4 * nb`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub(super) unsafe fn q1_nibble_tables(y: &[BlockQ8_0], nb: usize, out: &mut Vec<Q1NibbleTables>) {
    // Every entry is written below; the zeros only make a new vector's entries valid floats.
    out.resize(
        nb,
        Q1NibbleTables {
            t: [[[0.0; 16]; 8]; 4],
        },
    );
    for (e, blocks) in out.iter_mut().zip(y[..4 * nb].chunks_exact(4)) {
        // SAFETY: every entry is sixteen floats, 64-byte aligned (`Q1NibbleTables` is `align(64)` and each
        // entry's offset a multiple of 64); features from the caller.
        unsafe {
            for (table, q8) in e.t.iter_mut().zip(blocks) {
                let d1 = _mm512_set1_ps(F16_TO_F32_TABLE[q8.d.to_bits() as usize]);
                for (entry, quad) in table.iter_mut().zip(q8.qs.chunks_exact(4)) {
                    let mut sum = _mm512_setzero_si512();
                    for (&bit, &q) in NIBBLE_BIT.iter().zip(quad) {
                        let set = _mm512_set1_epi32(q as i32);
                        let clear = _mm512_set1_epi32(q.wrapping_neg() as i32);
                        sum = _mm512_add_epi32(sum, _mm512_mask_blend_epi32(bit, clear, set));
                    }
                    _mm512_store_ps(
                        entry.as_mut_ptr(),
                        _mm512_mul_ps(_mm512_cvtepi32_ps(sum), d1),
                    );
                }
            }
        }
    }
}

/// One Q1_0 block of up to sixteen rows (lanes under `mask`, row `j` at `block + offsets[j]`): dword `j` of
/// word 0 is bytes 0..4 of row `j`'s block (its scale, then two bit bytes), of word `1 + k` bytes
/// `2 + 4k..6 + 4k` (quarter `k`'s 32 bits).
///
/// # Safety
/// The lanes under `mask` address whole blocks; the calling kernel enables AVX-512 F.
#[inline(always)]
pub(super) unsafe fn q1_gather_block(
    block: *const u8,
    mask: __mmask16,
    offsets: __m512i,
) -> [__m512i; 5] {
    // SAFETY: bytes 0..18 of each masked-in row's block (masked-off lanes are not read); features from the
    // caller.
    unsafe {
        let mut words = [_mm512_setzero_si512(); 5];
        for (i, w) in words.iter_mut().enumerate() {
            let at = block.add(if i == 0 { 0 } else { 4 * i - 2 }) as *const i32;
            *w = _mm512_mask_i32gather_epi32::<1>(_mm512_setzero_si512(), mask, offsets, at);
        }
        words
    }
}

/// Up to sixteen Q1_0 rows (`count`, the first at `first`, `row_bytes` apart) against a column's nibble tables,
/// one row per lane: per block one gather of the rows' scales and one of each quarter's 32 sign bits, then for
/// each lane `L` the four quarters' entries picked by `vpermps` (its index is the low four bits, so the bits
/// shifted right by `4L`), summed in quarter order (stock's per-lane chain, `Q1NibbleTables`) and
/// `acc_L = fma(d0, ·, acc_L)`; at the end `hsum_float_8` across the eight accumulators, which is vertical here.
/// Rows past `count` are masked off and never read.
///
/// # Safety
/// The CPU must have AVX-512 F and F16C; `1 <= count <= 16`; rows `0..count` each hold `tables.len()` blocks;
/// `15 · row_bytes <= i32::MAX`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub(super) unsafe fn q1_lookup_rows16(
    first: *const u8,
    row_bytes: usize,
    count: usize,
    next: &[u8],
    tables: &[Q1NibbleTables],
) -> [f32; 16] {
    // SAFETY (whole body): every gathered dword is bytes 0..4, 2..6, 6..10, 10..14 or 14..18 of block `b` of a
    // row below `count` (the masked-off lanes are not read); the table loads are aligned (`align(64)`).
    unsafe {
        let mask = (u32::MAX >> (32 - count)) as __mmask16;
        let offsets = _mm512_mullo_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32(row_bytes as i32),
        );
        let mut acc = [_mm512_setzero_ps(); 8];
        // Software-pipelined: block `b + 1`'s gathers are issued before block `b`'s lookups, so their latency
        // (the rows come from L2) is spent on the previous block's work.
        let mut words = match tables.len() {
            0 => [_mm512_setzero_si512(); 5],
            _ => q1_gather_block(first, mask, offsets),
        };
        for (b, t) in tables.iter().enumerate() {
            // The next group's rows (one run of bytes) into L2, five lines per block: sixteen rows of `nb`
            // blocks are 4.5·nb lines, so the whole group arrives while this one runs. Without it the
            // gathers, sixteen rows a step, leave the hardware prefetchers behind: the Bonsai-8B-shaped model
            // decoded about a quarter slower than with the tiles; into L1 instead of L2 it gained less.
            for line in 5 * b..5 * b + 5 {
                if let Some(byte) = next.get(64 * line) {
                    _mm_prefetch::<_MM_HINT_T1>(byte as *const u8 as *const i8);
                }
            }
            let current = words;
            if b + 1 < tables.len() {
                words = q1_gather_block(first.add((b + 1) * Q1_BYTES), mask, offsets);
            }
            let d0 = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(current[0]));
            for (l, acc_l) in acc.iter_mut().enumerate() {
                let shift = _mm512_set1_epi32(4 * l as i32);
                let mut lane = _mm512_setzero_ps();
                for k in 0..4 {
                    let pick = _mm512_permutexvar_ps(
                        _mm512_srlv_epi32(current[1 + k], shift),
                        _mm512_load_ps(t.t[k][l].as_ptr()),
                    );
                    lane = if k == 0 {
                        pick
                    } else {
                        _mm512_add_ps(lane, pick)
                    };
                }
                *acc_l = _mm512_fmadd_ps(d0, lane, *acc_l);
            }
        }
        let u = _mm512_add_ps(_mm512_add_ps(acc[0], acc[4]), _mm512_add_ps(acc[2], acc[6]));
        let v = _mm512_add_ps(_mm512_add_ps(acc[1], acc[5]), _mm512_add_ps(acc[3], acc[7]));
        std::mem::transmute::<__m512, [f32; 16]>(_mm512_add_ps(u, v))
    }
}

/// Q1_0 decode (one activation column) in the haswell order by nibble tables: the column becomes
/// `Q1NibbleTables` once (2 KiB per weight block), and each group of sixteen rows runs `q1_lookup_rows16`:
/// per row and block about six vector operations (a shift, a `vpermps` and an add per lane and quarter, for
/// sixteen rows at once) where the tiles take about ten. Stock's per-lane chain, the `acc` FMAs in block order
/// and `hsum_float_8` are kept, so every element has the bits of the haswell `vec_dot`. `false` (nothing done)
/// when the rows are too far apart for 32-bit gather offsets.
///
/// # Safety
/// The CPU must have AVX-512 F and F16C; `y.len() >= 4 * x.nb()`.
#[inline(always)]
pub(super) unsafe fn mul_mat_q1_0_lookups(
    x: Rows<'_, BlockQ1_0>,
    y: &[BlockQ8_0],
    emit: Emit<'_>,
) -> bool {
    // The tables of the last column this thread prepared, with that column's bytes: the hook runs a product in
    // chunks of rows, each a call with the same column, and a compare costs far less than the tables.
    thread_local! {
        static TABLES: std::cell::RefCell<(Vec<u8>, Vec<Q1NibbleTables>)> =
            const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
    }
    let row_bytes = x.stride() * Q1_BYTES;
    if row_bytes
        .checked_mul(15)
        .is_none_or(|b| b > i32::MAX as usize)
    {
        return false;
    }
    let y = &y[..4 * x.nb()];
    // SAFETY: q8_0 blocks are plain bytes (`BlockQ8_0` is `repr(C)`, 34 bytes, alignment 1, no padding).
    let column = unsafe { std::slice::from_raw_parts(y.as_ptr() as *const u8, size_of_val(y)) };
    TABLES.with_borrow_mut(|(cached, tables)| {
        // SAFETY: the caller's contract (features, `y` long enough); each group's rows `g..g + count` are rows
        // of `x`, each holding `x.nb()` blocks, `row_bytes` apart; `next` runs from the next group's first row
        // to the end of its last, inside `x`'s blocks.
        unsafe {
            // Equal bytes mean an equal length too, so the same `nb` and the same tables.
            if cached[..] != *column {
                q1_nibble_tables(y, x.nb(), tables);
                cached.clear();
                cached.extend_from_slice(column);
            }
            for g in (0..x.rows()).step_by(16) {
                let count = (x.rows() - g).min(16);
                let first = x.row(g).as_ptr() as *const u8;
                let next = if g + 16 < x.rows() {
                    let start = x.row(g + 16).as_ptr() as *const u8;
                    let end = x.row((g + 32).min(x.rows()) - 1).as_ptr_range().end as *const u8;
                    std::slice::from_raw_parts(start, end.offset_from(start) as usize)
                } else {
                    &[]
                };
                let values = q1_lookup_rows16(first, row_bytes, count, next, tables);
                for (i, &v) in values[..count].iter().enumerate() {
                    emit(g + i, 0, v);
                }
            }
        }
    });
    true
}

/// `W · Y` for Q1_0 weights against q8_0 columns, every element with the bits of `vec_dot_q1_0_q8_0::<HASWELL>`:
/// the haswell order through the tile driver (`tiles::mul_mat_q1_0_tiles`) and `q1_tile_rows`, one column with
/// `LOOKUPS` by the nibble tables (`mul_mat_q1_0_lookups`); the x64 order (a scalar chain per block, for builds
/// without FMA) one `vec_dot` per pair.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI/VBMI, AVX2, FMA and F16C; `y.nb() >= 4 * x.nb()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub unsafe fn mul_mat_q1_0_q8_0<
    const HASWELL: bool,
    const MASKED_LOADS: bool,
    const LOOKUPS: bool,
>(
    x: Rows<'_, BlockQ1_0>,
    y: Rows<'_, BlockQ8_0>,
    emit: Emit<'_>,
) {
    // SAFETY: the caller's contract covers the kernels' features.
    unsafe {
        if HASWELL && LOOKUPS && y.rows() == 1 && mul_mat_q1_0_lookups(x, y.row(0), &mut *emit) {
            return;
        }
        if HASWELL {
            mul_mat_q1_0_tiles(
                x,
                y,
                emit,
                &LaneTileKernels {
                    prepare: q1_prepare_column,
                    rows4: q1_tile_rows::<4, 1, MASKED_LOADS>,
                    rows1: q1_tile_rows::<1, 1, MASKED_LOADS>,
                    rows4x2: q1_tile_rows::<4, 2, MASKED_LOADS>,
                },
            )
        } else {
            mul_mat_by_pairs(
                |x, y| vec_dot_q1_0_q8_0::<false>(x, &y[..4 * x.len()]),
                x,
                y,
                emit,
            )
        }
    }
}
