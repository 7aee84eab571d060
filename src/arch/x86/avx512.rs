//! AVX-512 kernels (F, BW, VL, VNNI, VBMI), same function names as `avx2.rs`.
//!
//! Q2_0 · q8_0, eight blocks per batch:
//! - one zmm per block: `vpmovzxwq` puts code word `Q` in qword `Q`, `vpmultishiftqb` takes the bits at offset
//!   `2·(j % 8)` for byte `j`, a mask leaves the code of weight `j` in byte `j`;
//! - `vpdpbusd(c, q) − vpdpbusd(1, q)` gives sixteen dword partials of `Σ(c − 1)·q` (eight per half);
//! - the reduction uses in-lane unpacks and two 128-bit-lane shuffles (no cross-lane index permutes), which was
//!   the fastest of the variants measured (`docs/PERFORMANCE.md`);
//! - the q8_0 scales are collected with four `vpermt2w` from eight loads (gathers are microcoded and slow on
//!   Zen 4, sixteen scalar moves cost more), the block scales with scalar moves and F16C;
//! - the float chain follows the stock build exactly, and is software-pipelined: batch `k + 1`'s vector work is
//!   issued before batch `k`'s sequential `sumf` steps, so the 4-cycle-per-block chain overlaps it.
//!
//! The fork's PQ2_0 and PTQ1_0 (128-weight blocks) share that machinery through `fork_block_batches`: PQ2_0 with
//! the same code expansion per 64-weight half, PTQ1_0 with a trit decode (`ptq1_half_trits`).
//!
//! Against q8_K: TQ2_0 (`vec_dot_tq2_0_q8_k`), TQ1_0 (`vec_dot_tq1_0_q8_k`, the base-3 digit decode shared with
//! PTQ1_0), the five IQ formats through one kernel over a per-format decoder (`vec_dot_iq_q8_k`, `IqDecode`;
//! `docs/iq.md`), and `quantize_row_q8_k`.

use std::arch::x86_64::*;

use super::{
    hsum_epi32, hsum_float_8_ps, iq_block_float_step, iq_row_result, pipelined, pipelined_one_site,
    prefetch_ahead, Base3Layout,
};
use crate::formats::iq::{self, IqBlock};
use crate::formats::iq2_s::BlockIQ2S;
use crate::formats::iq2_xs::BlockIQ2XS;
use crate::formats::iq2_xxs::BlockIQ2XXS;
use crate::formats::iq3_s::BlockIQ3S;
use crate::formats::iq3_xxs::BlockIQ3XXS;
use crate::formats::iq_grids::{
    GridCodes, IQ2S_CODES, IQ2S_GRID, IQ2XS_CODES, IQ2XS_GRID, IQ2XXS_CODES, IQ2_LEVELS,
    IQ3S_CODES, IQ3S_LEVELS, IQ3XXS_CODES, IQ3XXS_LEVELS, KSIGNS_IQ2XS,
};
use crate::formats::pq2_0::{vec_dot_pq2_0_q8_0_from, BlockPQ2_0};
use crate::formats::ptq1_0::{vec_dot_ptq1_0_q8_0_from, BlockPTQ1_0};
use crate::formats::q1_0::{self, BlockQ1_0};
use crate::formats::q2_0::{vec_dot_q2_0_q8_0_from, BlockQ2_0};
use crate::formats::q8_0::BlockQ8_0;
use crate::formats::q8_k::BlockQ8K;
use crate::formats::tq1_0::{self, BlockTQ1_0};
use crate::formats::tq2_0::{self, BlockTQ2_0};
use crate::fp16::F16_TO_F32_TABLE;
use crate::tiles::{
    mul_mat_by_pairs, mul_mat_fork_tiles, mul_mat_q1_0_tiles, mul_mat_q2_0_tiles, mul_mat_tq_tiles,
    tq_prepare_column, Emit, ForkColumnBatch, LaneTileKernels, Q1ColumnPair, Q2ColumnBatch, Rows,
    TqColumnBlock, TqQuants,
};

const Q2_BYTES: usize = 18;
const Q8_BYTES: usize = 34;
const PQ2_BYTES: usize = 34;
const PTQ1_BYTES: usize = 28;
/// PTQ1_0's scale comes last: `qs[24]`, `qh[2]`, then `d`.
const PTQ1_D0_AT: usize = 26;
const _: () = assert!(std::mem::offset_of!(BlockPTQ1_0, d) == PTQ1_D0_AT);
const Q1_BYTES: usize = 18;

/// The 64 codes of one Q2_0 code group (16 bytes at `codes`), one per byte: `vpmovzxwq` puts code word `Q` in
/// qword `Q`, `vpmultishiftqb` takes the bits at offset `2·(j % 8)` for byte `j`, a mask keeps two bits.
#[inline(always)]
unsafe fn q2_group_codes(codes: *const u8) -> __m512i {
    // SAFETY (whole body): the caller guarantees 16 bytes at `codes`; the intrinsics' features are enabled by
    // the calling kernel.
    unsafe {
        let ctrl = _mm512_set1_epi64(0x0e0c_0a08_0604_0200);
        let words = _mm512_cvtepu16_epi64(_mm_loadu_si128(codes as *const __m128i));
        _mm512_and_si512(
            _mm512_multishift_epi64_epi8(ctrl, words),
            _mm512_set1_epi8(3),
        )
    }
}

/// Sixteen dword partials of `Σ(w − 1)·q` for 64 unsigned weight bytes `w` (0..=3) against the q8_0 blocks
/// whose quants are at `q0` and `q1`: dwords 0..7 sum the first 32 weights, 8..15 the second.
#[inline(always)]
unsafe fn group_partials(w: __m512i, q0: *const u8, q1: *const u8) -> __m512i {
    // SAFETY (whole body): the caller guarantees 32 bytes at `q0` and `q1`; the intrinsics' features are
    // enabled by the calling kernel.
    unsafe {
        let lo = _mm256_loadu_si256(q0 as *const __m256i);
        let hi = _mm256_loadu_si256(q1 as *const __m256i);
        let q = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
        let zero = _mm512_setzero_si512();
        _mm512_sub_epi32(
            _mm512_dpbusd_epi32(zero, w, q),
            _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(1), q),
        )
    }
}

/// `Σ(w − 1)·q` of eight 64-weight groups as floats: `group(g)` gives group `g`'s weight bytes (0..=3) and
/// the quants of the q8_0 block that meets its first 32 weights (the next q8_0 block meets the other 32). Lane
/// `8j + 4h + r` holds half `h` of group `4j + r`. Shared by Q2_0 (a group is a block), PQ2_0 and PTQ1_0 (a
/// block is two groups).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
unsafe fn group_sums(group: impl Fn(usize) -> (__m512i, *const u8)) -> __m512 {
    // SAFETY: the caller guarantees two q8_0 blocks at each group's pointer; features are enabled by this
    // function.
    unsafe {
        _mm512_cvtepi32_ps(reduce_group_partials(std::array::from_fn(|g| {
            let (w, q0) = group(g);
            group_partials(w, q0, q0.add(Q8_BYTES))
        })))
    }
}

/// Eight groups' sixteen-dword partials to their sixteen half sums, in `group_sums`' lane order.
#[inline(always)]
unsafe fn reduce_group_partials(v: [__m512i; 8]) -> __m512i {
    // SAFETY (whole body): register operations only; features come from the calling kernel.
    unsafe {
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
        _mm512_add_epi32(
            _mm512_shuffle_i32x4::<0x88>(r[0], r[1]),
            _mm512_shuffle_i32x4::<0xdd>(r[0], r[1]),
        )
    }
}

/// Where `group_d1` finds each lane's scale: per pair `j` of 64-byte loads, the lanes it fills (a word mask) and
/// each lane's word index inside the pair. Built at compile time from a lane order (`order[l]`: the q8_0 block
/// whose scale lane `l` holds), and for `group_d1_gathered` each lane's block as a byte offset (`34·order[l]`).
/// The index vectors first and 64-byte aligned, so no load of them splits a cache line.
#[repr(C, align(64))]
struct D1Tables {
    idx: [[u16; 32]; 4],
    offsets: [i32; 16],
    masks: [u32; 4],
}

impl D1Tables {
    const fn new(order: [usize; 16]) -> D1Tables {
        let mut t = D1Tables {
            idx: [[0; 32]; 4],
            offsets: [0; 16],
            masks: [0; 4],
        };
        let mut l = 0;
        while l < 16 {
            let b = order[l];
            let j = b / 4;
            t.masks[j] |= 1 << l;
            t.idx[j][l] = (17 * b - 64 * j) as u16;
            t.offsets[l] = (Q8_BYTES * b) as i32;
            l += 1;
        }
        t
    }
}

/// The scales of the 16 q8_0 blocks at `yb` as floats, in the lane order `tables` was built for. The scales lie
/// in the first 512 bytes (block `b`'s at word `17b`), so eight 64-byte loads and four two-source word permutes
/// (`vpermt2w`, one per pair of loads, merged under masks) collect them: far fewer operations than sixteen
/// scalar moves, and no store-to-load forwarding stall (gathers are microcoded and slow on Zen 4).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
unsafe fn group_d1(yb: *const u8, tables: &D1Tables) -> __m512 {
    // SAFETY: the caller guarantees 16 q8_0 blocks (544 bytes) at `yb`; the loads cover bytes 0..512; the index
    // tables are 64-byte arrays.
    unsafe {
        let z: [__m512i; 8] =
            std::array::from_fn(|i| _mm512_loadu_si512(yb.add(64 * i) as *const _));
        let mut words = _mm512_setzero_si512();
        for j in 0..4 {
            let picked = _mm512_permutex2var_epi16(
                z[2 * j],
                _mm512_loadu_si512(tables.idx[j].as_ptr() as *const _),
                z[2 * j + 1],
            );
            words = _mm512_mask_mov_epi16(words, tables.masks[j], picked);
        }
        _mm512_cvtph_ps(_mm512_castsi512_si256(words))
    }
}

/// `group_d1` by one gather: each lane's four bytes at its block's start (the f16 scale and the block's first two
/// quants, inside the block), narrowed to words and converted. On CPUs whose gathers are fast it takes fewer
/// vector operations than the permutes (`dispatch::q8_scale_gathers`).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
unsafe fn group_d1_gathered(yb: *const u8, tables: &D1Tables) -> __m512 {
    // SAFETY: the caller guarantees 16 q8_0 blocks (544 bytes) at `yb`; each lane reads bytes 0..4 of one of them
    // (`offsets` are whole blocks below 16); the offset table is a 64-byte array.
    unsafe {
        let offsets = _mm512_loadu_si512(tables.offsets.as_ptr() as *const _);
        let dwords = _mm512_i32gather_epi32::<1>(offsets, yb as *const i32);
        _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dwords))
    }
}

/// `group_sums`' lane order for Q2_0 (group `g` is block `g`, its halves meet q8_0 blocks `2g` and `2g + 1`):
/// lane `8(g / 4) + 4h + g % 4` holds q8_0 block `2g + h`.
static Q2_D1: D1Tables = D1Tables::new({
    let mut order = [0usize; 16];
    let mut g = 0;
    while g < 8 {
        order[8 * (g / 4) + g % 4] = 2 * g;
        order[8 * (g / 4) + 4 + g % 4] = 2 * g + 1;
        g += 1;
    }
    order
});

/// Per-batch float terms of eight Q2_0 blocks: for the FMA chain `(d0, sumi)`, for the unfused chain
/// `(d0·sumi, _)`. Block `k` sits in lane `CHAIN_LANES[k]`. Nothing here depends on the running `sumf`.
/// `SCALE_GATHER`: the q8_0 scales by one gather (`group_d1_gathered`), and for the FMA chain no `d0` at all
/// (`q2_batch_chain_table_d0` reads the blocks' scales itself; the first term is left zero).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
unsafe fn q2_batch_terms<const FMA: bool, const SCALE_GATHER: bool>(
    xb: *const u8,
    yb: *const u8,
) -> (__m512, __m512) {
    // SAFETY (whole body): the caller guarantees 8 whole Q2_0 blocks at `xb` and 16 q8_0 blocks at `yb`;
    // features are enabled by this function.
    unsafe {
        let s = group_sums(|g| {
            (
                q2_group_codes(xb.add(g * Q2_BYTES + 2)),
                yb.add(2 * g * Q8_BYTES + 2),
            )
        });
        let d1 = if SCALE_GATHER {
            group_d1_gathered(yb, &Q2_D1)
        } else {
            group_d1(yb, &Q2_D1)
        };
        let d0 = if SCALE_GATHER && FMA {
            _mm512_setzero_ps()
        } else {
            let mut d0_bits = [0u16; 16];
            for k in 0..8 {
                d0_bits[CHAIN_LANES[k]] = (xb.add(k * Q2_BYTES) as *const u16).read_unaligned();
            }
            _mm512_cvtph_ps(_mm256_loadu_si256(d0_bits.as_ptr() as *const __m256i))
        };
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

/// `q2_batch_chain::<true>` with each block's `d0` read from its block through `F16_TO_F32_TABLE` (two scalar
/// loads) instead of collected in a vector: no eight word stores read back as one vector (a store-forwarding
/// stall) and no conversion on the vector ports.
///
/// # Safety
/// Eight whole Q2_0 blocks at `xb`; the calling kernel enables the features.
#[inline(always)]
unsafe fn q2_batch_chain_table_d0(mut sumf: f32, sumi: __m512, xb: *const u8) -> f32 {
    let mut b = [0f32; 16];
    // SAFETY: a plain store of one register into a local array; block `k`'s scale (bytes 0..2) is inside the
    // eight blocks the caller vouches for.
    unsafe {
        _mm512_storeu_ps(b.as_mut_ptr(), sumi);
        for (k, lane) in CHAIN_LANES.into_iter().enumerate() {
            let d0 =
                F16_TO_F32_TABLE[(xb.add(k * Q2_BYTES) as *const u16).read_unaligned() as usize];
            sumf = d0.mul_add(b[lane], sumf);
        }
    }
    sumf
}

/// `ggml_vec_dot_q2_0_q8_0` with the haswell (`FMA = true`) or x64 (`FMA = false`) float chain; `SCALE_GATHER`
/// collects the scales by a gather and table loads (`q2_batch_terms`), where gathers are fast.
///
/// Software-pipelined: the integer and per-block float work of batch `k + 1` is issued before the sequential
/// chain of batch `k`, so the chain (4 cycles per block) runs while the next batch's vector work executes
/// instead of behind it.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI/VBMI, AVX2, FMA and F16C; `y.len() >= 2 * x.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub unsafe fn vec_dot_q2_0_q8_0<const FMA: bool, const SCALE_GATHER: bool>(
    x: &[BlockQ2_0],
    y: &[BlockQ8_0],
) -> f32 {
    debug_assert!(y.len() >= 2 * x.len());
    let batches = x.len() / 8;
    let xp = x.as_ptr() as *const u8;
    let yp = y.as_ptr() as *const u8;
    // SAFETY (both closures): batch k < batches covers blocks 8k..8k+8 of x and 16k..16k+16 of y, inside the
    // slices; this function's target features cover the helpers'.
    let sumf = pipelined(
        batches,
        |k| unsafe {
            let xb = xp.add(8 * k * Q2_BYTES);
            prefetch_ahead(xb, 8 * Q2_BYTES);
            (
                q2_batch_terms::<FMA, SCALE_GATHER>(xb, yp.add(16 * k * Q8_BYTES)),
                xb,
            )
        },
        |sumf, (terms, xb)| unsafe {
            if SCALE_GATHER && FMA {
                q2_batch_chain_table_d0(sumf, terms.1, xb)
            } else {
                q2_batch_chain::<FMA>(sumf, terms)
            }
        },
    );
    // Up to seven blocks left: the scalar chain continues with the same float order.
    let done = 8 * batches;
    vec_dot_q2_0_q8_0_from::<FMA>(sumf, &x[done..], &y[2 * done..])
}

/// `vpermb` index taking a 64-quant group to four 16-byte lanes, lane `k` holding the quants of weights `4i + k`.
const FIELD_LANES: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut j = 0;
    while j < 64 {
        t[j] = (4 * (j % 16) + j / 16) as u8;
        j += 1;
    }
    t
};

