//! AVX-512 kernels (F, BW, VL, VNNI, VBMI; GFNI for the tiles), one file per format with the same function
//! names as `avx2/`: `q2_0.rs`, `q1_0.rs`, `fork.rs` (PQ2_0, PTQ1_0), `tq2_0.rs`, `tq1_0.rs`, `iq.rs` (the five
//! IQ formats through one kernel over a per-format decoder, `docs/iq.md`) and `q8.rs` (the activation
//! quantizers). This file holds what several formats share: the 64-weight group sums and q8_0 scale collection
//! of Q2_0 and the fork, the base-3 digit decode of PTQ1_0 and TQ1_0, the ternary tile driver of TQ1_0 and
//! TQ2_0, and the q8_K scale product.

mod fork;
mod iq;
mod q1_0;
mod q2_0;
mod q8;
mod tq1_0;
mod tq2_0;

pub use self::fork::*;
pub use self::iq::*;
pub use self::q1_0::*;
pub use self::q2_0::*;
pub use self::q8::*;
pub use self::tq1_0::*;
pub use self::tq2_0::*;

use std::arch::x86_64::*;

use crate::formats;

use super::{
    hsum_epi32, hsum_float_8_ps, iq_block_float_step, iq_row_result, pipelined, pipelined_one_site,
    prefetch_ahead, Base3Layout,
};
use crate::formats::iq::IqBlock;
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
use crate::formats::q1_0::BlockQ1_0;
use crate::formats::q2_0::{vec_dot_q2_0_q8_0_from, BlockQ2_0};
use crate::formats::q8_0::BlockQ8_0;
use crate::formats::q8_k::BlockQ8K;
use crate::formats::tq1_0::BlockTQ1_0;
use crate::formats::tq2_0::BlockTQ2_0;
use crate::fp16::F16_TO_F32_TABLE;
use crate::tiles::{
    mul_mat_by_pairs, mul_mat_fork_tiles, mul_mat_q1_0_tiles, mul_mat_q2_0_tiles, mul_mat_tq_tiles,
    tq_prepare_column, Emit, ForkColumnBatch, LaneTileKernels, Q1ColumnPair, Q2ColumnBatch,
    Q2LaneColumnBlock, Rows, TqColumnBlock, TqQuants,
};

const Q2_BYTES: usize = 18;
const Q8_BYTES: usize = 34;
const PQ2_BYTES: usize = 34;
const PTQ1_BYTES: usize = 28;
/// PTQ1_0's scale comes last: `qs[24]`, `qh[2]`, then `d`.
const PTQ1_D0_AT: usize = 26;
const _: () = assert!(std::mem::offset_of!(BlockPTQ1_0, d) == PTQ1_D0_AT);
const Q1_BYTES: usize = 18;

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
/// vector operations than the permutes (`dispatch::FORMS_BY_CPU`, `q8_scale_gather`).
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

/// A constant aligned to 64 bytes, so that loading it as one zmm never splits a cache line (the compiler gives a
/// `const` array only its element's alignment).
#[repr(C, align(64))]
pub struct Align64<T>(T);

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
