//! Whole matrix products ("tiles"): every output element of `W · Y` with exactly the bits of the per-pair
//! `vec_dot` of the stock build being matched.
//!
//! Through ggml's `vec_dot` ABI each call sees one (row, column) pair, so the activation is re-read and
//! re-arranged for every row and each call waits on its own sequential float chain. A tile kernel instead
//! prepares each activation column once (`avx512/q2_0.rs`: the q8_0 quants laid out to match the packed weight
//! codes, the q8 scales as floats, the per-block quant sums) and runs several rows against it with their float
//! chains interleaved. Each element still keeps its own chain, in block order from `0`, so the bits are those of
//! `vec_dot` (`formats.md` §5); tests compare every element with `to_bits()`.
//!
//! Q1_0 (haswell order) has its own, simpler driver (`mul_mat_q1_0_tiles`): its stock chain is eight float lanes
//! per element with no block batches, and its prepared column turns each row's sign application into one
//! `vpdpbusd` (`Q1ColumnPair`). The PrismML fork's PQ2_0 and PTQ1_0 share a third (`mul_mat_fork_tiles`), whose
//! prepared column is the vec_dot driver's view of the activation made once (`ForkColumnBatch`).
//!
//! Used by the C API (`ggml_lowbit_mul_mat_{q2_0,q1_0,pq2_0,ptq1_0}_q8_0`) and, for Q2_0 and Q1_0, by the
//! preloaded `mul_mat` hook (`hook.rs`) and the patched build.

use crate::formats::q1_0::{self, BlockQ1_0};
use crate::formats::q2_0::BlockQ2_0;
use crate::formats::q8_0::BlockQ8_0;
use crate::formats::q8_k::BlockQ8K;

/// `rows` rows of `nb` blocks each, row `r` starting at block `r · stride` of `blocks`: a weight matrix (`B` a
/// weight block) or a set of quantized activation columns (`B = BlockQ8_0`).
#[derive(Debug)]
pub struct Rows<'a, B> {
    blocks: &'a [B],
    nb: usize,
    stride: usize,
    rows: usize,
}

// By hand: a derive would ask `B: Copy`, and a view is copyable whatever its blocks are.
impl<B> Clone for Rows<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B> Copy for Rows<'_, B> {}