/// Prepares the full batches of one q8_0 column (`y.len() / 16` of them) into `out`.
///
/// # Safety
/// The CPU must have the features below.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c,gfni")]
pub unsafe fn q2_prepare_column(y: &[BlockQ8_0], out: &mut Vec<Q2ColumnBatch>) {
    out.clear();
    let yp = y.as_ptr() as *const u8;
    // SAFETY: batch k < y.len() / 16 reads q8_0 blocks 16k..16k+16 of `y`; the index table is 64 bytes.
    unsafe {
        let fields = _mm512_loadu_si512(FIELD_LANES.as_ptr() as *const _);
        for k in 0..y.len() / 16 {
            let yb = yp.add(16 * k * Q8_BYTES);
            let mut batch = Q2ColumnBatch::ZERO;
            for h in 0..2 {
                // t[g]: block 4h + g's 64 quants with lane k holding field k's.
                let t: [__m512i; 4] = std::array::from_fn(|g| {
                    let q = yb.add(2 * (4 * h + g) * Q8_BYTES + 2);
                    let lo = _mm256_loadu_si256(q as *const __m256i);
                    let hi = _mm256_loadu_si256(q.add(Q8_BYTES) as *const __m256i);
                    let group = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
                    _mm512_permutexvar_epi8(fields, group)
                });
                // A 4 × 4 transpose of 128-bit lanes: q[h][k] gathers lane k of t[0..4].
                let a = _mm512_shuffle_i64x2::<0x44>(t[0], t[1]);
                let b = _mm512_shuffle_i64x2::<0x44>(t[2], t[3]);
                let c = _mm512_shuffle_i64x2::<0xee>(t[0], t[1]);
                let d = _mm512_shuffle_i64x2::<0xee>(t[2], t[3]);
                let fields_out = [
                    _mm512_shuffle_i64x2::<0x88>(a, b),
                    _mm512_shuffle_i64x2::<0xdd>(a, b),
                    _mm512_shuffle_i64x2::<0x88>(c, d),
                    _mm512_shuffle_i64x2::<0xdd>(c, d),
                ];
                for (kf, v) in fields_out.into_iter().enumerate() {
                    _mm512_storeu_si512(batch.q[h][kf].as_mut_ptr() as *mut _, v);
                }
            }
            let mut d1_bits = [0u16; 16];
            for (j, block) in y[16 * k..16 * k + 16].iter().enumerate() {
                let lane = 8 * (j % 2) + j / 2;
                batch.qsum[lane] = block.qs.iter().map(|&v| v as i32).sum();
                d1_bits[lane] = block.d.to_bits();
            }
            let d1 = _mm512_cvtph_ps(_mm256_loadu_si256(d1_bits.as_ptr() as *const __m256i));
            _mm512_storeu_ps(batch.d1.as_mut_ptr(), d1);
            out.push(batch);
        }
    }
}

/// `vpermt2b` indices gathering the code bytes of blocks `4h..4h+4` of a batch (byte `16g + i` = code byte `i`
/// of block `4h + g`): from the loads at batch offsets 0 and 64 (`h = 0`) or 64 and 128 (`h = 1`).
const CODE_GATHER: [[u8; 64]; 2] = {
    let mut t = [[0u8; 64]; 2];
    let mut h = 0;
    while h < 2 {
        let mut j = 0;
        while j < 64 {
            t[h][j] = (Q2_BYTES * (4 * h + j / 16) + 2 + j % 16 - 64 * h) as u8;
            j += 1;
        }
        h += 1;
    }
    t
};

/// `vpermt2d` indices pairing the dword partials of the two halves' accumulators: output lane `8h + b` is half
/// `h` of block `b`, the sum of dwords `4(b % 4) + 2h` and `+ 1` of accumulator `b / 4` (`EVEN` and `ODD`).
const PAIR_EVEN: [u32; 16] = {
    let mut t = [0u32; 16];
    let mut l = 0;
    while l < 16 {
        let (h, b) = (l / 8, l % 8);
        t[l] = (16 * (b / 4) + 4 * (b % 4) + 2 * h) as u32;
        l += 1;
    }
    t
};
const PAIR_ODD: [u32; 16] = {
    let mut t = PAIR_EVEN;
    let mut l = 0;
    while l < 16 {
        t[l] += 1;
        l += 1;
    }
    t
};

/// `vpermt2w` indices of the eight block scales of a batch (word `9b` of the first 128 bytes).
const D0_GATHER: [u16; 32] = {
    let mut t = [0u16; 32];
    let mut b = 0;
    while b < 8 {
        t[b] = (9 * b) as u16;
        b += 1;
    }
    t
};

/// `vgf2p8affineqb` matrices moving bits `2k, 2k + 1` of every byte to bits 0, 1 (`k = 1, 2, 3`): output bit
/// `i` is the parity of the input ANDed with matrix byte `7 − i`.
const FIELD_AFFINE: [i64; 3] = [
    (1 << (56 + 2)) | (1 << (48 + 3)),
    (1 << (56 + 4)) | (1 << (48 + 5)),
    (1 << (56 + 6)) | (1i64 << (48 + 7)),
];

/// Field `k` of every code byte of `codes`, moved to bits 0–1 in place: `AND 3` for `k = 0`, one
/// `vgf2p8affineqb` for the others.
#[inline(always)]
unsafe fn q2_tile_fields(codes: __m512i) -> [__m512i; 4] {
    // SAFETY (whole body): register operations only; features come from the caller.
    unsafe {
        let affine = |k: usize| {
            _mm512_gf2p8affine_epi64_epi8::<0>(codes, _mm512_set1_epi64(FIELD_AFFINE[k - 1]))
        };
        [
            _mm512_and_si512(codes, _mm512_set1_epi8(3)),
            affine(1),
            affine(2),
            affine(3),
        ]
    }
}

/// Sixteen dword partials of `Σ c·q` for the four blocks whose code fields are in `fields` (byte `16g + i` of
/// field `k`) against the quants prepared for each field.
#[inline(always)]
unsafe fn q2_tile_dot(fields: &[__m512i; 4], q: &[[u8; 64]; 4]) -> __m512i {
    // SAFETY (whole body): 64-byte loads from the prepared arrays; features come from the caller.
    unsafe {
        let mut acc = _mm512_setzero_si512();
        for k in 0..4 {
            let quants = _mm512_loadu_si512(q[k].as_ptr() as *const _);
            acc = _mm512_dpbusd_epi32(acc, fields[k], quants);
        }
        acc
    }
}

/// One row's float terms for one batch against `C` prepared columns: per column `(d0, sumi)` for the FMA chain,
/// `(d0·sumi, _)` for the unfused one, block `b` in lane `b`. The code bytes are gathered and split into fields
/// once for all the columns; `sumi` is computed exactly as `q2_batch_terms` does.
#[inline(always)]
unsafe fn q2_tile_terms<const FMA: bool, const C: usize>(
    xb: *const u8,
    p: [&Q2ColumnBatch; C],
) -> [(__m256, __m256); C] {
    // SAFETY (whole body): the caller guarantees eight whole Q2_0 blocks (144 bytes) at `xb`: the loads cover
    // bytes 0..128 and, masked, 128..144; the tables are 64-byte arrays; features come from the caller.
    unsafe {
        let z0 = _mm512_loadu_si512(xb as *const _);
        let z1 = _mm512_loadu_si512(xb.add(64) as *const _);
        let z2 = _mm512_maskz_loadu_epi8(0xffff, xb.add(128) as *const _);
        let gather = |h: usize| _mm512_loadu_si512(CODE_GATHER[h].as_ptr() as *const _);
        let fields = [
            q2_tile_fields(_mm512_permutex2var_epi8(z0, gather(0), z1)),
            q2_tile_fields(_mm512_permutex2var_epi8(z1, gather(1), z2)),
        ];
        let d0_words =
            _mm512_permutex2var_epi16(z0, _mm512_loadu_si512(D0_GATHER.as_ptr() as *const _), z1);
        let d0 = _mm256_cvtph_ps(_mm512_castsi512_si128(d0_words));
        let even = _mm512_loadu_si512(PAIR_EVEN.as_ptr() as *const _);
        let odd = _mm512_loadu_si512(PAIR_ODD.as_ptr() as *const _);
        let zero = _mm256_setzero_ps();
        let mut out = [(zero, zero); C];
        for c in 0..C {
            let col = p[c];
            let acc = [
                q2_tile_dot(&fields[0], &col.q[0]),
                q2_tile_dot(&fields[1], &col.q[1]),
            ];
            let sums = _mm512_add_epi32(
                _mm512_permutex2var_epi32(acc[0], even, acc[1]),
                _mm512_permutex2var_epi32(acc[0], odd, acc[1]),
            );
            let qsum = _mm512_loadu_si512(col.qsum.as_ptr() as *const _);
            let s = _mm512_cvtepi32_ps(_mm512_sub_epi32(sums, qsum));
            let s_lo = _mm512_castps512_ps256(s);
            let s_hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(s)));
            let d1_lo = _mm256_loadu_ps(col.d1.as_ptr());
            let d1_hi = _mm256_loadu_ps(col.d1.as_ptr().add(8));
            out[c] = if FMA {
                let first = _mm256_fmadd_ps(d1_lo, s_lo, zero);
                (d0, _mm256_fmadd_ps(d1_hi, s_hi, first))
            } else {
                let sumi = _mm256_add_ps(
                    _mm256_add_ps(zero, _mm256_mul_ps(d1_lo, s_lo)),
                    _mm256_mul_ps(d1_hi, s_hi),
                );
                (_mm256_mul_ps(d0, sumi), d0)
            };
        }
        out
    }
}

