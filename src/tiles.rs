//! Whole matrix products ("tiles"): every output element of `W · Y` with exactly the bits of the per-pair
//! `vec_dot` of the stock build being matched.
//!
//! Through ggml's `vec_dot` ABI each call sees one (row, column) pair, so the activation is re-read and
//! re-arranged for every row and each call waits on its own sequential float chain. A tile kernel instead
//! prepares each activation column once (`avx512.rs`: the q8_0 quants laid out to match the packed weight
//! codes, the q8 scales as floats, the per-block quant sums) and runs several rows against it with their float
//! chains interleaved. Each element still keeps its own chain, in block order from `0`, so the bits are those of
//! `vec_dot` (`formats.md` §5); tests compare every element with `to_bits()`.
//!
//! Used by the C API (`ggml_lowbit_mul_mat_q2_0_q8_0`) and by the preloaded `mul_mat` hook (`hook.rs`).

/// `rows` rows of `nb` blocks each, row `r` starting at block `r · stride` of `blocks`: a weight matrix (`B` a
/// weight block) or a set of quantized activation columns (`B = BlockQ8_0`).
#[derive(Clone, Copy, Debug)]
pub struct Rows<'a, B> {
    blocks: &'a [B],
    nb: usize,
    stride: usize,
    rows: usize,
}

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

/// The product as one `vec_dot` per (row, column) pair: what instruction sets without a tile kernel run.
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