impl<'a, B> Rows<'a, B> {
    /// `None` when `stride < nb` or `blocks` is too short to hold the last row.
    pub fn new(blocks: &'a [B], nb: usize, stride: usize, rows: usize) -> Option<Rows<'a, B>> {
        let needed = match rows {
            0 => 0,
            _ => (rows - 1).checked_mul(stride)?.checked_add(nb)?,
        };
        (stride >= nb && blocks.len() >= needed).then_some(Rows {
            blocks,
            nb,
            stride,
            rows,
        })
    }

    /// Rows packed back to back.
    pub fn packed(blocks: &'a [B], nb: usize) -> Rows<'a, B> {
        let rows = blocks.len().checked_div(nb).unwrap_or(0);
        Rows {
            blocks,
            nb,
            stride: nb,
            rows,
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Blocks per row.
    pub fn nb(&self) -> usize {
        self.nb
    }

    /// Blocks from one row's start to the next's.
    pub(crate) fn stride(&self) -> usize {
        self.stride
    }

    pub fn row(&self, r: usize) -> &'a [B] {
        assert!(r < self.rows, "row {r} of {}", self.rows);
        &self.blocks[r * self.stride..r * self.stride + self.nb]
    }

    /// Rows `start..end` as their own view.
    pub fn slice(&self, start: usize, end: usize) -> Rows<'a, B> {
        assert!(
            start <= end && end <= self.rows,
            "rows {start}..{end} of {}",
            self.rows
        );
        if start == end {
            return Rows {
                blocks: &self.blocks[..0],
                nb: self.nb,
                stride: self.stride,
                rows: 0,
            };
        }
        Rows {
            blocks: &self.blocks[start * self.stride..(end - 1) * self.stride + self.nb],
            nb: self.nb,
            stride: self.stride,
            rows: end - start,
        }
    }
}

/// Where a product's elements go: `emit(row, column, value)`.
pub type Emit<'e> = &'e mut dyn FnMut(usize, usize, f32);

/// The product as one `vec_dot` per (row, column) pair: what the scalar table runs.
pub fn mul_mat_by_pairs<W, A>(
    vec_dot: impl Fn(&[W], &[A]) -> f32,
    x: Rows<'_, W>,
    y: Rows<'_, A>,
    emit: Emit<'_>,
) {
    for c in 0..y.rows() {
        let col = y.row(c);
        for r in 0..x.rows() {
            emit(r, c, vec_dot(x.row(r), col));
        }
    }
}

/// One batch (eight Q2_0 blocks, sixteen q8_0 blocks) of an activation column prepared for a tile kernel:
/// - `q[h][k]`: for the four blocks `4h..4h+4` of the batch, byte `16·g + i` is the quant that meets weight
///   `4i + k` of block `4h + g` (weight `w` meets quant `w % 32` of q8_0 block `2b + w / 32`), so a dot product
///   of field `k` of the packed code bytes (`(byte >> 2k) & 3`, in place) against `q[h][k]` sums the right
///   products without expanding the codes to one byte per weight;
/// - `qsum`: `Σ q` of each q8_0 block (the `−1` of `c − 1`, subtracted once per half), and `d1`: its scale as a
///   float, both in the lane order the instruction set's kernel produces its sums in (`avx512/q2_0.rs`: lane
///   `8h + b` for q8_0 block `2b + h`; `avx2/q2_0.rs`: see there).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct Q2ColumnBatch {
    pub(crate) q: [[[u8; 64]; 4]; 2],
    pub(crate) qsum: [i32; 16],
    pub(crate) d1: [f32; 16],
}

impl Q2ColumnBatch {
    pub(crate) const ZERO: Q2ColumnBatch = Q2ColumnBatch {
        q: [[[0; 64]; 4]; 2],
        qsum: [0; 16],
        d1: [0.0; 16],
    };
}

/// An instruction set's column preparation: the full batches of one q8_0 column into `out`.
pub(crate) type PrepareColumn = unsafe fn(&[BlockQ8_0], &mut Vec<Q2ColumnBatch>);
/// An instruction set's row kernel: the running sums of `R` rows (pointers to their first block) after every
/// full batch of a prepared column.
pub(crate) type TileRows<const R: usize> = unsafe fn([*const u8; R], &[Q2ColumnBatch]) -> [f32; R];

/// An instruction set's row kernel against two columns at once (sharing each row's code decode), if it has one.
pub(crate) type TileRows2 = unsafe fn([*const u8; 4], [&[Q2ColumnBatch]; 2]) -> [[f32; 4]; 2];

/// An instruction set's scalar chain for a row's blocks past its last full batch (`vec_dot_*_from`), compiled
/// with that instruction set's features: outside them a contracted step is a call to libm's `fmaf`, which made
/// rows shorter than a batch (small models, tails) several times slower than the per-call kernel.
pub(crate) type TailChain<B> = unsafe fn(f32, &[B], &[BlockQ8_0]) -> f32;

/// One batch of a column octet's q8_0 sums and scales, as an instruction set's octet kernel reads them: for
/// each block of the batch and each half of it, one value per column of the octet (the lanes of one vector).
#[repr(C, align(32))]
#[derive(Clone, Copy)]
pub struct Q2OctetScales {
    /// `Σ q` of the half's q8_0 block, `[block][half][column]`.
    pub(crate) qsum: [[[i32; 8]; 2]; 8],
    /// The half's q8_0 scale as a float, `[block][half][column]`.
    pub(crate) d1: [[[f32; 8]; 2]; 8],
}

/// An instruction set's prefill kernel for Q2_0: four rows against eight prepared columns at once, each chain
/// in its own vector lane (column `c` of row `r` in lane `c` of row `r`'s accumulator), so one fused step per
/// block serves eight chains; `scales` makes an octet's per-batch scales from its prepared columns once per
/// chunk.
#[derive(Clone, Copy)]
pub(crate) struct Q2Octets {
    pub(crate) scales: unsafe fn([&[Q2ColumnBatch]; 8], &mut Vec<Q2OctetScales>),
    pub(crate) rows: OctetRows,
}

/// An octet kernel's rows: four row pointers, eight prepared columns and their scales; `[row][column]` sums.
pub(crate) type OctetRows = unsafe fn(
    [*const u8; TILE_ROWS],
    [&[Q2ColumnBatch]; 8],
    &[Q2OctetScales],
) -> [[f32; 8]; TILE_ROWS];

/// Rows per tile step: enough independent chains to hide the 4-cycle FMA latency.
const TILE_ROWS: usize = 4;
/// Prepared columns kept at once: about 512 KiB of them, so they stay in L2 while the rows pass.
const PREPARED_BYTES: usize = 512 << 10;

/// The tile driver shared by the instruction sets: columns in chunks that stay in L2 once prepared, rows four
/// at a time against each column of the chunk, the tail rows one at a time, and each row's blocks past the last
/// full batch through the scalar chain (so every element has the bits of `vec_dot_q2_0_q8_0::<FMA>`).
///
/// Tile step `t` runs rows `t, t + q, t + 2q, t + 3q` (`q = rows / 4`): four long sequential streams through
/// the matrix, which the hardware prefetchers follow. (Four adjacent rows instead are four streams of one row
/// each, too short to train on: a decode then waits on memory latency at about 6 GB/s per thread.) The chunk's
/// columns are innermost, so a step's rows stay in L1 across them.
///
/// # Safety
/// `prepare`, `rows4`, `rows1`, `rows4x2`, `octets` and `tail` must be safe to call on this CPU; `tail` must be
/// `vec_dot_q2_0_q8_0_from::<FMA>`; `y.nb() >= 2 * x.nb()`.
///
/// With `octets`, a chunk's columns go eight at a time through the octet kernel (prefill), the rest through the
/// others.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn mul_mat_q2_0_tiles<const FMA: bool>(
    x: Rows<'_, BlockQ2_0>,
    y: Rows<'_, BlockQ8_0>,
    emit: Emit<'_>,
    prepare: PrepareColumn,
    rows4: TileRows<TILE_ROWS>,
    rows1: TileRows<1>,
    rows4x2: Option<TileRows2>,
    octets: Option<Q2Octets>,
    tail: TailChain<BlockQ2_0>,
) {
    thread_local! {
        static PREPARED: std::cell::RefCell<Vec<Vec<Q2ColumnBatch>>> = const { std::cell::RefCell::new(Vec::new()) };
        static OCTET_SCALES: std::cell::RefCell<Vec<Vec<Q2OctetScales>>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let nb = x.nb();
    let done = 8 * (nb / 8);
    let batch_bytes = std::mem::size_of::<Q2ColumnBatch>() * (nb / 8).max(1);
    let chunk = (PREPARED_BYTES / batch_bytes).max(1);
    let finish = |emit: &mut dyn FnMut(usize, usize, f32), r: usize, c: usize, sumf: f32| {
        let (row, col) = (x.row(r), y.row(c));
        // SAFETY: the caller vouches for the CPU.
        emit(r, c, unsafe {
            tail(sumf, &row[done..], &col[2 * done..2 * nb])
        });
    };
    PREPARED.with_borrow_mut(|prepared| {
        let prepare = |c: usize, out: &mut Vec<Q2ColumnBatch>| {
            // SAFETY: the caller vouches for the CPU.
            unsafe { prepare(&y.row(c)[..2 * done], out) }
        };
        for_each_column_chunk(prepared, y.rows(), chunk, prepare, |c0, c1, prepared| {
            let mut first = c0;
            if let Some(o) = octets.filter(|_| c1 - c0 >= 8) {
                let n = (c1 - c0) / 8;
                let octet = |i: usize| -> [&[Q2ColumnBatch]; 8] {
                    std::array::from_fn(|j| &prepared[8 * i + j][..])
                };
                OCTET_SCALES.with_borrow_mut(|scales| {
                    if scales.len() < n {
                        scales.resize_with(n, Vec::new);
                    }
                    for (i, s) in scales[..n].iter_mut().enumerate() {
                        // SAFETY: the caller vouches for the CPU.
                        unsafe { (o.scales)(octet(i), s) };
                    }
                    // SAFETY (both kernels): the rows exist and hold nb ≥ 8·batches blocks each, the octet's
                    // columns as many batches as its scales; the caller vouches for the CPU.
                    run_octets(
                        &x,
                        n,
                        |p, i| unsafe { (o.rows)(p, octet(i), &scales[i]) },
                        |p, c| unsafe { rows1([p], &prepared[c])[0] },
                        |r, c, sumf| finish(emit, r, c0 + c, sumf),
                    );
                });
                first = c0 + 8 * n;
            }
            // SAFETY (the three kernels): the rows exist and hold nb ≥ 8·prepared.len() blocks each; the
            // caller vouches for the CPU.
            let pair = rows4x2.map(|k| move |p, c: [&[Q2ColumnBatch]; 2]| unsafe { k(p, c) });
            run_rows(
                &x,
                (first, c1),
                &prepared[first - c0..],
                pair.as_ref().map(|k| k as PairKernel<'_, _, _>),
                |p, c| unsafe { rows4(p, c) },
                |p, c| unsafe { rows1([p], c)[0] },
                |r, c, sumf| finish(emit, r, c, sumf),
            );
        });
    });
}

/// The column loop both drivers share: columns in chunks of `chunk` (about `PREPARED_BYTES` once prepared, so
/// they stay in L2 while the rows pass); each chunk `c0..c1` is prepared into `prepared[..c1 − c0]` (column `c`
/// at `c − c0`, the buffers reused across calls), then `body(c0, c1, prepared)` runs the rows against it.
fn for_each_column_chunk<P>(
    prepared: &mut Vec<Vec<P>>,
    cols: usize,
    chunk: usize,
    mut prepare: impl FnMut(usize, &mut Vec<P>),
    mut body: impl FnMut(usize, usize, &[Vec<P>]),
) {
    let mut c0 = 0;
    while c0 < cols {
        let c1 = (c0 + chunk).min(cols);
        if prepared.len() < c1 - c0 {
            prepared.resize_with(c1 - c0, Vec::new);
        }
        for c in c0..c1 {
            prepare(c, &mut prepared[c - c0]);
        }
        body(c0, c1, &prepared[..c1 - c0]);
        c0 = c1;
    }
}

/// Rows against the first `8·octets` columns of a chunk (column `c` counted from the chunk's first), in the tile
/// steps of `run_rows`: each step's four rows against each octet through `eight` (`eight(rows, i)`: octet `i`,
/// values `[row][column]`), then the tail rows one column at a time (`one(row, c)`); `done(r, c, v)` as there.
fn run_octets<B>(
    x: &Rows<'_, B>,
    octets: usize,
    eight: impl Fn([*const u8; TILE_ROWS], usize) -> [[f32; 8]; TILE_ROWS],
    one: impl Fn(*const u8, usize) -> f32,
    mut done: impl FnMut(usize, usize, f32),
) {
    let row = |r: usize| x.row(r).as_ptr() as *const u8;
    let (tail, steps) = tile_steps(x.rows(), x.stride * std::mem::size_of::<B>());
    for rows in steps {
        let ptrs = rows.map(row);
        for i in 0..octets {
            let values = eight(ptrs, i);
            for (&r, of_row) in rows.iter().zip(values) {
                for (j, v) in of_row.into_iter().enumerate() {
                    done(r, 8 * i + j, v);
                }
            }
        }
    }
    for r in tail..x.rows() {
        for c in 0..8 * octets {
            done(r, c, one(row(r), c));
        }
    }
}

/// A two-column row kernel as `run_rows` calls it.
type PairKernel<'k, P, T> = &'k dyn Fn([*const u8; TILE_ROWS], [&[P]; 2]) -> [[T; TILE_ROWS]; 2];

/// Rows against one chunk of prepared columns `c0..c1` (column `c` at `prepared[c − c0]`), as every driver runs
/// them: tile steps of four rows (`tile_steps`) against column pairs where the instruction set has a two-column
/// kernel (`pair`; prefill, each row's weights decoded once for both), then single columns (`four`), then the
/// tail rows one at a time (`one`); `done(r, c, v)` finishes element (r, c) from its kernel's value.
fn run_rows<B, P, T>(
    x: &Rows<'_, B>,
    (c0, c1): (usize, usize),
    prepared: &[Vec<P>],
    pair: Option<PairKernel<'_, P, T>>,
    four: impl Fn([*const u8; TILE_ROWS], &[P]) -> [T; TILE_ROWS],
    one: impl Fn(*const u8, &[P]) -> T,
    mut done: impl FnMut(usize, usize, T),
) {
    let row = |r: usize| x.row(r).as_ptr() as *const u8;
    let (tail, steps) = tile_steps(x.rows(), x.stride * std::mem::size_of::<B>());
    for rows in steps {
        let ptrs = rows.map(row);
        let mut c = c0;
        if let Some(pair) = pair {
            while c + 2 <= c1 {
                let values = pair(ptrs, [&prepared[c - c0][..], &prepared[c + 1 - c0][..]]);
                for (j, col) in values.into_iter().enumerate() {
                    for (r, v) in rows.into_iter().zip(col) {
                        done(r, c + j, v);
                    }
                }
                c += 2;
            }
        }
        for c in c..c1 {
            for (r, v) in rows.into_iter().zip(four(ptrs, &prepared[c - c0])) {
                done(r, c, v);
            }
        }
    }
    for r in tail..x.rows() {
        for c in c0..c1 {
            done(r, c, one(row(r), &prepared[c - c0]));
        }
    }
}

/// Two Q1_0 blocks' share (eight q8_0 blocks) of an activation column prepared for the haswell-order tile
/// kernel, laid out so that one 512-bit vector holds the same quarter of both blocks: half `b` of each entry is
/// block `2p + b` of the pair.
///
/// Stock's lane sum is `s = Σ (bit ? q : wn(q))` over four quants, `wn` the wrapping byte negation (−128 stays
/// −128, stock's `(q ^ m) − m`). Written as "every bit clear" plus a correction per set bit,
/// `s = Σ wn(q) + Σ_set (q − wn(q))`, and `q − wn(q)` is `2q`, or 0 for q = −128. So the column holds, per
/// quarter `k`, `base[k]` = the lanes' `Σ wn(q)` and `h[k]` = the quants with −128 replaced by 0; a row then
/// needs only its bits as bytes `2·bit` and one `vpdpbusd(base, 2·bit, h)`, which is exact (`|s| ≤ 512`).
/// `d1[k]` holds each block's scale of quarter `k` as eight equal floats, the multiplier of stock's per-lane
/// chain for both blocks at once. A column with an odd number of blocks ends in a pair whose second half is
/// zero (and never meets weights).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct Q1ColumnPair {
    pub(crate) h: [[i8; 64]; 4],
    pub(crate) base: [[i32; 16]; 4],
    pub(crate) d1: [[f32; 16]; 4],
}

/// Prepares one q8_0 column (`y.len() / 4` whole Q1_0 blocks' worth, in pairs) into `out`: the plain model of
/// the layout, which the instruction set's own preparation (`LanePrepareColumn`, e.g. `avx512/q2_0.rs`
/// `q1_prepare_column`) must equal entry for entry (tier-1 tests).
#[cfg(test)]
pub(crate) fn q1_prepare_column(y: &[BlockQ8_0], out: &mut Vec<Q1ColumnPair>) {
    out.clear();
    // Eight q8_0 blocks per pair; a last lone Q1_0 block's four fill the first half.
    out.extend(y[..4 * (y.len() / 4)].chunks(8).map(|pair| {
        let mut c = Q1ColumnPair {
            h: [[0; 64]; 4],
            base: [[0; 16]; 4],
            d1: [[0.0; 16]; 4],
        };
        for (half, blk) in pair.chunks_exact(4).enumerate() {
            for (k, b) in blk.iter().enumerate() {
                let h = &mut c.h[k][32 * half..32 * half + 32];
                for (o, &q) in h.iter_mut().zip(&b.qs) {
                    *o = if q == i8::MIN { 0 } else { q };
                }
                for (l, quad) in b.qs.chunks_exact(4).enumerate() {
                    c.base[k][8 * half + l] = quad.iter().map(|&q| q.wrapping_neg() as i32).sum();
                }
                c.d1[k][8 * half..8 * half + 8].fill(b.d.to_f32());
            }
        }
        c
    }));
}

/// An instruction set's lane-tile row kernel (Q1_0, TQ2_0, TQ1_0): the eight haswell-order float lanes of `R` rows
/// (pointers to their first block) against `C` prepared columns of equal length (entries of `P`), over their
/// `blocks` weight blocks.
pub(crate) type LaneTileRows<P, const R: usize, const C: usize> =
    unsafe fn(usize, [*const u8; R], [&[P]; C]) -> [[[f32; 8]; R]; C];

/// An instruction set's preparation of one activation column (blocks of `A`) into entries of `P`.
pub(crate) type LanePrepareColumn<A, P> = unsafe fn(&[A], &mut Vec<P>);

/// An instruction set's kernels for `mul_mat_lane_tiles`: the column preparation and the row kernels for
/// decode (four rows, one column), prefill (four rows, two columns) and tail rows.
pub(crate) struct LaneTileKernels<A, P> {
    pub(crate) prepare: LanePrepareColumn<A, P>,
    pub(crate) rows4: LaneTileRows<P, TILE_ROWS, 1>,
    pub(crate) rows1: LaneTileRows<P, 1, 1>,
    pub(crate) rows4x2: LaneTileRows<P, TILE_ROWS, 2>,
}

/// `W · Y` for a format whose stock (haswell) chain is eight float lanes per element with no block batches
/// (Q1_0 against q8_0, TQ2_0 and TQ1_0 against q8_K): columns prepared in chunks that stay in L2 (`act_per_row`
/// activation blocks each, `entries` prepared entries), four rows per step against each pair of columns
/// (prefill; the rows' decode shared, the chains interleaved), a last single column, tail rows one at a time;
/// `finish(r, c, column, lanes)` makes element (r, c) from its lanes (stock's `hsum_float_8`, or a per-pair
/// fallback the prepared column asks for).
///
/// # Safety
/// The kernels must be safe to call on this CPU; `y.nb() >= act_per_row`, and a column prepared from
/// `act_per_row` blocks holds what the row kernels read for `x.nb()` weight blocks.
pub(crate) unsafe fn mul_mat_lane_tiles<B, A, P>(
    x: Rows<'_, B>,
    y: Rows<'_, A>,
    (act_per_row, entries): (usize, usize),
    kernels: &LaneTileKernels<A, P>,
    prepared: &mut Vec<Vec<P>>,
    mut finish: impl FnMut(usize, usize, &[P], [f32; 8]),
) {
    let nb = x.nb();
    let column_bytes = std::mem::size_of::<P>() * entries.max(1);
    let chunk = (PREPARED_BYTES / column_bytes).max(1);
    let LaneTileKernels {
        prepare,
        rows4,
        rows1,
        rows4x2,
    } = *kernels;
    // SAFETY: the caller vouches for the CPU.
    let prepare = |c: usize, out: &mut Vec<P>| unsafe { prepare(&y.row(c)[..act_per_row], out) };
    for_each_column_chunk(prepared, y.rows(), chunk, prepare, |c0, c1, prepared| {
        // SAFETY (the three kernels): each row holds `nb` blocks and each prepared column what the kernels
        // read for them (the caller's contract); the caller vouches for the CPU.
        run_rows(
            &x,
            (c0, c1),
            prepared,
            Some(&|p, [c, d]| unsafe { rows4x2(nb, p, [c, d]) }),
            |p, c| unsafe { rows4(nb, p, [c])[0] },
            |p, c| unsafe { rows1(nb, [p], [c])[0][0] },
            |r, c, lanes| finish(r, c, &prepared[c - c0], lanes),
        );
    });
}

impl<A, P> Clone for LaneTileKernels<A, P> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A, P> Copy for LaneTileKernels<A, P> {}

/// `W · Y` for Q1_0 weights in the haswell build's order through `mul_mat_lane_tiles`, each element finished
/// with `hsum_float_8`, so every element has the bits of the haswell `ggml_vec_dot_q1_0_q8_0`.
///
/// # Safety
/// The kernels must be safe to call on this CPU; `y.nb() >= 4 * x.nb()`.
pub(crate) unsafe fn mul_mat_q1_0_tiles(
    x: Rows<'_, BlockQ1_0>,
    y: Rows<'_, BlockQ8_0>,
    emit: Emit<'_>,
    kernels: &LaneTileKernels<BlockQ8_0, Q1ColumnPair>,
) {
    thread_local! {
        static PREPARED: std::cell::RefCell<Vec<Vec<Q1ColumnPair>>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let nb = x.nb();
    PREPARED.with_borrow_mut(|prepared| {
        // SAFETY: the caller's contract; a column of `4·nb` q8_0 blocks prepares into `(nb + 1) / 2` pairs.
        unsafe {
            mul_mat_lane_tiles(
                x,
                y,
                (4 * nb, nb.div_ceil(2)),
                kernels,
                prepared,
                |r, c, _, lanes| emit(r, c, q1_0::hsum_float_8(lanes)),
            )
        }
    });
}

/// One Q2_0 block's share (two q8_0 blocks) of an activation column prepared for the tile kernel in ggml
/// ≥ 0.27.0's own AVX2 order (`formats::q2_0::vec_dot_q2_0_q8_0_avx2_model`): `q` the 64 quants as they are (that
/// order multiplies codes expanded to one byte per weight, in weight order), `qsum[8h + l]` the sum of quants
/// `4l..4l + 4` of q8_0 block `h` (the `−1` of `c − 1` in each of the kernel's eight lane sums), `d[h]` that
/// block's scale as a float.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Q2LaneColumnBlock {
    pub(crate) q: [i8; 64],
    pub(crate) qsum: [i32; 16],
    pub(crate) d: [f32; 2],
}

/// Prepares one q8_0 column (`2·nb` blocks) for the tile kernel in ggml ≥ 0.27.0's AVX2 order. Plain Rust: a
/// copy and sixteen sums per block, once per column for all rows.
pub(crate) fn q2_lane_prepare_column(y: &[BlockQ8_0], out: &mut Vec<Q2LaneColumnBlock>) {
    out.clear();
    out.extend(y.chunks_exact(2).map(|pair| {
        let mut e = Q2LaneColumnBlock {
            q: [0; 64],
            qsum: [0; 16],
            d: [0.0; 2],
        };
        for (h, b) in pair.iter().enumerate() {
            e.q[32 * h..32 * h + 32].copy_from_slice(&b.qs);
            for (l, quad) in b.qs.chunks_exact(4).enumerate() {
                e.qsum[8 * h + l] = quad.iter().map(|&q| q as i32).sum();
            }
            e.d[h] = b.d.to_f32();
        }
        e
    }));
}

/// `W · Y` for Q2_0 weights in ggml ≥ 0.27.0's own AVX2 order through `mul_mat_lane_tiles`: the row kernels
/// give each element's eight lanes (its two accumulators already added), finished with the kernel's reduction
/// (`q2_0::avx2_model_reduce`), so every element has the bits of that `ggml_vec_dot_q2_0_q8_0`, NaNs included.
///
/// # Safety
/// The kernels must be safe to call on this CPU; `y.nb() >= 2 * x.nb()`.
pub(crate) unsafe fn mul_mat_q2_0_avx2_order_tiles(
    x: Rows<'_, BlockQ2_0>,
    y: Rows<'_, BlockQ8_0>,
    emit: Emit<'_>,
    kernels: &LaneTileKernels<BlockQ8_0, Q2LaneColumnBlock>,
) {
    thread_local! {
        static PREPARED: std::cell::RefCell<Vec<Vec<Q2LaneColumnBlock>>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let nb = x.nb();
    PREPARED.with_borrow_mut(|prepared| {
        // SAFETY: the caller's contract; a column of `2·nb` q8_0 blocks prepares into `nb` entries.
        unsafe {
            mul_mat_lane_tiles(x, y, (2 * nb, nb), kernels, prepared, |r, c, _, lanes| {
                emit(r, c, crate::formats::q2_0::avx2_model_reduce(lanes))
            })
        }
    });
}

/// One q8_K block of an activation column prepared for the ternary tile kernels (`avx512/mod.rs`,
/// `tq_tile_rows4`), TQ2_0 and TQ1_0:
/// - `q[k]`: the 64 quants that meet the weights' `k`-th 64-byte vector of codes or digits, one aligned load.
///   TQ1_0's digit group `k` meets quants `64k..64k + 64` (`TqQuants::InOrder`); TQ2_0's 64 code bytes taken as
///   one vector hold element `32k + m` in byte `m < 32` and `128 + 32k + m − 32` above, so its `q[k]` is quants
///   `32k..32k + 32` then `128 + 32k..128 + 32k + 32` (`TqQuants::CodeFields`);
/// - `neg_pairs[L] = −(bsums[2L] + bsums[2L + 1])`: stock's i16 lanes minus their bsums, as the start of the
///   kernel's sums (exact whenever no i16 lane can wrap: see `wraps`);
/// - `d`: the q8_K scale's bytes;
/// - `wraps` (the column's first entry only): some bsum of the column is beyond ±`TQ_BSUM_BOUND`, so stock's
///   i16 lanes could wrap (never with the quantizer's own bsums); the column's elements then come from the
///   per-pair `vec_dot`, which wraps as stock does.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct TqColumnBlock {
    pub(crate) q: [[i8; 64]; 4],
    pub(crate) neg_pairs: [i32; 8],
    pub(crate) d: [u8; 4],
    pub(crate) wraps: bool,
}
const _: () = assert!(std::mem::size_of::<TqColumnBlock>() == 320);

/// The largest |bsum| for which no stock i16 lane can wrap in either ternary format: a TQ2_0 lane's `Σ c·q` is
/// within ±16·3·128 = ±6144 (TQ1_0's within ±4096, so its bound would be looser).
pub(crate) const TQ_BSUM_BOUND: u16 = 32767 - 6144;

/// How `TqColumnBlock::q` orders a q8_K block's quants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TqQuants {
    /// TQ1_0: quants `64k..64k + 64` in `q[k]`.
    InOrder,
    /// TQ2_0: quants `32k..32k + 32` and `128 + 32k..128 + 32k + 32` in `q[k]`.
    CodeFields,
}