/// The sequential part of one row's batch: eight chain steps in block order.
#[inline(always)]
fn q2_tile_chain<const FMA: bool>(mut sumf: f32, terms: (__m256, __m256)) -> f32 {
    let mut a = [0f32; 8];
    let mut b = [0f32; 8];
    // SAFETY: plain stores of two registers into local arrays (AVX is enabled by every caller).
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

/// The running sums of `R` rows (pointers to their first block) against `C` prepared columns after every full
/// batch, the `R·C` chains interleaved and software-pipelined (batch `k + 1`'s vector work before batch `k`'s
/// chains). Several columns share each row's code gather and field split (prefill).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c,gfni")]
unsafe fn q2_tile_rows<const FMA: bool, const R: usize, const C: usize>(
    rows: [*const u8; R],
    preps: [&[Q2ColumnBatch]; C],
) -> [[f32; R]; C] {
    let mut sumf = [[0f32; R]; C];
    let batches = preps[0].len();
    if batches == 0 {
        return sumf;
    }
    let batch = |k: usize| {
        let mut p = [&preps[0][k]; C];
        for c in 1..C {
            p[c] = &preps[c][k];
        }
        p
    };
    // SAFETY: every row holds 8·batches blocks and every column `batches` prepared batches (caller); batch k
    // reads bytes 144k..144k+144 of each row.
    unsafe {
        let zero = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut pending = [[zero; C]; R];
        for r in 0..R {
            pending[r] = q2_tile_terms::<FMA, C>(rows[r], batch(0));
        }
        for k in 1..batches {
            let mut next = [[zero; C]; R];
            for r in 0..R {
                prefetch_ahead(rows[r].wrapping_add(8 * k * Q2_BYTES), 8 * Q2_BYTES);
                next[r] = q2_tile_terms::<FMA, C>(rows[r].add(8 * k * Q2_BYTES), batch(k));
            }
            for r in 0..R {
                for c in 0..C {
                    sumf[c][r] = q2_tile_chain::<FMA>(sumf[c][r], pending[r][c]);
                }
            }
            pending = next;
        }
        for r in 0..R {
            for c in 0..C {
                sumf[c][r] = q2_tile_chain::<FMA>(sumf[c][r], pending[r][c]);
            }
        }
    }
    sumf
}

/// `q2_tile_rows` against one column (the driver's `TileRows`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c,gfni")]
unsafe fn q2_tile_rows_1col<const FMA: bool, const R: usize>(
    rows: [*const u8; R],
    prep: &[Q2ColumnBatch],
) -> [f32; R] {
    // SAFETY: the caller's contract, passed on.
    unsafe { q2_tile_rows::<FMA, R, 1>(rows, [prep])[0] }
}

/// `q2_tile_rows` against two columns (the driver's `TileRows2`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c,gfni")]
unsafe fn q2_tile_rows_2col<const FMA: bool>(
    rows: [*const u8; 4],
    preps: [&[Q2ColumnBatch]; 2],
) -> [[f32; 4]; 2] {
    // SAFETY: the caller's contract, passed on.
    unsafe { q2_tile_rows::<FMA, 4, 2>(rows, preps) }
}

/// `W · Y` for Q2_0 weights against q8_0 columns, every element with the bits of `vec_dot_q2_0_q8_0::<FMA>`:
/// the shared tile driver (`tiles::mul_mat_q2_0_tiles`) over this file's column preparation and row kernel.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI/VBMI, GFNI, AVX2, FMA and F16C; `y.nb() >= 2 * x.nb()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c,gfni")]
pub unsafe fn mul_mat_q2_0_q8_0<const FMA: bool>(
    x: Rows<'_, BlockQ2_0>,
    y: Rows<'_, BlockQ8_0>,
    emit: Emit<'_>,
) {
    // SAFETY: the caller's contract covers both functions' features.
    unsafe {
        mul_mat_q2_0_tiles::<FMA>(
            x,
            y,
            emit,
            q2_prepare_column,
            q2_tile_rows_1col::<FMA, 4>,
            q2_tile_rows_1col::<FMA, 1>,
            Some(q2_tile_rows_2col::<FMA>),
        )
    }
}

/// Where `batch_block_scales` finds block `p`'s f16 scale (at byte `BYTES·p + D0_AT` of four blocks): the word
/// index into the pair of 64-byte loads at bytes 0 and `second`, in the form `vpermt2w` takes (≥ 32: the second).
/// Every scale must be word-aligned and inside one of the two loads, and the loads inside the four blocks.
const fn scale_words(bytes: usize, d0_at: usize) -> (usize, Align64<[u16; 32]>) {
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

/// A constant aligned to 64 bytes, so that loading it as one zmm never splits a cache line (the compiler gives a
/// `const` array only its element's alignment).
#[repr(C, align(64))]
pub struct Align64<T>(T);

/// The f16 scales of the four blocks at `xb` (block `p`'s at byte `BYTES·p + D0_AT`) as four floats: two 64-byte
/// loads inside the blocks, one `vpermt2w`, one conversion (four word inserts cost twice the operations).
#[inline(always)]
unsafe fn batch_block_scales<const BYTES: usize, const D0_AT: usize>(xb: *const u8) -> __m128 {
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
unsafe fn fork_block_batches<
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
unsafe fn fork_chain_step<const FMA: bool>(
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
unsafe fn fork_tile_rows<
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
unsafe fn ptq1_tile_rows<const FMA: bool, const R: usize, const C: usize>(
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
unsafe fn pq2_tile_rows<const FMA: bool, const R: usize, const C: usize>(
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
            vec_dot_ptq1_0_q8_0_from::<FMA>,
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
            vec_dot_pq2_0_q8_0_from::<FMA>,
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

/// `y_d · d0` (a q8_K block's f32 scale times a weight block's f16 one, `d0_bits`, as stock's scalar product)
/// in eight lanes: one vector multiply of two broadcast loads. Written out because the compiler turns a multiply
/// of two broadcasts back into a scalar multiply and a register broadcast, two operations, one of them on the
/// shuffle port. The bits are the scalar product's: one IEEE multiply either way.
///
/// # Safety
/// The CPU must have AVX-512 F and VL (the embedded broadcast).
#[inline]
#[target_feature(enable = "avx512f,avx512vl")]
unsafe fn scale_product(y_d: &[u8; 4], d0_bits: u16) -> __m256 {
    let v: __m256;
    // SAFETY: both operands are references to 4 readable bytes (`y_d`, the table entry); the caller's CPU has
    // AVX-512 F/VL; the instructions only read them and write `v`.
    unsafe {
        std::arch::asm!(
            "vbroadcastss {v}, dword ptr [{a}]",
            "vmulps {v}, {v}, dword ptr [{b}]{{1to8}}",
            a = in(reg) y_d,
            b = in(reg) &F16_TO_F32_TABLE[d0_bits as usize],
            v = out(ymm_reg) v,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    v
}

/// The haswell build's lane sums of two Q1_0 quarters as floats, quarter `2h` in the low eight lanes and
/// `2h + 1` in the high eight: the quants of the two q8_0 blocks (at `q0`, `q1`) side by side, each kept where
/// its bit (of the eight bytes at `bits`) is set and negated as a byte where it is clear (`vpsubb` wraps, so
/// −128 stays −128 as in stock's `(q ^ m) − m`), chosen by a mask blend straight from the bits; then `vpdpbusd`
/// against ones for the 4-byte lane sums.
#[inline(always)]
unsafe fn q1_quarter_pair_lanes(bits: *const u8, q0: *const u8, q1: *const u8) -> (__m256, __m256) {
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
unsafe fn scale_halves(lo: u16, hi: u16) -> __m512 {
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
struct Q1PairLanes {
    sums: [__m512; 4],
    scales: [__m512; 4],
}

/// `Q1PairLanes` of the pair at `xb`, `yb`.
///
/// # Safety
/// Two blocks at `xb` and their eight q8_0 blocks at `yb`; the calling kernel enables the features.
#[inline(always)]
unsafe fn q1_pair_lanes(xb: *const u8, yb: *const u8) -> Q1PairLanes {
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
unsafe fn q1_pair_chain(acc: __m256, xb: *const u8, lanes: &Q1PairLanes) -> __m256 {
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
        return q1_0::x64_chain_from(sumf, &x[done..], &y[4 * done..]);
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
/// (`dispatch::q1_tile_masked_loads`). Without `SECOND` only the low half is used and the second block is never
/// read.
///
/// # Safety
/// One block at `xb`, two where `SECOND`; the calling kernel enables the features.
// Column `j` indexes the columns and the accumulators at once.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn q1_row_pair_step<const C: usize, const SECOND: bool, const MASKED_LOADS: bool>(
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
unsafe fn q1_tile_rows<const R: usize, const C: usize, const MASKED_LOADS: bool>(
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

/// The tile kernels' accumulators (per row, per column) as the eight lanes per column and row.
#[inline(always)]
fn tile_lanes<const R: usize, const C: usize>(acc: [[__m256; C]; R]) -> [[[f32; 8]; R]; C] {
    let mut out = [[[0f32; 8]; R]; C];
    for (r, row) in acc.iter().enumerate() {
        for (j, &lanes) in row.iter().enumerate() {
            // SAFETY: `__m256` is eight `f32` (same size, every bit pattern valid); no instruction needed.
            out[j][r] = unsafe { std::mem::transmute::<__m256, [f32; 8]>(lanes) };
        }
    }
    out
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
const NIBBLE_BIT: [u16; 4] = [0xaaaa, 0xcccc, 0xf0f0, 0xff00];

/// The nibble tables of one column's first `nb` Q1_0 blocks (`4·nb` q8_0 blocks of `y`) into `out`.
///
/// # Safety
/// The CPU must have AVX-512 F; `y.len() >= 4 * nb`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
unsafe fn q1_nibble_tables(y: &[BlockQ8_0], nb: usize, out: &mut Vec<Q1NibbleTables>) {
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
unsafe fn q1_gather_block(block: *const u8, mask: __mmask16, offsets: __m512i) -> [__m512i; 5] {
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
unsafe fn q1_lookup_rows16(
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
unsafe fn mul_mat_q1_0_lookups(x: Rows<'_, BlockQ1_0>, y: &[BlockQ8_0], emit: Emit<'_>) -> bool {
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

/// `Σ c·q` and `Σ q` of one TQ2_0 block against its q8_K quants as eight i32 lanes each, lane `L` over the
/// elements with `e mod 32 ∈ [4L, 4L + 4)` (the lanes of stock's AVX2 kernel after its `madd`). Each 32-byte
/// half of the codes is broadcast to both halves of a 512-bit vector and one AND keeps field `l` in the low half
/// and field `l + 1` in the high half *in place* (`c·4^l`), which meet 64 contiguous quants; four `vpdpbusd`
/// cover the block, and the fields' powers of four come off at the end with exact arithmetic shifts (every
/// partial is a multiple of its `4^l`). No per-field shifts or GFNI: ANDs run on every vector pipe.
///
/// # Safety
/// 64 code bytes at `codes` and 256 quants at `q`; the calling kernel enables the features.
#[inline(always)]
unsafe fn tq2_block_sums(codes: *const u8, q: *const u8) -> (__m256i, __m256i) {
    // SAFETY (whole body): reads inside the block and the quants; features from the caller.
    unsafe {
        let ones = _mm256_set1_epi8(1);
        // acc[l]: field l in place (×4^l) against its 32 quants, both code halves.
        let mut acc = [_mm256_setzero_si256(); 4];
        let mut sq = _mm256_setzero_si256();
        for j in 0..2 {
            let c = _mm256_loadu_si256(codes.add(32 * j) as *const __m256i);
            for (l, a) in acc.iter_mut().enumerate() {
                let qv = _mm256_loadu_si256(q.add(128 * j + 32 * l) as *const __m256i);
                let f = _mm256_and_si256(c, _mm256_set1_epi8((3u8 << (2 * l)) as i8));
                *a = _mm256_dpbusd_epi32(*a, f, qv);
                sq = _mm256_dpbusd_epi32(sq, ones, qv);
            }
        }
        let cq = _mm256_add_epi32(
            _mm256_add_epi32(acc[0], _mm256_srai_epi32::<2>(acc[1])),
            _mm256_add_epi32(
                _mm256_srai_epi32::<4>(acc[2]),
                _mm256_srai_epi32::<6>(acc[3]),
            ),
        );
        (cq, sq)
    }
}

/// The haswell kernel's eight i32 lanes of one TQ2_0 block (`Σ c·q` minus the pair sums of `bsums`), in 512-bit
/// vectors: each 32-byte code half is broadcast to both halves of a vector (a load, no shuffle) and one
/// `vgf2p8affineqb` moves field 0 (or 2) of every byte to bits 0..1 in the low half and field 1 (or 3) in the
/// high half, which meet 64 contiguous quants: four affine steps and four `vpdpbusd` cover the block with every
/// field at weight 1, so no shifts (an AND per field in place and a shift per accumulator, the form before,
/// issued three operations more per block). The first accumulator starts from `−(bsums[2L] + bsums[2L + 1])`
/// (one `vpmaddwd`). `squares` accumulates `bsums[m]²` (saturating `vpdpwssds`) for the wrap test.
///
/// # Safety
/// 64 code bytes at `codes`, 256 quants at `q`, 16 bsums at `bsums`; the calling kernel enables the features.
#[inline(always)]
unsafe fn tq2_block_lanes_haswell(
    codes: *const u8,
    q: *const u8,
    bsums: *const u8,
    squares: &mut __m256i,
) -> __m256i {
    // SAFETY (whole body): reads inside the block, its quants and its bsums; features from the caller.
    unsafe {
        // `vgf2p8affineqb` matrices: field `l` of every byte to bits 0..1 (row of output bit `i` in byte
        // `7 − i`), field `l` in the low half and `l + 1` in the high half.
        let field = |l: u32| ((1i64 << (2 * l)) << 56) | ((1i64 << (2 * l + 1)) << 48);
        let m01 =
            _mm512_inserti64x4::<1>(_mm512_set1_epi64(field(0)), _mm256_set1_epi64x(field(1)));
        let m23 =
            _mm512_inserti64x4::<1>(_mm512_set1_epi64(field(2)), _mm256_set1_epi64x(field(3)));
        let c0 = _mm512_broadcast_i64x4(_mm256_loadu_si256(codes as *const __m256i));
        let c1 = _mm512_broadcast_i64x4(_mm256_loadu_si256(codes.add(32) as *const __m256i));
        let bs = _mm256_loadu_si256(bsums as *const __m256i);
        *squares = _mm256_dpwssds_epi32(*squares, bs, bs);
        let neg_pairs = _mm256_madd_epi16(bs, _mm256_set1_epi16(-1));
        let q_at = |k: usize| _mm512_loadu_si512(q.add(64 * k) as *const __m512i);
        let f = |c: __m512i, m: __m512i| _mm512_gf2p8affine_epi64_epi8::<0>(c, m);
        let mut a = _mm512_dpbusd_epi32(_mm512_zextsi256_si512(neg_pairs), f(c0, m01), q_at(0));
        a = _mm512_dpbusd_epi32(a, f(c1, m01), q_at(2));
        let mut b = _mm512_dpbusd_epi32(_mm512_setzero_si512(), f(c0, m23), q_at(1));
        b = _mm512_dpbusd_epi32(b, f(c1, m23), q_at(3));
        let s = _mm512_add_epi32(a, b);
        _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64::<1>(s))
    }
}

/// `ggml_vec_dot_tq2_0_q8_K` with the haswell build's order (`HASWELL = true`) or the x64 build's.
///
/// Haswell: `tq2_block_lanes_haswell` gives `Σ c·q` per lane minus the pair sums of `bsums`; stock subtracts
/// `bsums` in sixteen i16 lanes with wrap-around, which equals subtracting the pair sums whenever no i16 lane
/// can wrap: a lane's `Σ c·q` is at most 16·3·128 = 6144 in magnitude, so every `|bsums[m]| ≤ 26623` is
/// enough. The kernel sums the squares of the bsums per lane pair, saturating: a bsum beyond 26623 makes its
/// lane exceed 26623², and so does a long row of large ones (a 21,504-weight row at the quantizer's largest
/// possible |bsum| of 2048 at the earliest); either way the row is redone by the scalar model, which is always
/// exact. Then stock's float steps (convert, one FMA with `y.d·d0`, `scale_product`) on eight lanes and
/// `hsum_float_8`.
///
/// x64: `tq2_block_sums` (256-bit) per block, `sumi = Σ c·q − Σ q` (exact) and the generic chain
/// `sumf += (float)sumi · d`.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI/VBMI, GFNI, AVX2, FMA and F16C; `y.len() >= x.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c,gfni")]
pub unsafe fn vec_dot_tq2_0_q8_k<const HASWELL: bool>(x: &[BlockTQ2_0], y: &[BlockQ8K]) -> f32 {
    debug_assert!(y.len() >= x.len());
    // SAFETY (whole block): block `i` of x and y are inside the slices; this function enables the features.
    unsafe {
        let mut acc = _mm256_setzero_ps();
        let mut sumf = 0f32;
        let mut bsum_squares = _mm256_setzero_si256();
        for (xb, yb) in x.iter().zip(y) {
            prefetch_ahead(
                xb as *const BlockTQ2_0 as *const u8,
                size_of::<BlockTQ2_0>(),
            );
            if HASWELL {
                let lanes = tq2_block_lanes_haswell(
                    xb.qs.as_ptr(),
                    yb.qs.as_ptr() as *const u8,
                    yb.bsums.as_ptr(),
                    &mut bsum_squares,
                );
                let d = scale_product(&yb.d, xb.d.to_bits());
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), d, acc);
            } else {
                let (cq, sq) = tq2_block_sums(xb.qs.as_ptr(), yb.qs.as_ptr() as *const u8);
                sumf += hsum_epi32(_mm256_sub_epi32(cq, sq)) as f32 * tq2_0::block_scale(xb, yb);
            }
        }
        if !HASWELL {
            return sumf;
        }
        // A bsum beyond ±26623 somewhere in the row (never the quantizer's own) shows as a lane of squares
        // beyond 26623²: stock's i16 lanes may have wrapped, so the row is redone by the model, which wraps
        // exactly as stock does. Checked once per row, not per block: a per-block test and branch cost a fifth
        // of the kernel's time.
        let beyond = _mm256_cmpgt_epi32_mask(bsum_squares, _mm256_set1_epi32(26623 * 26623));
        if beyond != 0 {
            return tq2_0::vec_dot_tq2_0_q8_k_haswell_model(x, y);
        }
        hsum_float_8_ps(acc)
    }
}

/// A ternary format for the tile kernels (`tq_tile_rows4`): its block, where its f16 scale sits, the order its
/// prepared quants take, and its weights as four 64-byte vectors of small non-negative values (codes or
/// digits), vector `k` meeting the prepared column's `q[k]`.
trait TqTileFormat {
    const BYTES: usize;
    const D_OFFSET: usize;
    const QUANTS: TqQuants;
    /// # Safety
    /// A whole block at `x`; the calling kernel enables AVX-512 F/BW/VL/VBMI and GFNI.
    unsafe fn weight_vectors(x: *const u8) -> [__m512i; 4];
}

/// TQ2_0: the 64 code bytes as one vector, field 0 by an AND, fields 1–3 by one `vgf2p8affineqb` each (to bits
/// 0..1); byte `m` of field `k` is element `32k + m` (`m < 32`) or `128 + 32k + m − 32`.
struct Tq2Tiles;
impl TqTileFormat for Tq2Tiles {
    const BYTES: usize = size_of::<BlockTQ2_0>();
    const D_OFFSET: usize = 64;
    const QUANTS: TqQuants = TqQuants::CodeFields;
    #[inline(always)]
    unsafe fn weight_vectors(x: *const u8) -> [__m512i; 4] {
        // SAFETY: the caller's contract (64 code bytes at `x`).
        unsafe {
            // Matrices moving field `l` of every byte to bits 0..1 (output bit `i` from matrix byte `7 − i`).
            let field = |l: u32| {
                _mm512_set1_epi64(((1i64 << (2 * l)) << 56) | ((1i64 << (2 * l + 1)) << 48))
            };
            let c = _mm512_loadu_si512(x as *const __m512i);
            [
                _mm512_and_si512(c, _mm512_set1_epi8(3)),
                _mm512_gf2p8affine_epi64_epi8::<0>(c, field(1)),
                _mm512_gf2p8affine_epi64_epi8::<0>(c, field(2)),
                _mm512_gf2p8affine_epi64_epi8::<0>(c, field(3)),
            ]
        }
    }
}

/// TQ1_0: `vec_dot_tq1_0_q8_k`'s four digit groups (the packed bytes each lane reads from broadcast loads and
/// blends, `base3_digits_in_place`), group `k` meeting quants `64k..64k + 64`.
struct Tq1Tiles;
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

/// One block's sums of a row (its four weight vectors `f`) against a prepared column entry, before stock's lane
/// fold: dword `i` of the low half and dword `i` of the high half add to stock's lane `i` (the products over
/// `e mod 32 ∈ [4i, 4i + 4)` minus the lane's two bsums). One chain of four `vpdpbusd` from `neg_pairs`.
///
/// # Safety
/// The calling kernel enables AVX-512 F/BW/VNNI.
#[inline(always)]
unsafe fn tq_block_sums_against(f: &[__m512i; 4], e: &TqColumnBlock) -> __m512i {
    // SAFETY: the entry's arrays are 64-byte aligned (`TqColumnBlock` is `align(64)`, `q` at offset 0,
    // `neg_pairs` at 256), so the aligned loads are valid; features from the caller.
    unsafe {
        let q = |k: usize| _mm512_load_si512(e.q[k].as_ptr() as *const __m512i);
        let mut s =
            _mm512_zextsi256_si512(_mm256_load_si256(e.neg_pairs.as_ptr() as *const __m256i));
        for (k, &fk) in f.iter().enumerate() {
            s = _mm512_dpbusd_epi32(s, fk, q(k));
        }
        s
    }
}

/// The haswell-order lanes of four ternary rows (TQ2_0 or TQ1_0, `F`) against `C` prepared q8_K columns
/// (`tiles::TqColumnBlock`), block by block, the rows in two pairs: each row's weight vectors
/// (`F::weight_vectors`) meet the column's quants (laid out by `tiles::tq_prepare_column` so each is one
/// aligned load, shared by all rows) in one chain of four `vpdpbusd` (`tq_block_sums_against`); two
/// `vshufi64x2` and an add fold a pair's sums into stock's eight lanes for each row side by side, and stock's
/// float step (convert, `y.d·d0`, FMA) runs on both rows' lanes in one 512-bit vector, each lane its own chain
/// as in stock. Against the vec_dot kernels the quants are aligned loads made once for four rows (there, four
/// loads across cache lines per row and block) and the fold, convert and FMA are shared by two rows. Decode
/// (`C = 1`) and prefill (`C = 2`).
///
/// # Safety
/// The CPU must have the features below; each row pointer addresses `blocks` blocks of `F` and every column
/// holds `blocks` entries.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c,gfni")]
unsafe fn tq_tile_rows4<F: TqTileFormat, const C: usize>(
    blocks: usize,
    rows: [*const u8; 4],
    cols: [&[TqColumnBlock]; C],
) -> [[[f32; 8]; 4]; C] {
    debug_assert!(cols.iter().all(|c| c.len() == blocks));
    // acc[p][j]: rows 2p (low eight lanes) and 2p + 1 (high eight) against column j.
    let mut acc = [[_mm512_setzero_ps(); C]; 2];
    // `b` indexes every column and offsets every row pointer.
    #[allow(clippy::needless_range_loop)]
    for b in 0..blocks {
        let e: [&TqColumnBlock; C] = std::array::from_fn(|j| &cols[j][b]);
        for (p, acc) in acc.iter_mut().enumerate() {
            // SAFETY: block `b` of every row is inside what the caller guarantees; this function enables the
            // features.
            unsafe {
                let x = [rows[2 * p], rows[2 * p + 1]].map(|r| r.add(b * F::BYTES));
                let d0 = x.map(|xb| {
                    prefetch_ahead(xb, F::BYTES);
                    F16_TO_F32_TABLE[(xb.add(F::D_OFFSET) as *const u16).read_unaligned() as usize]
                });
                // (`vinsertf64x4` rather than AVX-512 DQ's `vinsertf32x8`: the same bits moved.)
                let d0 = _mm512_castpd_ps(_mm512_insertf64x4::<1>(
                    _mm512_castps_pd(_mm512_set1_ps(d0[0])),
                    _mm256_castps_pd(_mm256_set1_ps(d0[1])),
                ));
                let f = x.map(|xb| F::weight_vectors(xb));
                for j in 0..C {
                    let [s0, s1] = [0, 1].map(|i| tq_block_sums_against(&f[i], e[j]));
                    let lanes = _mm512_add_epi32(
                        _mm512_shuffle_i64x2::<0x44>(s0, s1),
                        _mm512_shuffle_i64x2::<0xee>(s0, s1),
                    );
                    let d = _mm512_mul_ps(_mm512_set1_ps(f32::from_le_bytes(e[j].d)), d0);
                    acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lanes), d, acc[j]);
                }
            }
        }
    }
    let mut out = [[[0f32; 8]; 4]; C];
    for (p, pair) in acc.iter().enumerate() {
        for (j, &v) in pair.iter().enumerate() {
            // SAFETY: `__m512` is sixteen `f32` (same size, every bit pattern valid); no instruction needed.
            let v = unsafe { std::mem::transmute::<__m512, [f32; 16]>(v) };
            out[j][2 * p].copy_from_slice(&v[..8]);
            out[j][2 * p + 1].copy_from_slice(&v[8..]);
        }
    }
    out
}

/// One ternary row against one prepared column (the driver's tail rows): `tq_tile_rows4`'s steps for a single
/// row, the fold by one extract.
///
/// # Safety
/// As `tq_tile_rows4`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c,gfni")]
unsafe fn tq_tile_rows1<F: TqTileFormat>(
    blocks: usize,
    rows: [*const u8; 1],
    cols: [&[TqColumnBlock]; 1],
) -> [[[f32; 8]; 1]; 1] {
    debug_assert!(cols[0].len() == blocks);
    let mut acc = _mm256_setzero_ps();
    for (b, e) in cols[0].iter().enumerate().take(blocks) {
        // SAFETY: block `b` of the row is inside what the caller guarantees; this function enables the
        // features.
        unsafe {
            let xb = rows[0].add(b * F::BYTES);
            let s = tq_block_sums_against(&F::weight_vectors(xb), e);
            let lanes =
                _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64::<1>(s));
            let d = scale_product(&e.d, (xb.add(F::D_OFFSET) as *const u16).read_unaligned());
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), d, acc);
        }
    }
    tile_lanes([[acc]])
}

/// The plain column preparation (`tiles::tq_prepare_column`) in `F`'s quant order, as a `LanePrepareColumn`.
///
/// # Safety
/// None beyond the signature (the preparation is safe Rust).
unsafe fn tq_prepare_column_for<F: TqTileFormat>(y: &[BlockQ8K], out: &mut Vec<TqColumnBlock>) {
    tq_prepare_column(y, F::QUANTS, out)
}

/// `W · Y` for ternary weights of `F` (block `B`) against q8_K columns, every element with the bits of
/// `vec_dot` (the format's kernel in the same order): the haswell order through the tile driver
/// (`tiles::mul_mat_tq_tiles`) and `tq_tile_rows4`/`1`; the x64 order (a scalar chain per block) one `vec_dot`
/// per pair.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI/VBMI, GFNI, AVX2, FMA and F16C; `y.nb() >= x.nb()`; `B` is `F`'s block.
#[inline(always)]
unsafe fn mul_mat_tq<F: TqTileFormat, B, const HASWELL: bool>(
    x: Rows<'_, B>,
    y: Rows<'_, BlockQ8K>,
    emit: Emit<'_>,
    vec_dot: impl Fn(&[B], &[BlockQ8K]) -> f32,
) {
    debug_assert_eq!(size_of::<B>(), F::BYTES);
    if HASWELL {
        // SAFETY: the caller's contract covers the kernels' features and sizes.
        unsafe {
            mul_mat_tq_tiles(
                x,
                y,
                emit,
                &LaneTileKernels {
                    prepare: tq_prepare_column_for::<F>,
                    rows4: tq_tile_rows4::<F, 1>,
                    rows1: tq_tile_rows1::<F>,
                    rows4x2: tq_tile_rows4::<F, 2>,
                },
                vec_dot,
            )
        }
    } else {
        mul_mat_by_pairs(|x, y| vec_dot(x, &y[..x.len()]), x, y, emit)
    }
}

/// `W · Y` for TQ2_0 weights against q8_K columns, every element with the bits of
/// `vec_dot_tq2_0_q8_k::<HASWELL>` (`mul_mat_tq`).
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI/VBMI, GFNI, AVX2, FMA and F16C; `y.nb() >= x.nb()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c,gfni")]
pub unsafe fn mul_mat_tq2_0_q8_k<const HASWELL: bool>(
    x: Rows<'_, BlockTQ2_0>,
    y: Rows<'_, BlockQ8K>,
    emit: Emit<'_>,
) {
    // SAFETY (both): the caller's contract covers the kernels' features and sizes.
    let vec_dot = |x: &[BlockTQ2_0], y: &[BlockQ8K]| unsafe { vec_dot_tq2_0_q8_k::<HASWELL>(x, y) };
    unsafe { mul_mat_tq::<Tq2Tiles, _, HASWELL>(x, y, emit, vec_dot) }
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
static PTQ1_PERM: [[u8; 64]; 2] = [PTQ1.byte_perm(0), PTQ1.byte_perm(64)];
static PTQ1_MULT_EVEN: [[u16; 32]; 2] = [
    PTQ1.word_mult::<32, false>(0),
    PTQ1.word_mult::<32, false>(64),
];
static PTQ1_MULT_ODD: [[u16; 32]; 2] = [
    PTQ1.word_mult::<32, true>(0),
    PTQ1.word_mult::<32, true>(64),
];
const PTQ1: Base3Layout = Base3Layout::Ptq1_0;

/// Odd-byte multipliers `3ⁿ` moved to the high byte, for the bytes loaded one byte further on
/// (`base3_digits_of_words`).
const fn in_high_byte(mut mult: [u16; 32]) -> [u16; 32] {
    let mut w = 0;
    while w < 32 {
        mult[w] <<= 8;
        w += 1;
    }
    mult
}

/// 64 base-3 digits (0..=2, one per byte) from packed bytes: `vpermb` puts packed byte `perm[p]` in byte `p`
/// (`base3_digits_in_place` when the bytes already sit where their digits go), `vpmullw` leaves `v = b·3ⁿ mod 256` in each word's high byte (`mult_even` holds `3ⁿ << 8` for the even byte;
/// `mult_odd` holds `3ⁿ` for the odd byte, multiplied with the even byte cleared), `vpmulhuw` by 3 (even) or 768
/// (odd) gives `(v·3) >> 8` in the even byte or the high byte, one `vpternlogd` merges the two. The digit formula
/// of PTQ1_0 and TQ1_0 alike.
#[inline(always)]
unsafe fn base3_digits(
    packed: __m512i,
    perm: &[u8; 64],
    mult_even: &[u16; 32],
    mult_odd: &[u16; 32],
) -> __m512i {
    // SAFETY (whole body): loads of the caller's 64-byte tables; features are enabled by the calling kernel.
    unsafe {
        let x = _mm512_permutexvar_epi8(_mm512_loadu_si512(perm.as_ptr() as *const _), packed);
        base3_digits_in_place(x, mult_even, mult_odd)
    }
}

/// `base3_digits` on bytes `x` already in their lanes.
#[inline(always)]
unsafe fn base3_digits_in_place(
    x: __m512i,
    mult_even: &[u16; 32],
    mult_odd: &[u16; 32],
) -> __m512i {
    // SAFETY: features are enabled by the calling kernel.
    unsafe {
        let odd_bytes = _mm512_and_si512(x, _mm512_set1_epi16(0xff00u16 as i16));
        base3_digits_of_words(x, odd_bytes, mult_even, mult_odd)
    }
}

/// The digits of each word's even byte (the low byte of `x`, times `mult_even = 3ⁿ << 8`) and odd byte
/// (`odd_words · mult_odd` must leave `v = b·3ⁿ mod 256` in the high byte: the odd bytes alone times `3ⁿ`, as
/// `base3_digits_in_place` gives them, or the bytes loaded one byte further on, whose low byte is the odd byte,
/// times `3ⁿ << 8` (`in_high_byte`), which saves the mask).
#[inline(always)]
unsafe fn base3_digits_of_words(
    x: __m512i,
    odd_words: __m512i,
    mult_even: &[u16; 32],
    mult_odd: &[u16; 32],
) -> __m512i {
    // SAFETY (whole body): loads of the caller's 64-byte tables; features are enabled by the calling kernel.
    unsafe {
        let high = _mm512_set1_epi16(0xff00u16 as i16);
        let even = _mm512_mulhi_epu16(
            _mm512_mullo_epi16(x, _mm512_loadu_si512(mult_even.as_ptr() as *const _)),
            _mm512_set1_epi16(3),
        );
        let odd = _mm512_mulhi_epu16(
            _mm512_mullo_epi16(odd_words, _mm512_loadu_si512(mult_odd.as_ptr() as *const _)),
            _mm512_set1_epi16(768),
        );
        // even | (odd & 0xff00): the odd digit is (v·3) >> 8 of the high byte's v, i.e. the high byte of v·3.
        _mm512_ternarylogic_epi32::<0xf8>(even, odd, high)
    }
}

/// The 64 trits (0..=2, one per byte, element order) of half `h` of the PTQ1_0 block at `b`: half 0 from a
/// broadcast of bytes 0..16, half 1 from one masked load of the 26 packed bytes (never past the block) through
/// `base3_digits`' permute.
#[inline(always)]
unsafe fn ptq1_half_trits(b: *const u8, h: usize) -> __m512i {
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

/// One IQ format's block decode for `vec_dot_iq_q8_k`: the weights' magnitudes, signs and scales, each
/// format from its own fields (`formats/iq*.rs`).
pub trait IqDecode: IqBlock {
    /// The 256 grid magnitudes (unsigned bytes) in element order, 64 per zmm. With `GATHER` IQ2_XS and IQ2_S
    /// fetch their 8-byte grid entries with `vpgatherdq` (fast on Intel, where the permute lookups are short of
    /// shuffle throughput; microcoded and slow on Zen 4), else they look up and expand the 16-bit codes.
    ///
    /// # Safety
    /// Only inside `vec_dot_iq_q8_k`, which enables the features these use (AVX-512 F/BW/VL/VBMI, GFNI).
    unsafe fn magnitudes<const GATHER: bool>(&self) -> [__m512i; 4];
    /// The block's signs (`SignBytes`): the four 64-bit masks read from the block where it stores the sign
    /// bytes, else the computed sign bytes.
    ///
    /// # Safety
    /// As `magnitudes`.
    unsafe fn sign_bytes(&self) -> SignBytes;
    /// The block's scales as the products take them (`BlockScales`): the 4-bit fields' word where the format
    /// keeps them in one (IQ2_XS, IQ2_S, IQ3_S), else the sixteen scale words.
    ///
    /// # Safety
    /// As `magnitudes`.
    unsafe fn block_scales(&self) -> BlockScales;
}

/// The grid entries of 32 indices held four to a qword in `words` (16 bits each), each one scalar load from
/// `table`, eight assembled per zmm: IQ2_S's lookup with `GGML_LOWBIT_IQ2S_PERMUTES=0`
/// (`dispatch::iq2_s_permutes`; the default on AMD until the two-block permutes measured faster on Zen 4),
/// where this beat the permute lookup of one block (`lookup_bytes` needs eight `vpermi2b` per code table
/// there); taking the indices out four at a time as qwords and splitting them with shifts costs fewer shuffle
/// micro-ops than a `vpextrw` per index. Each pair of entries is a `vmovq` and a `vpinsrq` from memory,
/// written out: the compiler's `vmovq` pair and `vpunpcklqdq` is one instruction more per pair (Zen 5,
/// 2026-12-02: IQ2_S 1.40–1.47× stock against 1.31–1.41×).
///
/// # Safety
/// Every index is inside `table`.
#[inline(always)]
unsafe fn entries_by_loads(words: &[u64; 8], table: *const i64) -> [__m512i; 4] {
    // SAFETY (whole body): indices inside `table` by the caller's contract; features are enabled by the calling
    // kernel.
    unsafe {
        let mut out = [_mm512_setzero_si512(); 4];
        for (c, o) in out.iter_mut().enumerate() {
            let (w0, w1) = (words[2 * c], words[2 * c + 1]);
            let e = |w: u64, k: u32| ((w >> (16 * k)) & 0xffff) as usize;
            let pair = |w: u64, k: u32| {
                let v: __m128i;
                // SAFETY: both indices are inside `table` (the caller's contract); the instructions only read
                // the two entries and write `v`; the calling kernel enables AVX.
                std::arch::asm!(
                    "vmovq {v}, qword ptr [{t} + {a} * 8]",
                    "vpinsrq {v}, {v}, qword ptr [{t} + {b} * 8], 1",
                    t = in(reg) table,
                    a = in(reg) e(w, k),
                    b = in(reg) e(w, k + 1),
                    v = out(xmm_reg) v,
                    options(pure, readonly, nostack, preserves_flags),
                );
                v
            };
            let v = _mm512_inserti32x4::<1>(_mm512_castsi128_si512(pair(w0, 0)), pair(w0, 2));
            let v = _mm512_inserti32x4::<2>(v, pair(w1, 0));
            *o = _mm512_inserti32x4::<3>(v, pair(w1, 2));
        }
        out
    }
}

/// Byte `i` of `idx` looked up in the byte table `table` of `128·SLICES` entries: one `vpermi2b` per 128
/// entries on the index's low 7 bits, the slice chosen by bit 7 (`vpmovb2m` of `idx`), then bit 8 (`high[0]`)
/// and bit 9 (`high[1]`) of the index, as k-masks, in a tree of blends.
///
/// # Safety
/// `table` holds `128·SLICES` bytes; features are enabled by the calling kernel.
#[inline(always)]
unsafe fn lookup_bytes<const SLICES: usize>(
    table: *const u8,
    idx: __m512i,
    high: [u64; 2],
) -> __m512i {
    // SAFETY (whole body): loads of 64-byte halves of the table's slices, inside it by the caller's contract.
    unsafe {
        // IQ2_S's tables (32 vectors, more than the registers): an opaque pointer, so the compiler loads them
        // inside the loop as the permutes' memory operands instead of hoisting all 32 loads to the kernel's
        // entry and spilling them to the stack there (a cost per row: rows of 16 blocks were no faster than
        // the loads until this; Ice Lake Xeon, 2026-12-03). The smaller tables fit and stay hoisted (measured
        // no faster with this).
        let table = if SLICES == 8 {
            std::hint::black_box(table)
        } else {
            table
        };
        let masks = [_mm512_movepi8_mask(idx), high[0], high[1]];
        let mut parts = [_mm512_setzero_si512(); SLICES];
        for (s, part) in parts.iter_mut().enumerate() {
            let lo = _mm512_loadu_si512(table.add(128 * s) as *const _);
            let hi = _mm512_loadu_si512(table.add(128 * s + 64) as *const _);
            *part = _mm512_permutex2var_epi8(lo, idx, hi);
        }
        let (mut n, mut level) = (SLICES, 0);
        while n > 1 {
            for i in 0..n / 2 {
                parts[i] = _mm512_mask_blend_epi8(masks[level], parts[2 * i], parts[2 * i + 1]);
            }
            n /= 2;
            level += 1;
        }
        parts[0]
    }
}

/// A `vpermb` control that packs the first `run` bytes of every `stride` bytes into the low bytes (the rest
/// zero): one shuffle operation where a down-converting `vpmov*` (`vpmovwb`, `vpmovqd`, …) is two on the Intel
/// cores measured.
const fn packed_bytes(stride: usize, run: usize) -> [u8; 64] {
    let mut t = [0u8; 64];
    let mut i = 0;
    while i < 64 / stride * run {
        t[i] = (i / run * stride + i % run) as u8;
        i += 1;
    }
    t
}

/// The low bytes of 32 words; the low dwords of 8 qwords; the low bytes of 16 dwords; of 8 qwords.
static WORD_LOW_BYTES: [u8; 64] = packed_bytes(2, 1);
static QWORD_LOW_DWORDS: [u8; 64] = packed_bytes(8, 4);
static DWORD_LOW_BYTES: [u8; 64] = packed_bytes(4, 1);
static QWORD_LOW_BYTES: [u8; 64] = packed_bytes(8, 1);

/// `vpermw` controls for the four 64-weight groups of a block: word `w` of group `c` takes word
/// `per_group·c + w / repeat` (each source word `repeat` times in a row).
const fn group_words(per_group: usize, repeat: usize) -> [[u16; 32]; 4] {
    let mut t = [[0u16; 32]; 4];
    let mut c = 0;
    while c < 4 {
        let mut w = 0;
        while w < 32 {
            t[c][w] = (per_group * c + w / repeat) as u16;
            w += 1;
        }
        c += 1;
    }
    t
}

/// IQ3 expansion, `vpermt2b` controls grouping one block's looked-up code bytes (the index vector holds entry `e`
/// in byte `e`): vector `h` holds in dword `k` the code of entry `32h + k` (word 0, group `2h`) and of entry
/// `32h + 16 + k` (word 1, group `2h + 1`), so two permutes serve the four groups.
static IQ3_GROUPED_CODE_PICK: Align64<[[u8; 64]; 2]> = Align64({
    let mut t = [[0u8; 64]; 2];
    let mut h = 0;
    while h < 2 {
        let mut k = 0;
        while k < 16 {
            let mut w = 0;
            while w < 2 {
                let e = 32 * h + 16 * w + k;
                t[h][4 * k + 2 * w] = e as u8;
                t[h][4 * k + 2 * w + 1] = (64 + e) as u8;
                w += 1;
            }
            k += 1;
        }
        h += 1;
    }
    t
});

/// `vpmultishiftqb` controls of the grouped expansion (`expand_codes`), group `c`: an entry of `width` bytes
/// (8 for IQ2, one per qword; 4 for IQ3, one per dword) has its code in word `c % (width / 2)` of that unit,
/// `bits` per level number; byte `j` of the unit takes the bits of level number `j`.
const fn grouped_shifts(width: usize, bits: usize) -> Align64<[[u8; 64]; 4]> {
    let mut t = [[0u8; 64]; 4];
    let mut c = 0;
    while c < 4 {
        let mut b = 0;
        while b < 64 {
            let unit_bit = 8 * width * ((b % 8) / width);
            t[c][b] = (unit_bit + 16 * (c % (width / 2)) + bits * (b % width)) as u8;
            b += 1;
        }
        c += 1;
    }
    Align64(t)
}
static IQ3_GROUPED_SHIFT: Align64<[[u8; 64]; 4]> = grouped_shifts(4, 3);

/// A `vpermb` table from level numbers (the low `bits` bits of a byte) to magnitudes.
const fn level_table(levels: &[u8], bits: u32) -> [u8; 64] {
    let mut t = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        let l = i & ((1 << bits) - 1);
        t[i] = if l < levels.len() { levels[l] } else { 0 };
        i += 1;
    }
    t
}

/// The `vgf2p8affineqb` matrix and constant that map a level number (the low `bits` bits of a byte, higher bits
/// ignored) to its magnitude, when the magnitudes are an affine image of their numbers over GF(2):
/// `m(n) = m(0) ⊕ Σ nⱼ·(m(2ʲ) ⊕ m(0))` for every level. Output bit `i` is the parity of the input ANDed with
/// matrix byte `7 − i`. `None` when the levels are not affine (IQ3_XXS: 62 where the rule gives 60).
const fn affine_levels(levels: &[u8], bits: u32) -> Option<(i64, u8)> {
    let b = levels[0];
    let mut matrix = 0u64;
    let mut j = 0;
    while j < bits {
        let image = levels[1 << j] ^ b;
        let mut i = 0;
        while i < 8 {
            matrix |= (((image >> i) & 1) as u64) << (8 * (7 - i) + j);
            i += 1;
        }
        j += 1;
    }
    let mut n = 0;
    while n < levels.len() {
        let mut v = b;
        let mut j = 0;
        while j < bits {
            if n >> j & 1 == 1 {
                v ^= levels[1 << j] ^ b;
            }
            j += 1;
        }
        if v != levels[n] {
            return None;
        }
        n += 1;
    }
    Some((matrix as i64, b))
}

/// IQ2's 8, 25, 43 are `8 ⊕ 17·n₀ ⊕ 35·n₁`; IQ3_S's 1, 3, …, 15 are `1 ⊕ 2n`.
const IQ2_AFFINE: (i64, u8) = affine_levels(&IQ2_LEVELS, 2).unwrap();
const IQ3S_AFFINE: (i64, u8) = affine_levels(&IQ3S_LEVELS, 3).unwrap();
const _: () = assert!(affine_levels(&IQ3XXS_LEVELS, 3).is_none());
static IQ3XXS_LEVEL_TABLE: [u8; 64] = level_table(&IQ3XXS_LEVELS, 3);

/// How a grid's level numbers become magnitudes: one `vgf2p8affineqb` (a vector ALU operation) with this
/// matrix and the constant `B` of `grid_magnitudes` where the levels are affine over GF(2), else one `vpermb`
/// from this table (a shuffle, and the shuffle pipes are what the IQ kernels are short of).
#[derive(Clone, Copy)]
enum Levels {
    Affine(i64),
    Table(&'static [u8; 64]),
}

/// A grid's code tables with their expansion (`CodeExpansion`: `IQ2_CHUNK_DWORDS_CODE_PICK` and
/// `IQ2_GROUPED_SHIFT` for IQ2_XXS's eight-byte entries, `IQ3_GROUPED_*` for the four-byte ones).
struct GridExpansion<const N: usize> {
    codes: &'static GridCodes<N>,
    expansion: CodeExpansion,
}

/// How a block's looked-up code bytes become its magnitudes (`expand_codes`): `picks[p]` groups the codes of
/// groups `groups_per_pick·p ..` (one `vpermt2b` each), `shifts[c]` takes group `c`'s level numbers from the
/// grouped vector (one `vpmultishiftqb`), `levels` maps them to magnitudes.
#[derive(Clone, Copy)]
struct CodeExpansion {
    picks: &'static [[u8; 64]],
    groups_per_pick: usize,
    shifts: &'static Align64<[[u8; 64]; 4]>,
    levels: Levels,
}

/// The IQ2 grids' expansion of block `blk` of a pair whose index vector has `picks`' layout (a single block is
/// block 0 of the layout it shares).
const fn iq2_expansion(picks: &'static Align64<[[u8; 64]; 2]>, blk: usize) -> CodeExpansion {
    CodeExpansion {
        picks: picks.0.split_at(blk).1.split_at(1).0,
        groups_per_pick: 4,
        shifts: &IQ2_GROUPED_SHIFT,
        levels: Levels::Affine(IQ2_AFFINE.0),
    }
}

static IQ2XXS_EXPANSION: GridExpansion<256> = GridExpansion {
    codes: &IQ2XXS_CODES,
    expansion: iq2_expansion(&IQ2_CHUNK_DWORDS_CODE_PICK, 0),
};
static IQ3XXS_EXPANSION: GridExpansion<256> = GridExpansion {
    codes: &IQ3XXS_CODES,
    expansion: CodeExpansion {
        picks: &IQ3_GROUPED_CODE_PICK.0,
        groups_per_pick: 2,
        shifts: &IQ3_GROUPED_SHIFT,
        levels: Levels::Table(&IQ3XXS_LEVEL_TABLE),
    },
};
static IQ3S_EXPANSION: GridExpansion<512> = GridExpansion {
    codes: &IQ3S_CODES,
    expansion: CodeExpansion {
        picks: &IQ3_GROUPED_CODE_PICK.0,
        groups_per_pick: 2,
        shifts: &IQ3_GROUPED_SHIFT,
        levels: Levels::Affine(IQ3S_AFFINE.0),
    },
};

/// The 256 magnitudes of a block from its grid indices: low bytes in `idx` (IQ2_XXS: its 32 where they lie in
/// the block; IQ3: all 64), bit 8 in `high` (IQ2_XS has its own form of these steps, in
/// `BlockIQ2XS::magnitudes`). The codes come from `lookup_bytes` (`SLICES = N / 128` `vpermi2b` per code
/// table); then per 64 weights one `vpermt2b` puts each entry's two code bytes into its qword (IQ2) or dword
/// (IQ3), one `vpmultishiftqb` each level number into its byte, and the level mapping (`Levels`,
/// affine constant `B`) makes it a magnitude.
#[inline(always)]
unsafe fn grid_magnitudes<const N: usize, const SLICES: usize, const B: i32>(
    grid: &GridExpansion<N>,
    idx: __m512i,
    high: [u64; 2],
) -> [__m512i; 4] {
    const { assert!(N == 128 * SLICES) };
    // SAFETY (whole body): the code tables hold 128·SLICES bytes each; the other loads are of static 64-byte
    // tables; features are enabled by the calling kernel.
    unsafe {
        let lo = lookup_bytes::<SLICES>(grid.codes.lo.as_ptr(), idx, high);
        let hi = lookup_bytes::<SLICES>(grid.codes.hi.as_ptr(), idx, high);
        expand_codes::<B>(grid.expansion, lo, hi)
    }
}

/// The 256 magnitudes of a block from its looked-up code bytes `lo` and `hi` (`CodeExpansion`): one `vpermt2b`
/// per pick groups the entries' codes so that each 64-weight group's lie one per qword (IQ2) or dword (IQ3) at
/// the same word, then per group one `vpmultishiftqb` puts each level number into its byte and the level mapping
/// (affine constant `B`) makes it a magnitude. Per block one or two permutes where a permute per group picked
/// each group's codes before (the shuffle port is what these kernels are short of).
#[inline(always)]
unsafe fn expand_codes<const B: i32>(e: CodeExpansion, lo: __m512i, hi: __m512i) -> [__m512i; 4] {
    // SAFETY (whole body): loads of static 64-byte controls; features are enabled by the calling kernel.
    unsafe {
        let mut grouped = [_mm512_setzero_si512(); 2];
        for (g, pick) in grouped.iter_mut().zip(e.picks) {
            *g = _mm512_permutex2var_epi8(lo, _mm512_loadu_si512(pick.as_ptr() as *const _), hi);
        }
        // A loop, not `array::from_fn`: a closure would not inherit the kernel's features.
        let mut out = [_mm512_setzero_si512(); 4];
        for (c, o) in out.iter_mut().enumerate() {
            let shift = _mm512_loadu_si512(e.shifts.0[c].as_ptr() as *const _);
            let numbers = _mm512_multishift_epi64_epi8(shift, grouped[c / e.groups_per_pick]);
            *o = level_magnitudes::<B>(e.levels, numbers);
        }
        out
    }
}

/// The magnitudes of the level numbers in the bytes of `numbers` (`Levels`; affine constant `B`).
#[inline(always)]
unsafe fn level_magnitudes<const B: i32>(levels: Levels, numbers: __m512i) -> __m512i {
    // SAFETY: a load of a static 64-byte table; features are enabled by the calling kernel.
    unsafe {
        match levels {
            Levels::Affine(a) => _mm512_gf2p8affine_epi64_epi8::<B>(numbers, _mm512_set1_epi64(a)),
            Levels::Table(t) => {
                _mm512_permutexvar_epi8(numbers, _mm512_loadu_si512(t.as_ptr() as *const _))
            }
        }
    }
}

/// A block's 32 sign bytes (bit `e % 8` of byte `e / 8` set: element `e` is negative), as the products take
/// them: 64 bits per 64 weights as a k-mask.
#[derive(Clone, Copy)]
pub enum SignBytes {
    /// The four masks, read from the block itself (IQ2_S, IQ3_S).
    Masks([u64; 4]),
    /// Computed from the block's sign fields (IQ2_XXS, IQ2_XS, IQ3_XXS), in a vector until the products store
    /// them and read them back as masks (`mask_at`).
    Computed(__m256i),
}

/// The four masks of 32 sign bytes at `p`.
///
/// # Safety
/// 32 readable bytes at `p`.
#[inline(always)]
unsafe fn block_sign_masks(p: *const u8) -> SignBytes {
    // SAFETY: the caller's contract.
    SignBytes::Masks(std::array::from_fn(|c| unsafe {
        (p.add(8 * c) as *const u64).read_unaligned()
    }))
}

/// The 64-bit k-mask at `p` by `kmovq k, m64`: a load, where the compiler's own route from a vector (`vmovq`,
/// `vpextrq`, `kmovq k, r64`) spends shuffle-port operations the IQ kernels are short of.
///
/// # Safety
/// 8 readable bytes at `p`; the CPU must have AVX-512 BW.
#[inline]
#[target_feature(enable = "avx512bw")]
unsafe fn mask_at(p: *const u8) -> u64 {
    let k: u64;
    // SAFETY: the caller's contract; the instruction only reads the 8 bytes and writes `k`.
    unsafe {
        std::arch::asm!(
            "kmovq {k}, qword ptr [{p}]",
            k = out(kreg) k,
            p = in(reg) p,
            options(pure, readonly, nostack, preserves_flags),
        )
    };
    k
}

/// `ksigns_iq2xs` of the 7-bit fields in the bytes of `fields` (bit 7 ignored): one `vpermi2b` over the
/// 128-byte table.
#[inline(always)]
unsafe fn ksigns(fields: __m512i) -> __m512i {
    // SAFETY: loads of the two 64-byte halves of a 128-byte static; features are enabled by the calling
    // kernel.
    unsafe {
        let lo = _mm512_loadu_si512(KSIGNS_IQ2XS.as_ptr() as *const _);
        let hi = _mm512_loadu_si512(KSIGNS_IQ2XS.as_ptr().add(64) as *const _);
        _mm512_permutex2var_epi8(lo, fields, hi)
    }
}

/// Eight per-chunk nibbles (`bytes`, one per byte) as the sixteen scale words `2·nibble + 1`, each chunk's twice.
#[inline(always)]
unsafe fn chunk_scales(bytes: __m128i) -> BlockScales {
    // SAFETY: register operations; features are enabled by the calling kernel.
    unsafe {
        let b = _mm_unpacklo_epi8(bytes, bytes);
        let scales = _mm_add_epi8(_mm_add_epi8(b, b), _mm_set1_epi8(1));
        BlockScales::Words(_mm512_castsi256_si512(_mm256_cvtepu8_epi16(scales)))
    }
}

/// `vpmultishiftqb` control that puts bits `2g..2g+8` of the IQ2_S `qh` qword in the high byte of word `g`.
const IQ2S_QH_SHIFT: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut g = 0;
    while g < 32 {
        t[2 * g + 1] = (2 * g) as u8;
        g += 1;
    }
    t
};

impl IqDecode for BlockIQ2S {
    #[inline(always)]
    unsafe fn magnitudes<const GATHER: bool>(&self) -> [__m512i; 4] {
        // SAFETY (whole body): the loads read `qs[0..32]` and `qh` of the block; the indices
        // `qs[g] | ((qh >> 2g) & 3) << 8` are 10 bits, inside the 1024-entry grid.
        unsafe {
            let low = _mm512_cvtepu8_epi16(_mm256_loadu_si256(self.qs.as_ptr() as *const __m256i));
            let qh = _mm512_set1_epi64(u64::from_le_bytes(self.qh) as i64);
            let ctrl = _mm512_loadu_si512(IQ2S_QH_SHIFT.as_ptr() as *const _);
            let high = _mm512_multishift_epi64_epi8(ctrl, qh);
            // (high & 0x0300) | low
            let idx = _mm512_ternarylogic_epi32::<0xf8>(low, high, _mm512_set1_epi16(0x0300));
            let mut words = [0u64; 8];
            _mm512_storeu_si512(words.as_mut_ptr() as *mut _, idx);
            if GATHER {
                let mut out = [_mm512_setzero_si512(); 4];
                for (c, o) in out.iter_mut().enumerate() {
                    let ix = _mm256_cvtepu16_epi32(_mm_loadu_si128(
                        words.as_ptr().add(2 * c) as *const _
                    ));
                    *o = _mm512_i32gather_epi64::<8>(ix, IQ2S_GRID.as_ptr() as *const i64);
                }
                return out;
            }
            entries_by_loads(&words, IQ2S_GRID.as_ptr() as *const i64)
        }
    }
    #[inline(always)]
    unsafe fn sign_bytes(&self) -> SignBytes {
        // SAFETY: `qs[32..64]` are the sign bytes.
        unsafe { block_sign_masks(self.qs[32..].as_ptr()) }
    }
    #[inline(always)]
    unsafe fn block_scales(&self) -> BlockScales {
        // SAFETY: an 8-byte load of `scales`; features are enabled by the calling kernel.
        unsafe {
            let q = _mm512_set1_epi64(u64::from_le_bytes(self.scales) as i64);
            BlockScales::Nibbles(q, &IQ2_NIBBLE_SCALE_SHIFT)
        }
    }
}

impl IqDecode for BlockIQ2XS {
    #[inline(always)]
    unsafe fn magnitudes<const GATHER: bool>(&self) -> [__m512i; 4] {
        // SAFETY (whole body): a 64-byte load of `qs`; indices `qs[g] & 511` are inside the 512-entry tables.
        unsafe {
            if GATHER {
                let mut out = [_mm512_setzero_si512(); 4];
                for (c, o) in out.iter_mut().enumerate() {
                    // Words 8c..8c+8 (bytes 16c..16c+16), their low nine bits as dword indices.
                    let w = _mm_loadu_si128(self.qs.as_ptr().add(16 * c) as *const __m128i);
                    let ix = _mm256_and_si256(_mm256_cvtepu16_epi32(w), _mm256_set1_epi32(511));
                    *o = _mm512_i32gather_epi64::<8>(ix, IQ2XS_GRID.as_ptr() as *const i64);
                }
                return out;
            }
            // The index words as they are: byte 2e holds index e's low eight bits (the odd bytes look up
            // entries nobody reads), bit 7 of byte 2e of `w >> 1` its bit 8. The two code tables' bytes for
            // entry e land in byte 2e of `lo` and `hi`, where the grouping permute of block `a` of an
            // interleaved pair takes them.
            let w = _mm512_loadu_si512(self.qs.as_ptr() as *const _);
            let high = [_mm512_movepi8_mask(_mm512_srli_epi16::<1>(w)), 0];
            let lo = lookup_bytes::<4>(IQ2XS_CODES.lo.as_ptr(), w, high);
            let hi = lookup_bytes::<4>(IQ2XS_CODES.hi.as_ptr(), w, high);
            const B: i32 = IQ2_AFFINE.1 as i32;
            expand_codes::<B>(iq2_expansion(&IQ2_INTERLEAVED_CODE_PICK, 0), lo, hi)
        }
    }
    #[inline(always)]
    unsafe fn sign_bytes(&self) -> SignBytes {
        // SAFETY: a 64-byte load of `qs`; the rest are register operations.
        unsafe {
            // The 7-bit sign field of each word (bits 9..15) into bytes 0..32 by one `vpermb` (a `vpmovwb` is
            // two shuffle operations).
            let w = _mm512_loadu_si512(self.qs.as_ptr() as *const _);
            let even = _mm512_loadu_si512(WORD_LOW_BYTES.as_ptr() as *const _);
            let fields = _mm512_permutexvar_epi8(even, _mm512_srli_epi16::<9>(w));
            SignBytes::Computed(_mm512_castsi512_si256(ksigns(fields)))
        }
    }
    #[inline(always)]
    unsafe fn block_scales(&self) -> BlockScales {
        // SAFETY: an 8-byte load of `scales`; features are enabled by the calling kernel.
        unsafe {
            let q = _mm512_set1_epi64(u64::from_le_bytes(self.scales) as i64);
            BlockScales::Nibbles(q, &IQ2_NIBBLE_SCALE_SHIFT)
        }
    }
}

/// The odd bytes of a zmm, as a k-mask.
const ODD_BYTES: u64 = 0xaaaa_aaaa_aaaa_aaaa;

/// Where a pair's index vector holds the indices: the byte of block `blk`'s entry `e` (0..32).
#[derive(Clone, Copy)]
enum PairLayout {
    /// Byte `2e + blk` (IQ2_XS: block `b`'s low bytes in `a`'s odd bytes).
    Interleaved,
    /// Byte `32·blk + e` (IQ2_S: the two blocks' 32 bytes one after the other).
    Halves,
    /// Byte `8·(e / 4) + e % 4 + 4·blk` (IQ2_XXS: each chunk's qword, `a`'s four in its low dword, `b`'s in its
    /// high one).
    ChunkDwords,
}

impl PairLayout {
    const fn at(self, blk: usize, e: usize) -> usize {
        match self {
            PairLayout::Interleaved => 2 * e + blk,
            PairLayout::Halves => 32 * blk + e,
            PairLayout::ChunkDwords => 8 * (e / 4) + e % 4 + 4 * blk,
        }
    }
}

/// `vpermi2b` controls taking a pair's looked-up code bytes (`lo` and `hi`, in the index vector's `layout`) to
/// each block's codes grouped for the expansion: word `w` of qword `k` holds the code of entry `8w + k`, so
/// qword `k` of every 64-weight group `w` is already in place and the expansion needs no word or byte pick
/// per group.
const fn iq2_grouped_code_picks(layout: PairLayout) -> Align64<[[u8; 64]; 2]> {
    let mut t = [[0u8; 64]; 2];
    let mut blk = 0;
    while blk < 2 {
        let mut k = 0;
        while k < 8 {
            let mut w = 0;
            while w < 4 {
                let at = layout.at(blk, 8 * w + k);
                t[blk][8 * k + 2 * w] = at as u8;
                t[blk][8 * k + 2 * w + 1] = (64 + at) as u8;
                w += 1;
            }
            k += 1;
        }
        blk += 1;
    }
    Align64(t)
}
static IQ2_INTERLEAVED_CODE_PICK: Align64<[[u8; 64]; 2]> =
    iq2_grouped_code_picks(PairLayout::Interleaved);
static IQ2_HALVES_CODE_PICK: Align64<[[u8; 64]; 2]> = iq2_grouped_code_picks(PairLayout::Halves);
static IQ2_CHUNK_DWORDS_CODE_PICK: Align64<[[u8; 64]; 2]> =
    iq2_grouped_code_picks(PairLayout::ChunkDwords);

/// IQ2: qword `k` holds entry `8c + k`'s code in word `c`, byte `j` takes the bits from `16c + 2j`.
static IQ2_GROUPED_SHIFT: Align64<[[u8; 64]; 4]> = grouped_shifts(8, 2);

/// The magnitudes of blocks `a` and `b` of a pair from their looked-up code bytes, laid out as `picks` expects
/// (`iq2_grouped_code_picks`): per block one `vpermt2b` groups its codes, then per 64 weights one
/// `vpmultishiftqb` and one `vgf2p8affineqb` (`expand_codes`). Against code words picked per 64 weights (a
/// `vpermw` each, after a shift and a blend per block) this takes two shuffle operations per block where ten
/// were (a `vpermi2b` occupies the Ice Lake Xeon's shuffle port two cycles, a `vpermw` one).
#[inline(always)]
unsafe fn iq2_pair_magnitudes(
    picks: &'static Align64<[[u8; 64]; 2]>,
    lo: __m512i,
    hi: __m512i,
) -> [[__m512i; 4]; 2] {
    const B: i32 = IQ2_AFFINE.1 as i32;
    // SAFETY: features are enabled by the calling kernel.
    unsafe {
        [
            expand_codes::<B>(iq2_expansion(picks, 0), lo, hi),
            expand_codes::<B>(iq2_expansion(picks, 1), lo, hi),
        ]
    }
}

/// `vpermb` control that gathers the even bytes into bytes 0..32 and the odd ones into 32..64.
static EVEN_THEN_ODD_BYTES: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut j = 0;
    while j < 64 {
        t[j] = if j < 32 { 2 * j } else { 2 * (j - 32) + 1 } as u8;
        j += 1;
    }
    t
};

impl IqPairDecode for BlockIQ2XS {
    /// Block `a`'s index words with block `b`'s low bytes in their odd bytes (which `magnitudes` wastes on
    /// lookups nobody reads): one lookup of both blocks' 64 indices (`lookup_bytes`, 512 entries: four
    /// `vpermi2b` per code table, the kernel's largest shuffle-port cost) where `magnitudes` does one per block.
    /// Byte `2e` holds `a`'s index `e`, byte `2e + 1` `b`'s (`PairLayout::Interleaved`), their bits 8 go to
    /// bit 7 of the same bytes by two shifts and a blend, and the codes come back interleaved the same way for
    /// `iq2_pair_magnitudes`. The sign fields are interleaved alike, looked up by one `ksigns` for both blocks
    /// and split by one `vpermb`.
    #[inline(always)]
    unsafe fn decode_pair(a: &Self, b: &Self) -> [IqDecoded; 2] {
        // SAFETY (whole body): 64-byte loads of the two blocks' `qs`; every index is 9 bits of a word, inside
        // the 512-entry tables; features are enabled by the calling kernel.
        unsafe {
            let wa = _mm512_loadu_si512(a.qs.as_ptr() as *const _);
            let wb = _mm512_loadu_si512(b.qs.as_ptr() as *const _);
            let idx = _mm512_mask_blend_epi8(ODD_BYTES, wa, _mm512_slli_epi16::<8>(wb));
            let bit8 = _mm512_mask_blend_epi8(
                ODD_BYTES,
                _mm512_srli_epi16::<1>(wa),
                _mm512_slli_epi16::<7>(wb),
            );
            let high = [_mm512_movepi8_mask(bit8), 0];
            let lo = lookup_bytes::<4>(IQ2XS_CODES.lo.as_ptr(), idx, high);
            let hi = lookup_bytes::<4>(IQ2XS_CODES.hi.as_ptr(), idx, high);
            let [ma, mb] = iq2_pair_magnitudes(&IQ2_INTERLEAVED_CODE_PICK, lo, hi);
            // Sign field (bits 9..15 of each word): `a`'s in the even bytes, `b`'s in the odd ones.
            let fields = _mm512_mask_blend_epi8(
                ODD_BYTES,
                _mm512_srli_epi16::<9>(wa),
                _mm512_srli_epi16::<1>(wb),
            );
            let split = _mm512_loadu_si512(EVEN_THEN_ODD_BYTES.as_ptr() as *const _);
            let signs = _mm512_permutexvar_epi8(split, ksigns(fields));
            decoded_pair(
                [a, b],
                [ma, mb],
                [
                    SignBytes::Computed(_mm512_castsi512_si256(signs)),
                    SignBytes::Computed(_mm512_extracti64x4_epi64::<1>(signs)),
                ],
            )
        }
    }
}

/// `vpmultishiftqb` control for IQ2_XXS: byte `l` (0..4) of each qword takes the sign field at bit `32 + 7l`.
const IQ2XXS_SIGN_SHIFT: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut b = 0;
    while b < 64 {
        if b % 8 < 4 {
            t[b] = (32 + 7 * (b % 8)) as u8;
        }
        b += 1;
    }
    t
};

/// `vpmultishiftqb` control for IQ3_XXS: byte `4h + l` of each qword takes sign field `l` (at bit `7l`) of the
/// qword's dword `h`, so the 32 bytes come out in chunk order (bit 7 of each, a bit of the next field or of the
/// scale, is ignored by `ksigns`).
const IQ3XXS_SIGN_SHIFT: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut b = 0;
    while b < 64 {
        t[b] = (32 * ((b % 8) / 4) + 7 * (b % 4)) as u8;
        b += 1;
    }
    t
};

impl IqDecode for BlockIQ2XXS {
    #[inline(always)]
    unsafe fn magnitudes<const GATHER: bool>(&self) -> [__m512i; 4] {
        // SAFETY (whole body): a 64-byte load of `qs`; the indices are bytes, inside the 256-entry tables.
        unsafe {
            let q = _mm512_loadu_si512(self.qs.as_ptr() as *const _);
            // No gathers here even with `GATHER`: the dispatcher gives IQ2_XXS its two-block lookups on
            // every CPU, which beat its gathers where gathers are fast (`dispatch.rs`); this single-block form
            // serves the pair kernel's last odd block.
            // The low dword of each chunk's qword holds its four index bytes, looked up in place (the other
            // bytes look up entries nobody reads; the grouping permute takes each entry's from its place, as
            // block `a`'s of a pair: `PairLayout::ChunkDwords`).
            grid_magnitudes::<256, 2, { IQ2_AFFINE.1 as i32 }>(&IQ2XXS_EXPANSION, q, [0, 0])
        }
    }
    #[inline(always)]
    unsafe fn sign_bytes(&self) -> SignBytes {
        // SAFETY: a 64-byte load of `qs` and a static control; the rest are register operations.
        unsafe {
            let q = _mm512_loadu_si512(self.qs.as_ptr() as *const _);
            let ctrl = _mm512_loadu_si512(IQ2XXS_SIGN_SHIFT.as_ptr() as *const _);
            let signs = ksigns(_mm512_multishift_epi64_epi8(ctrl, q));
            let pack = _mm512_loadu_si512(QWORD_LOW_DWORDS.as_ptr() as *const _);
            SignBytes::Computed(_mm512_castsi512_si256(_mm512_permutexvar_epi8(pack, signs)))
        }
    }
    #[inline(always)]
    unsafe fn block_scales(&self) -> BlockScales {
        // SAFETY: a 64-byte load of `qs`; the rest are register operations.
        unsafe {
            let q = _mm512_loadu_si512(self.qs.as_ptr() as *const _);
            let pack = _mm512_loadu_si512(QWORD_LOW_BYTES.as_ptr() as *const _);
            let nibbles = _mm512_permutexvar_epi8(pack, _mm512_srli_epi64::<60>(q));
            chunk_scales(_mm512_castsi512_si128(nibbles))
        }
    }
}

impl IqPairDecode for BlockIQ2S {
    /// Not ahead: a decoded pair carried across the loop, next to the tables, left the compiler spilling every
    /// iteration (Ice Lake Xeon: 11–19 % slower than decoding each pair where it is used, six paired runs).
    const DECODE_AHEAD: bool = false;
    /// Both blocks' 64 grid indices in one vector (`PairLayout::Halves`: `a`'s 32 low bytes, then `b`'s, by a
    /// load and an insert from memory; bits 8 and 9 as k-masks gathered from the two `qh` qwords by `pext`),
    /// looked up in the 1024-entry code tables (`lookup_bytes`: eight `vpermi2b` per table and a tree of seven
    /// blends) once for both blocks, where the loads take 32 scalar loads and their inserts per block; each
    /// block's codes grouped and expanded by `iq2_pair_magnitudes`. Signs and scales as `IqDecode`.
    #[inline(always)]
    unsafe fn decode_pair(a: &Self, b: &Self) -> [IqDecoded; 2] {
        // SAFETY (whole body): 32-byte loads of the two blocks' `qs[0..32]` and their `qh`; every index is 10
        // bits, inside the 1024-entry tables; features are enabled by the calling kernel.
        unsafe {
            let la = _mm512_castsi256_si512(_mm256_loadu_si256(a.qs.as_ptr() as *const __m256i));
            let lb = _mm256_loadu_si256(b.qs.as_ptr() as *const __m256i);
            let idx = _mm512_inserti64x4::<1>(la, lb);
            // Index e's bits 8 and 9 are bits 2e and 2e + 1 of `qh`.
            const EVEN: u64 = 0x5555_5555_5555_5555;
            let (qa, qb) = (u64::from_le_bytes(a.qh), u64::from_le_bytes(b.qh));
            use std::arch::x86_64::_pext_u64 as pext;
            let high = [
                pext(qa, EVEN) | pext(qb, EVEN) << 32,
                pext(qa, !EVEN) | pext(qb, !EVEN) << 32,
            ];
            let lo = lookup_bytes::<8>(IQ2S_CODES.lo.as_ptr(), idx, high);
            let hi = lookup_bytes::<8>(IQ2S_CODES.hi.as_ptr(), idx, high);
            decoded_pair(
                [a, b],
                iq2_pair_magnitudes(&IQ2_HALVES_CODE_PICK, lo, hi),
                [a.sign_bytes(), b.sign_bytes()],
            )
        }
    }
}

impl IqPairDecode for BlockIQ2XXS {
    /// Block `b`'s index dwords moved into the high dwords of `a`'s chunks (which hold `a`'s sign and scale
    /// fields, looked up for nothing by `magnitudes`): one lookup of both blocks' 64 indices (two `vpermi2b` per
    /// code table) where `magnitudes` does one per block; each block's grouping permute takes its codes from its
    /// own dwords (`PairLayout::ChunkDwords`, `iq2_pair_magnitudes`). Signs and scales as `IqDecode`.
    #[inline(always)]
    unsafe fn decode_pair(a: &Self, b: &Self) -> [IqDecoded; 2] {
        // SAFETY (whole body): 64-byte loads of the two blocks' `qs`; the indices are bytes, inside the 256-entry
        // tables; features are enabled by the calling kernel.
        unsafe {
            let qa = _mm512_loadu_si512(a.qs.as_ptr() as *const _);
            let qb = _mm512_loadu_si512(b.qs.as_ptr() as *const _);
            let idx = _mm512_mask_blend_epi32(0xaaaa, qa, _mm512_slli_epi64::<32>(qb));
            let lo = lookup_bytes::<2>(IQ2XXS_CODES.lo.as_ptr(), idx, [0, 0]);
            let hi = lookup_bytes::<2>(IQ2XXS_CODES.hi.as_ptr(), idx, [0, 0]);
            decoded_pair(
                [a, b],
                iq2_pair_magnitudes(&IQ2_CHUNK_DWORDS_CODE_PICK, lo, hi),
                [a.sign_bytes(), b.sign_bytes()],
            )
        }
    }
}

impl IqDecode for BlockIQ3XXS {
    #[inline(always)]
    unsafe fn magnitudes<const GATHER: bool>(&self) -> [__m512i; 4] {
        // SAFETY (whole body): a 64-byte load of `qs[0..64]`; the indices are bytes, inside the 256-entry
        // tables.
        unsafe {
            let idx = _mm512_loadu_si512(self.qs.as_ptr() as *const _);
            grid_magnitudes::<256, 2, 0>(&IQ3XXS_EXPANSION, idx, [0, 0])
        }
    }
    #[inline(always)]
    unsafe fn sign_bytes(&self) -> SignBytes {
        // SAFETY: a 32-byte load of `qs[64..96]` and a static control; the rest are register operations.
        unsafe {
            let w = _mm512_zextsi256_si512(_mm256_loadu_si256(
                self.qs.as_ptr().add(64) as *const __m256i
            ));
            let ctrl = _mm512_loadu_si512(IQ3XXS_SIGN_SHIFT.as_ptr() as *const _);
            let signs = ksigns(_mm512_multishift_epi64_epi8(ctrl, w));
            SignBytes::Computed(_mm512_castsi512_si256(signs))
        }
    }
    #[inline(always)]
    unsafe fn block_scales(&self) -> BlockScales {
        // SAFETY: a 32-byte load of `qs[64..96]`; the rest are register operations.
        unsafe {
            let w = _mm256_loadu_si256(self.qs.as_ptr().add(64) as *const __m256i);
            let pack = _mm256_loadu_si256(DWORD_LOW_BYTES.as_ptr() as *const _);
            let nibbles = _mm256_permutexvar_epi8(pack, _mm256_srli_epi32::<28>(w));
            chunk_scales(_mm256_castsi256_si128(nibbles))
        }
    }
}

impl IqDecode for BlockIQ3S {
    #[inline(always)]
    unsafe fn magnitudes<const GATHER: bool>(&self) -> [__m512i; 4] {
        // SAFETY (whole body): a 64-byte load of `qs`; the indices `qs[k] | bit k of qh << 8` are 9 bits,
        // inside the 512-entry tables.
        unsafe {
            let idx = _mm512_loadu_si512(self.qs.as_ptr() as *const _);
            let high = [u64::from_le_bytes(self.qh), 0];
            grid_magnitudes::<512, 4, { IQ3S_AFFINE.1 as i32 }>(&IQ3S_EXPANSION, idx, high)
        }
    }
    #[inline(always)]
    unsafe fn sign_bytes(&self) -> SignBytes {
        // SAFETY: `signs` holds 32 bytes.
        unsafe { block_sign_masks(self.signs.as_ptr()) }
    }
    #[inline(always)]
    unsafe fn block_scales(&self) -> BlockScales {
        // SAFETY: a 4-byte load of `scales`; features are enabled by the calling kernel.
        unsafe {
            let q = _mm512_set1_epi32(i32::from_le_bytes(self.scales));
            BlockScales::Nibbles(q, &IQ3S_NIBBLE_SCALE_SHIFT)
        }
    }
}

/// Scale words for 64-weight group `c` of a block: `vpermw` index into the sixteen scales as words; 128-bit
/// lane `k` of group `c` (elements `64c + 16k..+16`) takes scale `4c + k`.
const IQ_SCALE_PERM: [[u16; 32]; 4] = group_words(4, 8);

/// A block's scales for `iq_block_partials`.
#[derive(Clone, Copy)]
pub enum BlockScales {
    /// The sixteen scales `2n + 1` as words, each group's taken by one `vpermw` (`IQ_SCALE_PERM`).
    Words(__m512i),
    /// The scale fields `n` (4 bits each) of one word, broadcast to every qword, with the `vpmultishiftqb`
    /// controls that put each lane's field at bit 1 of every word of the lane; one `vpternlogd` then makes the
    /// words `2n + 1` (`(x & 0x1e) | 1`). Two operations per group, one of them a shuffle, where the words
    /// cost seven per block (two shuffles) and a shuffle per group.
    Nibbles(__m512i, &'static Align64<[[u8; 64]; 4]>),
}

/// `vpmultishiftqb` controls for `BlockScales::Nibbles`, group `c`: the low byte of each word of 128-bit lane `l`
/// takes the 8 bits from one below field `nibbles_per_group·c + l / lanes_per_field` (bit `4m − 1`, wrapping to
/// bit 63 for field 0), so the field lands at bit 1; the high bytes are cleared by the `vpternlogd`.
const fn nibble_scale_shift(nibbles_per_group: usize, lanes_per_field: usize) -> [[u8; 64]; 4] {
    let mut t = [[0u8; 64]; 4];
    let mut c = 0;
    while c < 4 {
        let mut b = 0;
        while b < 64 {
            let m = nibbles_per_group * c + (b / 16) / lanes_per_field;
            t[c][b] = if b % 2 == 0 {
                ((4 * m + 63) % 64) as u8
            } else {
                0
            };
            b += 1;
        }
        c += 1;
    }
    t
}

/// IQ2_XS and IQ2_S: sixteen fields, one per 16 elements; IQ3_S: eight, one per 32 (its 4-byte word is broadcast
/// as dwords, so each qword holds it twice and bit 63 is the field 7's top bit, cleared like the rest).
static IQ2_NIBBLE_SCALE_SHIFT: Align64<[[u8; 64]; 4]> = Align64(nibble_scale_shift(4, 1));
static IQ3S_NIBBLE_SCALE_SHIFT: Align64<[[u8; 64]; 4]> = Align64(nibble_scale_shift(2, 2));

/// One IQ block decoded: its scales, its four groups' magnitude bytes and sign masks.
#[derive(Clone, Copy)]
pub(crate) struct IqDecoded {
    scales: BlockScales,
    magnitudes: [__m512i; 4],
    signs: SignBytes,
}

/// Decodes block `b` (`IqDecode`) for `iq_block_partials`, so the decode of the next block can run ahead while
/// this one's products are computed.
#[inline(always)]
unsafe fn iq_decode_block<B: IqDecode, const GATHER: bool>(b: &B) -> IqDecoded {
    // SAFETY (whole body): the decoder's loads are inside the block or static tables; features are enabled by
    // the calling kernel.
    unsafe {
        IqDecoded {
            scales: b.block_scales(),
            magnitudes: b.magnitudes::<GATHER>(),
            signs: b.sign_bytes(),
        }
    }
}

/// Blocks `a` and `b` decoded from their magnitudes and signs, with each block's scales.
#[inline(always)]
unsafe fn decoded_pair<B: IqDecode>(
    [a, b]: [&B; 2],
    [ma, mb]: [[__m512i; 4]; 2],
    [sa, sb]: [SignBytes; 2],
) -> [IqDecoded; 2] {
    // SAFETY: the decoders read their own blocks; features are enabled by the calling kernel.
    unsafe {
        [
            IqDecoded {
                scales: a.block_scales(),
                magnitudes: ma,
                signs: sa,
            },
            IqDecoded {
                scales: b.block_scales(),
                magnitudes: mb,
                signs: sb,
            },
        ]
    }
}

/// Formats that decode two blocks at once for `vec_dot_iq_pairs_q8_k`, sharing the lookups' shuffle work.
pub(crate) trait IqPairDecode: IqDecode {
    /// Blocks `a` and `b` decoded, as `iq_decode_block` without gathers decodes each.
    ///
    /// # Safety
    /// Only inside `vec_dot_iq_pairs_q8_k`, which enables the features these use.
    unsafe fn decode_pair(a: &Self, b: &Self) -> [IqDecoded; 2];
    /// Whether pair `k + 1` is decoded before pair `k`'s products (so its lookups overlap them).
    const DECODE_AHEAD: bool = false;
}

/// The sixteen i32 partials of one IQ block against its q8_K block (lanes 0..8 the even 32-weight chunks,
/// 8..16 the odd ones; lanes `m` and `m + 8` together are the haswell kernels' lane `m`), the sign applied to
/// the q8 byte under a k-mask with wrap-around (as stock's `sign_epi8`). Without `HASWELL`, `negated_min`
/// collects the elements where a −128 was negated (the x64 build does not wrap there).
#[inline(always)]
unsafe fn iq_block_partials<const HASWELL: bool>(
    d: &IqDecoded,
    q: &BlockQ8K,
    negated_min: &mut u64,
) -> __m512i {
    // SAFETY (whole body): every load is inside `q` (292 bytes) or a static table; features are enabled by the
    // calling kernel.
    unsafe {
        let q8p = q.qs.as_ptr() as *const u8;
        let mut acc = _mm512_setzero_si512();
        let mut scratch = [0u8; 32];
        if let SignBytes::Computed(v) = d.signs {
            _mm256_storeu_si256(scratch.as_mut_ptr() as *mut _, v);
        }
        for (c, &magnitudes) in d.magnitudes.iter().enumerate() {
            let neg = match d.signs {
                SignBytes::Masks(m) => m[c],
                SignBytes::Computed(_) => mask_at(scratch.as_ptr().add(8 * c)),
            };
            let q8 = _mm512_loadu_si512(q8p.add(64 * c) as *const _);
            if !HASWELL {
                *negated_min |= _mm512_mask_cmpeq_epi8_mask(neg, q8, _mm512_set1_epi8(-128));
            }
            let q8s = _mm512_mask_sub_epi8(q8, neg, _mm512_setzero_si512(), q8);
            let pairs = _mm512_maddubs_epi16(magnitudes, q8s);
            let scale = match d.scales {
                BlockScales::Words(s16) => {
                    let perm = _mm512_loadu_si512(IQ_SCALE_PERM[c].as_ptr() as *const _);
                    _mm512_permutexvar_epi16(perm, s16)
                }
                BlockScales::Nibbles(q, shift) => {
                    let ctrl = _mm512_loadu_si512(shift.0[c].as_ptr() as *const _);
                    _mm512_ternarylogic_epi32::<0xea>(
                        _mm512_multishift_epi64_epi8(ctrl, q),
                        _mm512_set1_epi16(0x1e),
                        _mm512_set1_epi16(1),
                    )
                }
            };
            acc = dpwssd_in_place(acc, pairs, scale);
        }
        acc
    }
}

/// `vpdpwssd` as one instruction: LLVM splits a chain of `_mm512_dpwssd_epi32` into `vpmaddwd` and `vpaddd`
/// pairs to shorten its latency (six of a pair's eight in the IQ kernels), one 512-bit operation more each,
/// where these kernels are short of vector ports rather than of parallel work.
///
/// # Safety
/// The CPU must have AVX-512 VNNI.
#[inline]
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn dpwssd_in_place(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    let mut acc = acc;
    // SAFETY: a register operation on `acc`, `a` and `b`; the caller's contract gives the feature.
    unsafe {
        std::arch::asm!(
            "vpdpwssd {acc}, {a}, {b}",
            acc = inout(zmm_reg) acc,
            a = in(zmm_reg) a,
            b = in(zmm_reg) b,
            options(pure, nomem, nostack, preserves_flags),
        )
    };
    acc
}

/// `ggml_vec_dot_*_q8_K` of an IQ format in the haswell build's eight-lane order (`HASWELL`) or the x64
/// build's chain: per block the format's decode (`IqDecode`, issued a block ahead of its products so the
/// lookups overlap the previous block's arithmetic), the signs as a k-mask on the q8 bytes, `vpmaddubsw` and
/// `vpdpwssd` against the scales. The x64 order's rare negated −128 (never written by the quantizer) sends the
/// row to the model.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI/VBMI, AVX2, FMA and F16C; `y.len() >= x.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c,gfni")]
pub unsafe fn vec_dot_iq_q8_k<B: IqDecode, const HASWELL: bool, const GATHER: bool>(
    x: &[B],
    y: &[BlockQ8K],
) -> f32 {
    debug_assert!(y.len() >= x.len());
    // SAFETY (whole block): block `i` of x and y are inside the slices; this function enables the features.
    unsafe {
        let mut sums = IqRowSums::new();
        if let Some(first) = x.first() {
            let mut next = iq_decode_block::<B, GATHER>(first);
            for (i, (xb, yb)) in x.iter().zip(y).enumerate() {
                prefetch_ahead(xb as *const B as *const u8, size_of::<B>());
                let cur = next;
                if let Some(after) = x.get(i + 1) {
                    next = iq_decode_block::<B, GATHER>(after);
                }
                sums.block::<B, HASWELL>(&cur, xb, yb);
            }
        }
        iq_row_result::<B, HASWELL>(sums.acc, sums.sumf, sums.negated_min != 0, x, y)
    }
}

/// `vec_dot_iq_q8_k` without gathers for a format that decodes two blocks at once (`IqPairDecode`): pair
/// `k + 1` is decoded while pair `k`'s products are computed (where `DECODE_AHEAD`); an odd last block is
/// decoded alone. The products and float steps are `vec_dot_iq_q8_k`'s, block by block in order, so the bits
/// are the same.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI/VBMI, AVX2, FMA, F16C, GFNI and BMI2 (IQ2_S's `pext`);
/// `y.len() >= x.len()`.
#[target_feature(
    enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c,gfni,bmi2"
)]
pub(crate) unsafe fn vec_dot_iq_pairs_q8_k<B: IqPairDecode, const HASWELL: bool>(
    x: &[B],
    y: &[BlockQ8K],
) -> f32 {
    debug_assert!(y.len() >= x.len());
    // SAFETY (whole block): blocks `2k`, `2k + 1` and the odd last one of x and y are inside the slices; this
    // function enables the features.
    unsafe {
        let mut sums = IqRowSums::new();
        let (pairs, last) = x.as_chunks::<2>();
        if !B::DECODE_AHEAD {
            for (k, pair) in pairs.iter().enumerate() {
                prefetch_ahead(pair.as_ptr() as *const u8, 2 * size_of::<B>());
                let cur = B::decode_pair(&pair[0], &pair[1]);
                sums.block::<B, HASWELL>(&cur[0], &pair[0], &y[2 * k]);
                sums.block::<B, HASWELL>(&cur[1], &pair[1], &y[2 * k + 1]);
            }
        } else if let Some(first) = pairs.first() {
            let mut next = B::decode_pair(&first[0], &first[1]);
            for (k, pair) in pairs.iter().enumerate() {
                prefetch_ahead(pair.as_ptr() as *const u8, 2 * size_of::<B>());
                let cur = next;
                if let Some(after) = pairs.get(k + 1) {
                    next = B::decode_pair(&after[0], &after[1]);
                }
                sums.block::<B, HASWELL>(&cur[0], &pair[0], &y[2 * k]);
                sums.block::<B, HASWELL>(&cur[1], &pair[1], &y[2 * k + 1]);
            }
        }
        if let Some(xb) = last.first() {
            let i = x.len() - 1;
            sums.block::<B, HASWELL>(&iq_decode_block::<B, false>(xb), xb, &y[i]);
        }
        iq_row_result::<B, HASWELL>(sums.acc, sums.sumf, sums.negated_min != 0, x, y)
    }
}

/// The running sums of an IQ row: the haswell order's eight float lanes (or the x64 chain's `acc`/`sumf`)
/// and the x64 order's record of negated −128s.
struct IqRowSums {
    acc: __m256,
    sumf: f32,
    negated_min: u64,
}

impl IqRowSums {
    /// Zero sums.
    ///
    /// # Safety
    /// Only inside the IQ kernels, which enable AVX.
    #[inline(always)]
    unsafe fn new() -> IqRowSums {
        IqRowSums {
            // SAFETY: the caller's contract.
            acc: unsafe { _mm256_setzero_ps() },
            sumf: 0.0,
            negated_min: 0,
        }
    }

    /// One decoded block's products (`iq_block_partials`) and float step: lanes `m` and `m + 8` together are
    /// stock haswell's lane `m`.
    #[inline(always)]
    unsafe fn block<B: IqBlock, const HASWELL: bool>(
        &mut self,
        d: &IqDecoded,
        xb: &B,
        yb: &BlockQ8K,
    ) {
        // SAFETY: register operations and the products' loads inside `yb`; features are enabled by the calling
        // kernel.
        unsafe {
            let p = iq_block_partials::<HASWELL>(d, yb, &mut self.negated_min);
            let lanes =
                _mm256_add_epi32(_mm512_castsi512_si256(p), _mm512_extracti64x4_epi64::<1>(p));
            if HASWELL {
                let d = scale_product(&yb.d, xb.d_bits());
                self.acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes), self.acc);
            } else {
                iq_block_float_step::<false>(
                    &mut self.acc,
                    &mut self.sumf,
                    iq::block_scale(xb, yb),
                    lanes,
                );
            }
        }
    }
}

/// `quantize_row_q8_K` (ggml-base's reference C, the same in both builds) sixteen floats at a time: the largest
/// magnitude by `vmaxps` with NaN lanes dropped (the C's `fabsf(x) > amax` never takes a NaN), its first
/// position by an equality mask (the C keeps the first of equal magnitudes); each quant is `iscale·x` and
/// `+ 1.5·2^23` as two roundings (ggml's `nearest_int`), the low mantissa bits minus 2^22, `min(127, ·)` and
/// truncation to `int8_t` (`vpmovdb`), exactly as the C's conversions do also for huge or non-finite products.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI/VBMI, AVX2, FMA and F16C; `y.len() >= x.len() / 256`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub unsafe fn quantize_row_q8_k(x: &[f32], y: &mut [BlockQ8K]) {
    for (xb, out) in x.chunks_exact(256).zip(y.iter_mut()) {
        // SAFETY (whole block): sixteen loads of sixteen floats inside the 256 of `xb`; stores of sixteen bytes
        // inside `out.qs`; this function enables the features.
        unsafe {
            let p = xb.as_ptr();
            let mut m = _mm512_setzero_ps();
            for k in 0..16 {
                // `vmaxps` returns its second operand when either is NaN: NaN magnitudes are skipped.
                m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(p.add(16 * k))), m);
            }
            let amax = _mm512_reduce_max_ps(m);
            if amax == 0.0 {
                // Stock zeroes the quants and the scale and leaves the bsums as they were.
                out.d = [0; 4];
                out.qs = [0; 256];
                continue;
            }
            let target = _mm512_set1_ps(amax);
            let mut first = 0;
            for k in 0..16 {
                let abs = _mm512_abs_ps(_mm512_loadu_ps(p.add(16 * k)));
                let hit = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(abs, target);
                if hit != 0 {
                    first = 16 * k + hit.trailing_zeros() as usize;
                    break;
                }
            }
            let iscale = -127.0f32 / xb[first];
            let scale = _mm512_set1_ps(iscale);
            let magic = _mm512_set1_ps(12_582_912.0);
            for k in 0..16 {
                let v = _mm512_add_ps(_mm512_mul_ps(scale, _mm512_loadu_ps(p.add(16 * k))), magic);
                let i = _mm512_sub_epi32(
                    _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x007f_ffff)),
                    _mm512_set1_epi32(0x0040_0000),
                );
                let q = _mm512_cvtepi32_epi8(_mm512_min_epi32(i, _mm512_set1_epi32(127)));
                _mm_storeu_si128(out.qs.as_mut_ptr().add(16 * k) as *mut __m128i, q);
                let sum = _mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(q));
                out.set_bsum(k, sum as i16);
            }
            out.d = (1.0f32 / iscale).to_le_bytes();
        }
    }
}