/// Prepares one q8_K column for a ternary tile kernel (`TqColumnBlock`). Plain Rust: a copy per block, shared
/// by every row of the product.
pub(crate) fn tq_prepare_column(y: &[BlockQ8K], order: TqQuants, out: &mut Vec<TqColumnBlock>) {
    out.clear();
    let mut wraps = false;
    out.extend(y.iter().map(|b| {
        let mut e = TqColumnBlock {
            q: [[0; 64]; 4],
            neg_pairs: [0; 8],
            d: b.d,
            wraps: false,
        };
        for (k, q) in e.q.iter_mut().enumerate() {
            match order {
                TqQuants::InOrder => q.copy_from_slice(&b.qs[64 * k..64 * k + 64]),
                TqQuants::CodeFields => {
                    for (half, part) in q.chunks_exact_mut(32).enumerate() {
                        part.copy_from_slice(&b.qs[128 * half + 32 * k..][..32]);
                    }
                }
            }
        }
        for (lane, n) in e.neg_pairs.iter_mut().enumerate() {
            *n = -(b.bsum(2 * lane) as i32 + b.bsum(2 * lane + 1) as i32);
        }
        wraps |= (0..16).any(|m| b.bsum(m).unsigned_abs() > TQ_BSUM_BOUND);
        e
    }));
    if let Some(first) = out.first_mut() {
        first.wraps = wraps;
    }
}

/// `W · Y` for ternary weights (TQ2_0, TQ1_0: one q8_K block per weight block) in the haswell build's order
/// through `mul_mat_lane_tiles`: each element finished with `hsum_float_8`, or, in a column whose bsums could
/// make stock's i16 lanes wrap, by `vec_dot` (the instruction set's, which redoes such rows with the model), so
/// every element has the bits of the haswell `ggml_vec_dot_tq{2,1}_0_q8_K`.
///
/// # Safety
/// The kernels must be safe to call on this CPU and read blocks of `B`; `y.nb() >= x.nb()`.
pub(crate) unsafe fn mul_mat_tq_tiles<B>(
    x: Rows<'_, B>,
    y: Rows<'_, BlockQ8K>,
    emit: Emit<'_>,
    kernels: &LaneTileKernels<BlockQ8K, TqColumnBlock>,
    vec_dot: impl Fn(&[B], &[BlockQ8K]) -> f32,
) {
    thread_local! {
        static PREPARED: std::cell::RefCell<Vec<Vec<TqColumnBlock>>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let nb = x.nb();
    PREPARED.with_borrow_mut(|prepared| {
        // SAFETY: the caller's contract; a column of `nb` q8_K blocks prepares into `nb` entries.
        unsafe {
            mul_mat_lane_tiles(x, y, (nb, nb), kernels, prepared, |r, c, column, lanes| {
                let v = match column.first() {
                    Some(first) if first.wraps => vec_dot(x.row(r), &y.row(c)[..nb]),
                    _ => q1_0::hsum_float_8(lanes),
                };
                emit(r, c, v)
            })
        }
    });
}

/// The four rows of each tile step and where the tail rows (run one by one) start: the row order every driver
/// uses. Stream `i` walks the rows `iq..(i + 1)q` (`q = rows / 4`) in order, so each is a long sequential
/// stream the hardware prefetchers follow (see `mul_mat_q2_0_tiles`), but it starts `stream_starts(…)[i]` rows
/// into its quarter and wraps around, so the four row pointers of a step sit about 1 KiB apart modulo 4 KiB
/// wherever the row size allows it. (Started together, the four streams of a 4096-row TQ2_0 matrix — 1056-byte
/// rows, quarters 264 pages apart — read the same L1 sets at every step: on the Zen 4 EPYC its tiles ran at
/// 0.72–0.91× stock on 4096×4096, where the matrix stays in L3, against 1.14–1.48× staggered;
/// `docs/PERFORMANCE.md`.)
fn tile_steps(rows: usize, row_bytes: usize) -> (usize, impl Iterator<Item = [usize; TILE_ROWS]>) {
    let q = rows / TILE_ROWS;
    let starts = stream_starts(q, row_bytes);
    (
        TILE_ROWS * q,
        // `t + starts[i] < 2q`: one compare wraps it (a `%` here was four divisions per step).
        (0..q).map(move |t| {
            std::array::from_fn(|i| {
                let o = t + starts[i];
                i * q + if o >= q { o - q } else { o }
            })
        }),
    )
}

/// The row each of the four streams starts at inside its quarter (`q` rows of `row_bytes`): the one among the
/// first 64 that puts stream `i` nearest `i` KiB past stream 0 modulo 4 KiB (0 for stream 0, and wherever
/// `q == 0`).
fn stream_starts(q: usize, row_bytes: usize) -> [usize; TILE_ROWS] {
    const PAGE: usize = 4096;
    std::array::from_fn(|i| {
        let target = i * PAGE / TILE_ROWS;
        (0..q.min(64))
            .min_by_key(|&o| {
                let d = ((i * q + o) * row_bytes % PAGE).abs_diff(target);
                d.min(PAGE - d)
            })
            .unwrap_or(0)
    })
}

/// One batch (four PQ2_0 or PTQ1_0 blocks, sixteen q8_0 blocks) of an activation column prepared for the fork
/// formats' tile kernel (`avx512/fork.rs`, `fork_tile_rows`), in the layout the vec_dot driver reads the column in:
/// - `q[g]`: group `g = 4h + p` (half `h` of block `p`) meets q8_0 blocks `4p + 2h` and `4p + 2h + 1`: their 64
///   quants back to back, so a row loads each group's quants with one aligned load;
/// - `qsum`: `Σ q` of q8_0 block `4p + k` in lane `4k + p` (the `−1` of a weight byte `w − 1`, subtracted once
///   per batch instead of one dot product per group), and `d1`: its scale as a float, in the same lane.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct ForkColumnBatch {
    pub(crate) q: [[i8; 64]; 8],
    pub(crate) qsum: [i32; 16],
    pub(crate) d1: [f32; 16],
}