/// TQ1_0's digit tables per 64-weight group (`Base3Layout`, elements of `qs ++ qh`).
static TQ1_PERM: [[u8; 64]; 4] = [
    TQ1.byte_perm(0),
    TQ1.byte_perm(64),
    TQ1.byte_perm(128),
    TQ1.byte_perm(192),
];
static TQ1_MULT_EVEN: [[u16; 32]; 4] = [
    TQ1.word_mult::<32, false>(0),
    TQ1.word_mult::<32, false>(64),
    TQ1.word_mult::<32, false>(128),
    TQ1.word_mult::<32, false>(192),
];
static TQ1_MULT_ODD: [[u16; 32]; 4] = [
    TQ1.word_mult::<32, true>(0),
    TQ1.word_mult::<32, true>(64),
    TQ1.word_mult::<32, true>(128),
    TQ1.word_mult::<32, true>(192),
];
const TQ1: Base3Layout = Base3Layout::Tq1_0;

/// Groups 0 and 1's odd-byte multipliers for their shifted broadcast (`TQ1_MULT_ODD` in the high byte).
static TQ1_MULT_ODD_HIGH: [[u16; 32]; 2] =
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
unsafe fn tq1_digit_groups(x: *const u8) -> [__m512i; 4] {
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
            return tq1_0::vec_dot_tq1_0_q8_k_haswell_model(x, y);
        }
        hsum_float_8_ps(acc)
    }
}