/// Prepares the full batches (`y.len() / 16`) of one q8_0 column into `out`. Plain Rust: one pass over the
/// column, shared by every row.
pub(crate) fn fork_prepare_column(y: &[BlockQ8_0], out: &mut Vec<ForkColumnBatch>) {
    out.clear();
    out.extend(y.chunks_exact(16).map(|batch| {
        let mut c = ForkColumnBatch {
            q: [[0; 64]; 8],
            qsum: [0; 16],
            d1: [0.0; 16],
        };
        for g in 0..8 {
            let (p, h) = (g % 4, g / 4);
            for half in 0..2 {
                let b = &batch[4 * p + 2 * h + half];
                c.q[g][32 * half..32 * half + 32].copy_from_slice(&b.qs);
            }
        }
        for (i, b) in batch.iter().enumerate() {
            let (p, k) = (i / 4, i % 4);
            c.qsum[4 * k + p] = b.qs.iter().map(|&q| q as i32).sum();
            c.d1[4 * k + p] = b.d.to_f32();
        }
        c
    }));
}

/// An instruction set's fork-format row kernel: the running sums of `R` rows (pointers to their first block)
/// against `C` prepared columns of equal length, after every batch.
pub(crate) type ForkTileRows<const R: usize, const C: usize> =
    unsafe fn([*const u8; R], [&[ForkColumnBatch]; C]) -> [[f32; R]; C];

/// `W · Y` for a fork format (PQ2_0, PTQ1_0: 128-weight blocks, four q8_0 blocks each): columns prepared in
/// chunks that stay in L2, the rows four at a time in long streams against each pair of columns (prefill: each
/// row's weights decoded once for both) and a last single column, tail rows one at a time, and each row's
/// blocks past the last full batch through the format's scalar chain (`finish`, its `vec_dot_*_from`), so every
/// element has the bits of that format's `vec_dot` in the same float order.
///
/// # Safety
/// `rows4`, `rows1`, `rows4x2` and `finish` must be safe to call on this CPU, the kernels reading blocks of `B`;
/// `y.nb() >= 4 * x.nb()`.
pub(crate) unsafe fn mul_mat_fork_tiles<B>(
    x: Rows<'_, B>,
    y: Rows<'_, BlockQ8_0>,
    emit: Emit<'_>,
    rows4: ForkTileRows<TILE_ROWS, 1>,
    rows1: ForkTileRows<1, 1>,
    rows4x2: ForkTileRows<TILE_ROWS, 2>,
    finish: TailChain<B>,
) {
    thread_local! {
        static PREPARED: std::cell::RefCell<Vec<Vec<ForkColumnBatch>>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let nb = x.nb();
    let done = 4 * (nb / 4);
    let batch_bytes = std::mem::size_of::<ForkColumnBatch>() * (nb / 4).max(1);
    let chunk = (PREPARED_BYTES / batch_bytes).max(1);
    let finish = |emit: &mut dyn FnMut(usize, usize, f32), r: usize, c: usize, sumf: f32| {
        let (row, col) = (x.row(r), y.row(c));
        // SAFETY: the caller vouches for the CPU.
        emit(r, c, unsafe {
            finish(sumf, &row[done..], &col[4 * done..4 * nb])
        });
    };
    PREPARED.with_borrow_mut(|prepared| {
        let prepare = |c: usize, out: &mut Vec<ForkColumnBatch>| {
            fork_prepare_column(&y.row(c)[..4 * done], out)
        };
        for_each_column_chunk(prepared, y.rows(), chunk, prepare, |c0, c1, prepared| {
            // SAFETY (the three kernels): the rows exist and hold nb ≥ 4·prepared.len() blocks each; the
            // caller vouches for the CPU.
            run_rows(
                &x,
                (c0, c1),
                prepared,
                Some(&|p, [c, d]| unsafe { rows4x2(p, [c, d]) }),
                |p, c| unsafe { rows4(p, [c])[0] },
                |p, c| unsafe { rows1([p], [c])[0][0] },
                |r, c, sumf| finish(emit, r, c, sumf),
            );
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row below the tail once, each stream in order from its start with one wrap, and the four
    /// streams of a step spread over 4 KiB where the row size allows it.
    #[test]
    fn tile_steps_visit_every_row_once_in_four_staggered_streams() {
        for (rows, row_bytes) in [
            (0, 66),
            (3, 66),
            (4, 1056),
            (9, 18),
            (4096, 1056),
            (4096, 576),
            (12288, 3168),
            (151_669, 864),
            (4096, 4096),
            (1000, 34),
        ] {
            let (tail, steps) = tile_steps(rows, row_bytes);
            let q = rows / TILE_ROWS;
            assert_eq!(tail, TILE_ROWS * q);
            let mut seen = vec![false; tail];
            let steps: Vec<_> = steps.collect();
            assert_eq!(steps.len(), q);
            for (t, step) in steps.iter().enumerate() {
                for (i, &r) in step.iter().enumerate() {
                    assert!(
                        (i * q..(i + 1) * q).contains(&r),
                        "{rows} {row_bytes}: row {r}"
                    );
                    assert!(!std::mem::replace(&mut seen[r], true), "row {r} twice");
                    if t > 0 {
                        let prev = steps[t - 1][i];
                        assert!(r == prev + 1 || (r == i * q && prev == (i + 1) * q - 1));
                    }
                }
            }
            assert!(seen.iter().all(|&s| s));
        }
        // Stream i sits i KiB past stream 0 (mod 4 KiB) for the Bonsai-8B TQ2_0 and Q1_0 rows.
        for row_bytes in [1056, 576, 3168] {
            let (_, mut steps) = tile_steps(4096, row_bytes);
            let step = steps.next().unwrap();
            for (i, &r) in step.iter().enumerate() {
                let at = (r * row_bytes) % 4096;
                let want = i * 1024;
                let d = at.abs_diff(want).min(4096 - at.abs_diff(want));
                assert!(d <= row_bytes / 2 + 64, "{row_bytes}: stream {i} at {at}");
            }
        }
        // Rows a page long cannot be spread: the starts stay where they are.
        assert_eq!(stream_starts(1024, 4096), [0; TILE_ROWS]);
    }
}
