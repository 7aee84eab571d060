//! x86-64 kernels: `avx2/` and `avx512/` define the same function names, one file per format in each.
pub mod avx2;
pub mod avx512;
#[cfg(test)]
mod bounds;

/// How far ahead of the block being multiplied the row kernels prefetch their weights, in bytes (about 64 blocks
/// of the fork's formats, 20–30 of the IQ formats). Rows are adjacent in memory, so near a row's end this
/// fetches the start of the next row, which the next call reads.
const X_PREFETCH_AHEAD: usize = 2048;

/// Prefetches into L1 (`prefetcht0`) every cache line of the `span` bytes that start `X_PREFETCH_AHEAD` bytes
/// after `p`, when a kernel is about to read the `span` bytes at `p`. Consecutive calls over a row cover every
/// line of it. The weights stream from L3 or memory (a 4096×4096 IQ matrix is larger than L2); without it the
/// Intel Xeon (Emerald Rapids) machine spent a fifth of the fork formats' time waiting for them, where
/// `prefetchnta` 32 blocks ahead had been enough on Zen 4 (`docs/PERFORMANCE.md`).
#[inline(always)]
pub(crate) fn prefetch_ahead(p: *const u8, span: usize) {
    let mut o = 0;
    while o < span {
        // SAFETY: a prefetch is a hint: it never faults and never makes the program read the address, which
        // may lie past the row (`wrapping_add`); SSE is part of x86-64.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                p.wrapping_add(X_PREFETCH_AHEAD + o) as *const i8,
            )
        };
        o += 64;
    }
}

/// A base-3 packing whose digit tables the kernels build at compile time, from the format's own
/// `element_source` (packed byte, digit position `n` of each element) and `POW3`.
#[derive(Clone, Copy)]
pub(crate) enum Base3Layout {
    Tq1_0,
    Ptq1_0,
}

impl Base3Layout {
    /// Element `e`'s packed byte and its digit's multiplier `3ⁿ`.
    const fn digit_source(self, e: usize) -> (usize, u8) {
        use crate::formats::{ptq1_0, tq1_0};
        match self {
            Base3Layout::Tq1_0 => {
                let (byte, n) = tq1_0::element_source(e);
                (byte, tq1_0::POW3[n])
            }
            Base3Layout::Ptq1_0 => {
                let (byte, n) = ptq1_0::element_source(e);
                (byte, ptq1_0::POW3[n])
            }
        }
    }

    /// The byte permutation that puts element `first + p`'s packed byte in byte `p` (`vpermb`).
    pub(crate) const fn byte_perm(self, first: usize) -> [u8; 64] {
        let mut out = [0u8; 64];
        let mut p = 0;
        while p < 64 {
            out[p] = self.digit_source(first + p).0 as u8;
            p += 1;
        }
        out
    }

    /// The `vpmullw` multipliers of the `W` words holding elements `first..first + 2W`, two a word: `3ⁿ << 8`
    /// for the even element (`ODD = false`: the product's high byte is then `(uint8)(q·3ⁿ)`, whatever the odd
    /// byte holds), `3ⁿ` for the odd one (`ODD = true`: multiplied with the even byte cleared, which leaves the
    /// same in the high byte).
    pub(crate) const fn word_mult<const W: usize, const ODD: bool>(self, first: usize) -> [u16; W] {
        let mut out = [0u16; W];
        let mut w = 0;
        while w < W {
            let e = first + 2 * w + if ODD { 1 } else { 0 };
            let pow = self.digit_source(e).1 as u16;
            out[w] = if ODD { pow } else { pow << 8 };
            w += 1;
        }
        out
    }
}

/// The software pipelining the SIMD Q2_0 and PQ2_0 kernels use: batch `k + 1`'s work that does not depend on the running
/// sum (`terms`) is issued before batch `k`'s sequential float chain (`chain`), so the chain (4 cycles per block)
/// overlaps the next batch's vector work instead of waiting behind it.
#[inline(always)]
pub(crate) fn pipelined<T>(
    batches: usize,
    terms: impl Fn(usize) -> T,
    chain: impl Fn(f32, T) -> f32,
) -> f32 {
    if batches == 0 {
        return 0.0;
    }
    let mut sumf = 0.0f32;
    let mut pending = terms(0);
    for k in 1..batches {
        let next = terms(k);
        sumf = chain(sumf, pending);
        pending = next;
    }
    chain(sumf, pending)
}

/// `pipelined` with one call site of `terms` (no first batch peeled off before the loop), over any running
/// state `S` (one sum, or one per row in a tile kernel). With two, LLVM kept
/// the AVX-512 fork driver's large `terms` closure out of line: a call per batch, its results through memory,
/// no overlap between batches. Inlined, PTQ1_0 and PQ2_0 ran 14–17 % faster; the Q2_0 kernels (whose `terms`
/// inline at both sites) and the AVX2 fork driver measured 3–6 % slower in this form, so they keep `pipelined`.
#[inline(always)]
pub(crate) fn pipelined_one_site<S, T>(
    batches: usize,
    init: S,
    terms: impl Fn(usize) -> T,
    chain: impl Fn(S, T) -> S,
) -> S {
    let mut sums = init;
    let mut pending: Option<T> = None;
    for k in 0..batches {
        let next = terms(k);
        if let Some(done) = pending.take() {
            sums = chain(sums, done);
        }
        pending = Some(next);
    }
    match pending {
        Some(done) => chain(sums, done),
        None => sums,
    }
}

/// ggml's `hsum_float_8` on a register (`formats::q1_0::hsum_float_8`'s order: high half plus low half, then
/// lanes 0 + 2 and 1 + 3, then their sum), with the same three rounded additions per lane as the scalar model.
/// Storing the lanes and adding them as scalars cost a per-call store-and-reload that showed in short rows.
#[inline(always)]
pub(crate) unsafe fn hsum_float_8_ps(v: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    // SAFETY: register operations; AVX is enabled by the calling kernel.
    unsafe {
        let r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(r, _mm_movehl_ps(r, r));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }
}

/// The sum of eight i32 lanes (wrapping; the callers' sums are exact).
#[inline(always)]
pub(crate) unsafe fn hsum_epi32(v: std::arch::x86_64::__m256i) -> i32 {
    use std::arch::x86_64::*;
    // SAFETY: register operations; AVX2 is enabled by the calling kernel.
    unsafe {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        _mm_cvtsi128_si32(s)
    }
}

/// The float side of both ISAs' IQ kernels (`formats/iq.rs`), one block at a time: stock haswell's
/// `acc = fma(d, float(lane), acc)` on the eight lanes, or the x64 build's `sumf += d·(float)Σ lanes`.
#[inline(always)]
pub(crate) unsafe fn iq_block_float_step<const HASWELL: bool>(
    acc: &mut std::arch::x86_64::__m256,
    sumf: &mut f32,
    d: f32,
    lanes: std::arch::x86_64::__m256i,
) {
    use std::arch::x86_64::*;
    // SAFETY (whole body): register operations; AVX2 and FMA are enabled by the calling kernel.
    unsafe {
        if HASWELL {
            *acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), *acc);
        } else {
            *sumf += d * hsum_epi32(lanes) as f32;
        }
    }
}

/// The end of both ISAs' IQ kernels: haswell, `OUTPUT_SCALE · hsum_float_8(acc)`; x64, `OUTPUT_SCALE · sumf`, or
/// the whole row again by the model where a −128 was negated (`negated_min`: +128 in the x64 build's `int`,
/// which the kernels' byte arithmetic cannot hold).
#[inline(always)]
pub(crate) unsafe fn iq_row_result<B: crate::formats::iq::IqBlock, const HASWELL: bool>(
    acc: std::arch::x86_64::__m256,
    sumf: f32,
    negated_min: bool,
    x: &[B],
    y: &[crate::formats::q8_k::BlockQ8K],
) -> f32 {
    if HASWELL {
        // SAFETY: register operations; AVX is enabled by the calling kernel.
        return B::OUTPUT_SCALE * unsafe { hsum_float_8_ps(acc) };
    }
    if negated_min {
        return crate::formats::iq::vec_dot_iq_q8_k_x64_model(x, y);
    }
    B::OUTPUT_SCALE * sumf
}

/// Tier 1: every ISA kernel against the scalar models, bit for bit. Exhaustive where the domain is small: all
/// 256 weight bytes in every byte position of a block, all 4 codes against q8 = −128 and 127; random rows of
/// every length 1..=40 blocks (all tails of the 4- and 8-block batches) with special scales.
#[cfg(test)]
mod tests {
    use crate::dispatch::{detected_isa, Isa, Kernels};
    use crate::formats::q2_0::{dequantize_row_q2_0_model, vec_dot_q2_0_q8_0_model, BlockQ2_0};
    use crate::formats::q8_0::{quantize_row_q8_0_model, BlockQ8_0};
    use crate::formats::q8_k::BlockQ8K;
    use crate::fp16::GgmlHalf;
    use crate::FloatOrder;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    fn simd_kernels(order: FloatOrder) -> Vec<Kernels> {
        let isas: Vec<Isa> = [Isa::Avx2, Isa::Avx512]
            .into_iter()
            .filter(|&i| i <= detected_isa())
            .collect();
        if isas.is_empty() {
            eprintln!("this CPU has no AVX2: only the scalar models run here");
        }
        // AVX-512 with and without the IQ2 grid gathers and the Q1_0 tiles' masked loads: every form must match
        // the models on every CPU.
        isas.into_iter()
            .flat_map(|i| Kernels::every_variant(i, order))
            .collect()
    }

    fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits()
    }

    #[test]
    fn every_weight_byte_in_every_position_matches_the_models() {
        let mut rng = SmallRng::seed_from_u64(1);
        for order in FloatOrder::ALL {
            for k in simd_kernels(order) {
                for byte in 0..=255u8 {
                    for nb in [1usize, 4, 8, 9, 17] {
                        let x: Vec<BlockQ2_0> = (0..nb)
                            .map(|b| BlockQ2_0 {
                                d: GgmlHalf::from_bits(0x2e66 + b as u16),
                                qs: std::array::from_fn(|j| {
                                    if (j + b) % 3 == 0 {
                                        byte
                                    } else {
                                        byte.rotate_left(j as u32)
                                    }
                                }),
                            })
                            .collect();
                        for qfill in [-128i8, 127, 1] {
                            let y: Vec<BlockQ8_0> = (0..2 * nb)
                                .map(|_| BlockQ8_0 {
                                    d: GgmlHalf::from_bits(0x3800 + rng.gen_range(0..0x400)),
                                    qs: std::array::from_fn(|j| {
                                        if j % 5 == 0 {
                                            qfill
                                        } else {
                                            rng.gen()
                                        }
                                    }),
                                })
                                .collect();
                            let want = vec_dot_q2_0_q8_0_model(order, &x, &y);
                            let got = k.vec_dot_q2_0_q8_0(&x, &y);
                            assert_eq!(
                                got.to_bits(),
                                want.to_bits(),
                                "{:?} {} byte {byte:#04x} nb {nb}",
                                k.isa,
                                order.name()
                            );
                        }
                        let mut a = vec![0f32; 64 * nb];
                        let mut b = vec![0f32; 64 * nb];
                        dequantize_row_q2_0_model(&x, &mut a);
                        k.dequantize_row_q2_0(&x, &mut b);
                        assert!(a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()));
                    }
                }
            }
        }
    }

    #[test]
    fn random_rows_with_special_scales_match_the_models() {
        let specials = [
            0x0000u16, 0x8000, 0x0001, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x7c01,
        ];
        let mut rng = SmallRng::seed_from_u64(2);
        for order in FloatOrder::ALL {
            for k in simd_kernels(order) {
                for case in 0..20_000 {
                    let nb = 1 + case % 40;
                    let scale = |rng: &mut SmallRng| {
                        if rng.gen_ratio(1, 30) {
                            specials[rng.gen_range(0..specials.len())]
                        } else {
                            0x2000 + rng.gen_range(0..0x1c00)
                        }
                    };
                    let x: Vec<BlockQ2_0> = (0..nb)
                        .map(|_| BlockQ2_0 {
                            d: GgmlHalf::from_bits(scale(&mut rng)),
                            qs: rng.gen(),
                        })
                        .collect();
                    let y: Vec<BlockQ8_0> = (0..2 * nb)
                        .map(|_| {
                            let mut qs = [0i8; 32];
                            rng.fill(&mut qs[..]);
                            BlockQ8_0 {
                                d: GgmlHalf::from_bits(scale(&mut rng)),
                                qs,
                            }
                        })
                        .collect();
                    let want = vec_dot_q2_0_q8_0_model(order, &x, &y);
                    let got = k.vec_dot_q2_0_q8_0(&x, &y);
                    assert!(
                        same(got, want),
                        "{:?} {} case {case}: {got} vs {want}",
                        k.isa,
                        order.name()
                    );
                }
            }
        }
    }

    #[test]
    fn quantizer_matches_the_models_on_ties_and_specials() {
        let specials = [
            0.0f32,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e-40,
            3.0e38,
            -1.0,
            0.5,
        ];
        let mut rng = SmallRng::seed_from_u64(3);
        for order in FloatOrder::ALL {
            for k in simd_kernels(order) {
                for case in 0..20_000 {
                    let n = 32 * (1 + case % 6);
                    let x: Vec<f32> = (0..n)
                        .map(|j| match case % 4 {
                            0 if j % 32 == 0 => 127.0,
                            0 => rng.gen_range(-127i32..127) as f32 + 0.5,
                            1 if rng.gen_ratio(1, 8) => specials[rng.gen_range(0..specials.len())],
                            2 => f32::from_bits(rng.gen()),
                            _ => rng.gen_range(-2.0f32..2.0),
                        })
                        .collect();
                    let mut a = vec![BlockQ8_0::default(); n / 32];
                    let mut b = a.clone();
                    quantize_row_q8_0_model(order, &x, &mut a);
                    k.quantize_row_q8_0(&x, &mut b);
                    assert_eq!(a, b, "{:?} {} case {case}", k.isa, order.name());
                }
            }
        }
    }

    /// `quantize_row_q8_K` (one float order: the same reference C in both builds): 50,000 rows of 1..4 blocks
    /// per table of ties (`k + 0.5` against a largest 127), specials (±0, ±Inf, NaN, subnormals, huge), any bit
    /// pattern, all-zero blocks (whose bsums stock leaves as they were), ordinary floats; equal magnitudes of
    /// both signs (the first one wins).
    #[test]
    fn q8_k_quantizer_matches_the_model() {
        use crate::formats::q8_k::quantize_row_q8_k_model;
        let specials = [
            0.0f32,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e-40,
            -1e-45,
            3.0e38,
            -3.0e38,
        ];
        let mut rng = SmallRng::seed_from_u64(4);
        for k in simd_kernels(FloatOrder::Haswell) {
            for case in 0..50_000 {
                let n = 256 * (1 + case % 4);
                let x: Vec<f32> = (0..n)
                    .map(|j| match case % 6 {
                        0 if j % 256 == 7 => 127.0,
                        0 => rng.gen_range(-127i32..127) as f32 + 0.5,
                        1 if rng.gen_ratio(1, 8) => specials[rng.gen_range(0..specials.len())],
                        2 => f32::from_bits(rng.gen()),
                        3 => 0.0,
                        4 => [-3.0f32, 3.0, 1.0][rng.gen_range(0..3)],
                        _ => rng.gen_range(-2.0f32..2.0),
                    })
                    .collect();
                let fill = BlockQ8K {
                    d: [0xaa; 4],
                    qs: [0x55; 256],
                    bsums: [0x77; 32],
                };
                let mut a = vec![fill; n / 256];
                let mut b = a.clone();
                quantize_row_q8_k_model(&x, &mut a);
                k.quantize_row_q8_k(&x, &mut b);
                assert_eq!(a, b, "{:?} case {case}", k.isa);
            }
        }
    }

    /// The shared loop of the tile tests: for every float order and table (scalar, AVX2, AVX-512), every shape
    /// `(nb, rows, cols)` with row and column strides that leave gaps, weights from `block`, columns of
    /// `per_block · nb` activation blocks from `column` (`column(rng, shape index, blocks)`): each element
    /// emitted exactly once, with the bits of `model` on its pair. Returns how many elements were compared.
    #[allow(clippy::type_complexity)]
    fn tiles_match_the_per_pair_models<B: Copy, A: Copy>(
        seed: u64,
        per_block: usize,
        shapes: &[(usize, usize, usize)],
        block: impl Fn(&mut SmallRng) -> B,
        column: impl Fn(&mut SmallRng, usize, usize) -> Vec<A>,
        model: fn(FloatOrder, &[B], &[A]) -> f32,
        mul_mat: fn(
            &Kernels,
            crate::tiles::Rows<'_, B>,
            crate::tiles::Rows<'_, A>,
            crate::tiles::Emit<'_>,
        ),
    ) -> usize {
        use crate::tiles::Rows;
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut elements = 0usize;
        for order in FloatOrder::ALL {
            // Every form of the per-CPU choices (the Q1_0 tiles with and without masked loads).
            let tables = [Isa::Scalar, Isa::Avx2, Isa::Avx512]
                .into_iter()
                .filter(|&i| i <= detected_isa())
                .flat_map(|i| Kernels::every_variant(i, order));
            for k in tables {
                for (case, &(nb, rows, cols)) in shapes.iter().enumerate() {
                    let (xs, ys) = (nb + case % 2, per_block * nb + 3 * (case % 3));
                    let x: Vec<B> = (0..rows * xs).map(|_| block(&mut rng)).collect();
                    let y: Vec<A> = (0..cols).flat_map(|_| column(&mut rng, case, ys)).collect();
                    let xr = Rows::new(&x, nb, xs, rows).unwrap();
                    let yr = Rows::new(&y, per_block * nb, ys, cols).unwrap();
                    let mut got = vec![f32::NAN; rows * cols];
                    let mut seen = vec![0u8; rows * cols];
                    mul_mat(&k, xr, yr, &mut |r, c, v| {
                        got[c * rows + r] = v;
                        seen[c * rows + r] += 1;
                    });
                    assert!(seen.iter().all(|&n| n == 1), "each element exactly once");
                    for c in 0..cols {
                        for r in 0..rows {
                            let want = model(order, xr.row(r), &yr.row(c)[..per_block * nb]);
                            let v = got[c * rows + r];
                            assert!(
                                same(v, want),
                                "{:?} {} nb {nb} rows {rows} cols {cols}: ({r}, {c}) {v} vs {want}",
                                k.isa,
                                order.name()
                            );
                            elements += 1;
                        }
                    }
                }
            }
        }
        elements
    }

    /// A q8_0 column of `n` blocks for the tile tests: random quants, all −128 in every eleventh block, special
    /// f16 scales among the realistic ones.
    fn q8_0_test_column(rng: &mut SmallRng, _case: usize, n: usize) -> Vec<BlockQ8_0> {
        (0..n)
            .map(|b| {
                let mut qs = [0i8; 32];
                rng.fill(&mut qs[..]);
                if b % 11 == 0 {
                    qs = [-128; 32];
                }
                BlockQ8_0 {
                    d: test_scale(rng),
                    qs,
                }
            })
            .collect()
    }

    /// Tile shapes: row tails (1..=9 rows: the 4-row steps and single rows), block tails, several columns.
    fn tile_shapes(nbs: &[usize]) -> Vec<(usize, usize, usize)> {
        let mut shapes = Vec::new();
        for &nb in nbs {
            for rows in 1..=9 {
                shapes.push((nb, rows, 1 + (nb + rows) % 3));
            }
        }
        shapes
    }

    /// Q2_0 tiles: every element against the per-pair model, bit for bit, over shapes with row tails, block
    /// tails (every `nb % 8`), several columns, column octets (8 to 25 columns: whole octets and leftovers),
    /// strided rows and columns, and enough columns at 64 blocks to cross a prepared-column chunk (100 columns).
    #[test]
    fn mul_mat_tiles_match_the_per_pair_models() {
        let mut shapes = tile_shapes(&[1, 7, 8, 9, 15, 16, 17, 24, 31]);
        for nb in [1, 7, 8, 9, 17, 31] {
            for rows in [1, 4, 5, 9] {
                for cols in [8, 13, 16, 25] {
                    shapes.push((nb, rows, cols));
                }
            }
        }
        shapes.push((64, 6, 100));
        shapes.push((129, 5, 2));
        let n = tiles_match_the_per_pair_models(
            11,
            2,
            &shapes,
            |rng| BlockQ2_0 {
                d: test_scale(rng),
                qs: rng.gen(),
            },
            q8_0_test_column,
            vec_dot_q2_0_q8_0_model,
            Kernels::mul_mat_q2_0_q8_0,
        );
        assert!(n > 2_000);
    }

    /// Q2_0 in ggml ≥ 0.27.0's own AVX2 order: the vec_dot and the tiles of every table against the model, bit
    /// for bit with NaN results compared by their bits too (the order's model is NaN-exact): 200,000 random rows
    /// of 1–40 blocks with special scales (NaN payloads, infinities, zeros, subnormals), every code byte in
    /// every position, and tile shapes with row tails, odd and even block counts and several columns.
    #[test]
    fn q2_0_in_ggml_avx2_order_matches_its_model_nan_bits_included() {
        use crate::formats::q2_0::vec_dot_q2_0_q8_0_avx2_model as model;
        use crate::tiles::Rows;
        let mut rng = SmallRng::seed_from_u64(60);
        // Every table, and at AVX-512 also with the VNNI tiles (not picked by default until they have run here).
        let tables: Vec<Kernels> = [Isa::Scalar, Isa::Avx2, Isa::Avx512]
            .into_iter()
            .filter(|&i| i <= detected_isa())
            .flat_map(|i| Kernels::every_variant(i, FloatOrder::Haswell))
            .flat_map(|k| {
                let vnni =
                    (k.isa == Isa::Avx512).then(|| k.with_q2_0_in_ggml_avx2_order_tiles(true));
                [Some(k.with_q2_0_in_ggml_avx2_order_tiles(false)), vnni]
            })
            .flatten()
            .collect();
        if detected_isa() < Isa::Avx512 {
            println!(
                "SKIPPED: the AVX-512 VNNI tiles in ggml ≥ 0.27.0's order (this CPU has no AVX-512); the scalar \
                 and AVX2 tables ran"
            );
        }
        // Scales: as the other tests, or (`nan_heavy`) a NaN with a random payload and sign one time in three,
        // so that NaNs meet NaNs in every operation whose operand order decides which one comes out.
        let scale = |rng: &mut SmallRng, nan_heavy: bool| {
            if nan_heavy && rng.gen_ratio(1, 3) {
                GgmlHalf::from_bits(0x7c01 | rng.gen_range(0..0x3ff) | (rng.gen::<u16>() & 0x8000))
            } else {
                test_scale(rng)
            }
        };
        let row = |rng: &mut SmallRng, nb: usize, byte: Option<u8>, nan_heavy: bool| {
            (0..nb)
                .map(|j| BlockQ2_0 {
                    d: scale(rng, nan_heavy),
                    qs: match byte {
                        Some(b) => std::array::from_fn(|i| b.rotate_left((i + j) as u32)),
                        None => rng.gen(),
                    },
                })
                .collect::<Vec<_>>()
        };
        let column = |rng: &mut SmallRng, n: usize, nan_heavy: bool| {
            let mut y = q8_0_test_column(rng, 0, n);
            y.iter_mut().for_each(|b| b.d = scale(rng, nan_heavy));
            y
        };
        let mut nans = 0;
        for k in &tables {
            for case in 0..200_000 / tables.len() {
                let nb = 1 + case % 40;
                let byte = (case % 7 == 0).then_some((case / 7) as u8);
                let nan_heavy = case % 5 == 0;
                let x = row(&mut rng, nb, byte, nan_heavy);
                let y = column(&mut rng, 2 * nb, nan_heavy);
                let (got, want) = (k.vec_dot_q2_0_q8_0(&x, &y), model(&x, &y));
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{:?} case {case} nb {nb}: {got:e} vs {want:e}",
                    k.isa
                );
                nans += usize::from(want.is_nan());
            }
            for (case, (nb, rows, cols)) in tile_shapes(&[1, 2, 3, 8, 9, 16, 33])
                .into_iter()
                .enumerate()
            {
                let nan_heavy = case % 2 == 0;
                let x: Vec<BlockQ2_0> = (0..rows)
                    .flat_map(|_| row(&mut rng, nb, None, nan_heavy))
                    .collect();
                let y: Vec<BlockQ8_0> = (0..cols)
                    .flat_map(|_| column(&mut rng, 2 * nb, nan_heavy))
                    .collect();
                let (xr, yr) = (Rows::packed(&x, nb), Rows::packed(&y, 2 * nb));
                let mut seen = vec![0u8; rows * cols];
                k.mul_mat_q2_0_q8_0(xr, yr, &mut |r, c, v| {
                    let want = model(xr.row(r), yr.row(c));
                    assert_eq!(
                        v.to_bits(),
                        want.to_bits(),
                        "{:?} tiles nb {nb} rows {rows} cols {cols}: ({r}, {c}) {v:e} vs {want:e}",
                        k.isa
                    );
                    seen[c * rows + r] += 1;
                });
                assert!(seen.iter().all(|&n| n == 1), "each element exactly once");
            }
        }
        assert!(nans > 1000, "{nans} NaN results");
    }

    /// The quantizers' f32 → f16 by F16C (`avx2::f32_to_f16_ggml_f16c`) against ggml's software routine (the
    /// model) on every positive f32 from 2^-26 up to 2^17 (every half below, at and above the subnormal range,
    /// every rounding tie and the overflow to Inf), on both signs of a spread of them, and on the rest of the
    /// range (0, tiny, huge, Inf, NaNs with payloads) by steps.
    #[test]
    fn f16c_narrowing_gives_the_software_routines_bits() {
        use crate::fp16::f32_to_f16_ggml_soft_model;
        if !std::arch::is_x86_feature_detected!("f16c") {
            eprintln!("no F16C here: the quantizers use the software routine");
            return;
        }
        // SAFETY: F16C was detected above.
        let hw = |b: u32| unsafe { super::avx2::f32_to_f16_ggml_f16c(f32::from_bits(b)) };
        let check = |b: u32| {
            let want = f32_to_f16_ggml_soft_model(f32::from_bits(b));
            assert_eq!(hw(b), want, "f32 bits {b:#010x}");
        };
        // Exponents 101..=143: results from 0 (below half the smallest subnormal) to Inf (2^16 and up).
        for b in (101u32 << 23)..(144u32 << 23) {
            check(b);
            if b % 997 == 0 {
                check(b | 0x8000_0000);
            }
        }
        for b in (0..=u32::MAX).step_by(65_521) {
            check(b);
        }
        for b in [
            0x7f80_0000u32,
            0xff80_0000,
            0x7fc0_0000,
            0xffc0_1234,
            0x7f80_0001,
            0x7fff_ffff,
            0x0000_0001,
        ] {
            check(b);
        }
    }

    /// Q1_0 tiles (AVX-512 haswell order; per pair elsewhere): the same, with all-clear and all-set rows among
    /// the random ones, 60 columns of 32 blocks crossing a prepared-column chunk (51 columns), and single
    /// columns of 16 to 40 rows.
    #[test]
    fn q1_0_mul_mat_tiles_match_the_per_pair_models() {
        use crate::formats::q1_0::{vec_dot_q1_0_q8_0_model, BlockQ1_0};
        let mut shapes = tile_shapes(&[1, 2, 3, 4, 5, 8, 11]);
        shapes.push((32, 5, 60));
        shapes.push((33, 7, 2));
        // Single columns (decode) of 16 rows and more: several steps per stream, so the streams start apart
        // (`stream_starts`), with row tails and odd block counts.
        for (nb, rows) in [
            (1, 16),
            (2, 17),
            (5, 31),
            (31, 16),
            (32, 40),
            (33, 18),
            (64, 16),
            (65, 33),
            (97, 21),
        ] {
            shapes.push((nb, rows, 1));
        }
        let n = tiles_match_the_per_pair_models(
            12,
            4,
            &shapes,
            |rng| BlockQ1_0 {
                d: test_scale(rng),
                qs: match rng.gen_range(0..6) {
                    0 => [0; 16],
                    1 => [0xff; 16],
                    _ => rng.gen(),
                },
            },
            q8_0_test_column,
            vec_dot_q1_0_q8_0_model,
            Kernels::mul_mat_q1_0_q8_0,
        );
        assert!(n > 2_000);
    }

    /// The Q1_0 decode by nibble tables keeps each thread's last column's tables and reuses them while the
    /// column's bytes are the same: a column changed in place (the same buffer, one quant and one scale) and a
    /// shorter product over the same buffer must both be prepared again. Every element against the model.
    #[test]
    fn q1_0_decode_tables_follow_the_column() {
        use crate::dispatch::KernelChoices;
        use crate::formats::q1_0::{vec_dot_q1_0_q8_0_model, BlockQ1_0};
        use crate::tiles::Rows;
        if detected_isa() < Isa::Avx512 {
            eprintln!("this CPU has no AVX-512: the Q1_0 decode tables do not run here");
            return;
        }
        let choices = KernelChoices {
            q1_lookups: true,
            ..KernelChoices::default()
        };
        let k = Kernels::with_choices(Isa::Avx512, FloatOrder::Haswell, choices);
        let mut rng = SmallRng::seed_from_u64(77);
        let (rows, nb) = (37, 8);
        // Finite scales only: one NaN would make every element NaN, and NaNs compare equal here.
        let scale = |rng: &mut SmallRng| GgmlHalf::from_bits(0x2000 + rng.gen_range(0..0x1c00));
        let x: Vec<BlockQ1_0> = (0..rows * nb)
            .map(|_| BlockQ1_0 {
                d: scale(&mut rng),
                qs: rng.gen(),
            })
            .collect();
        let mut y: Vec<BlockQ8_0> = (0..4 * nb)
            .map(|_| BlockQ8_0 {
                d: scale(&mut rng),
                qs: rng.gen(),
            })
            .collect();
        let check = |y: &[BlockQ8_0], nb: usize, what: &str| {
            let xr = Rows::new(&x, nb, nb, rows * 8 / nb).unwrap();
            let xr = xr.slice(0, rows);
            let yr = Rows::new(y, 4 * nb, 4 * nb, 1).unwrap();
            let mut got = vec![f32::NAN; rows];
            k.mul_mat_q1_0_q8_0(xr, yr, &mut |r, _, v| got[r] = v);
            for (r, &v) in got.iter().enumerate() {
                let want = vec_dot_q1_0_q8_0_model(FloatOrder::Haswell, xr.row(r), &y[..4 * nb]);
                assert!(
                    v.to_bits() == want.to_bits(),
                    "{what}: row {r}: {v} vs {want}"
                );
            }
        };
        check(&y, nb, "first column");
        check(&y, nb, "the same column again");
        y[5].qs[3] = y[5].qs[3].wrapping_add(77);
        check(&y, nb, "one quant changed in place");
        y[30].d = scale(&mut rng);
        y[30].qs[0] = -128;
        check(&y, nb, "a scale changed in place");
        check(&y[..16], 4, "a shorter product over the same buffer");
    }

    /// The AVX-512 Q1_0 column preparation against the plain model (`tiles::q1_prepare_column`), entry for
    /// entry and bit for bit: columns of 0..=9 blocks (odd counts end in a half-empty pair) plus 0..3 spare
    /// q8_0 blocks, random quants with every byte value, blocks of all −128, special scales.
    #[test]
    fn q1_0_column_preparation_matches_the_model() {
        use crate::tiles::{q1_prepare_column, Q1ColumnPair};
        if detected_isa() < Isa::Avx512 {
            eprintln!("this CPU has no AVX-512: the Q1_0 tiles (and their column preparation) do not run here");
            return;
        }
        fn bytes(c: &[Q1ColumnPair]) -> &[u8] {
            // SAFETY: plain arrays of integers and floats, no padding (sizes are multiples of 64).
            unsafe { std::slice::from_raw_parts(c.as_ptr() as *const u8, std::mem::size_of_val(c)) }
        }
        let mut rng = SmallRng::seed_from_u64(41);
        let (mut want, mut got) = (Vec::new(), Vec::new());
        let mut seen = [false; 256];
        for case in 0..4000 {
            let len = 4 * (case % 10) + (case / 10) % 4;
            let y: Vec<BlockQ8_0> = (0..len)
                .map(|_| {
                    let mut qs = [0i8; 32];
                    rng.fill(&mut qs[..]);
                    if rng.gen_ratio(1, 8) {
                        qs = [-128; 32];
                    }
                    qs.iter().for_each(|&q| seen[q as u8 as usize] = true);
                    BlockQ8_0 {
                        d: test_scale(&mut rng),
                        qs,
                    }
                })
                .collect();
            q1_prepare_column(&y, &mut want);
            // SAFETY: the CPU has AVX-512 (checked above).
            unsafe { super::avx512::q1_prepare_column(&y, &mut got) };
            assert_eq!(got.len(), want.len(), "column of {len} q8_0 blocks");
            assert!(bytes(&got) == bytes(&want), "column of {len} q8_0 blocks");
        }
        assert!(seen.iter().all(|&s| s));
    }

    /// PQ2_0 and PTQ1_0 tiles (AVX-512, both float orders; per pair elsewhere): every element against the
    /// per-pair model, bit for bit, over row tails, block tails (every `nb % 4`), strided rows and columns, and 60
    /// columns of 64 blocks, which cross a prepared-column chunk (51 columns); all-code-3 PQ2_0 rows and PTQ1_0
    /// bytes 243..=255 among the random ones.
    #[test]
    fn fork_mul_mat_tiles_match_the_per_pair_models() {
        use crate::formats::pq2_0::{vec_dot_pq2_0_q8_0_model, BlockPQ2_0};
        use crate::formats::ptq1_0::{vec_dot_ptq1_0_q8_0_model, BlockPTQ1_0};
        let mut shapes = tile_shapes(&[1, 2, 3, 4, 5, 7, 8, 9, 12]);
        shapes.push((64, 5, 60));
        shapes.push((13, 7, 3));
        let n = tiles_match_the_per_pair_models(
            13,
            4,
            &shapes,
            |rng| BlockPQ2_0 {
                d: test_scale(rng),
                qs: match rng.gen_range(0..6) {
                    0 => [0xff; 32],
                    _ => rng.gen(),
                },
            },
            q8_0_test_column,
            vec_dot_pq2_0_q8_0_model,
            Kernels::mul_mat_pq2_0_q8_0,
        );
        assert!(n > 2_000);
        let n = tiles_match_the_per_pair_models(
            14,
            4,
            &shapes,
            |rng| {
                let packed: [u8; 26] = match rng.gen_range(0..6) {
                    0 => std::array::from_fn(|_| rng.gen_range(243..=255)),
                    _ => rng.gen(),
                };
                BlockPTQ1_0 {
                    qs: packed[..24].try_into().expect("24"),
                    qh: [packed[24], packed[25]],
                    d: test_scale(rng),
                }
            },
            q8_0_test_column,
            vec_dot_ptq1_0_q8_0_model,
            Kernels::mul_mat_ptq1_0_q8_0,
        );
        assert!(n > 2_000);
    }

    /// TQ2_0 tiles (AVX-512 haswell order; per pair elsewhere): every element against the per-pair model, bit
    /// for bit, over row tails (the two row pairs of a step and single rows), strided rows and columns, 40
    /// columns of 16 blocks (the two-column kernel and a last single column), all-code-3 rows among random
    /// ones, and q8_K columns of all −128 or all 127, with the quantizer's bsums or (one shape in five) arbitrary
    /// i16 bsums up to ±32768, whose columns the driver hands to `vec_dot` because stock's lanes may wrap.
    #[test]
    fn tq2_0_mul_mat_tiles_match_the_per_pair_models() {
        use crate::formats::tq2_0::{vec_dot_tq2_0_q8_k_model, BlockTQ2_0};
        let mut shapes = tile_shapes(&[1, 2, 3, 5, 16]);
        shapes.push((16, 5, 40));
        shapes.push((7, 8, 3));
        let n = tiles_match_the_per_pair_models(
            16,
            1,
            &shapes,
            |rng| BlockTQ2_0 {
                qs: match rng.gen_range(0..6) {
                    0 => [0xff; 64],
                    _ => std::array::from_fn(|_| rng.gen()),
                },
                d: test_scale(rng),
            },
            q8_k_activations,
            vec_dot_tq2_0_q8_k_model,
            Kernels::mul_mat_tq2_0_q8_k,
        );
        assert!(n > 2_000);
    }

    /// TQ1_0 tiles (AVX-512 haswell order; per pair elsewhere): as the TQ2_0 tile test, with packed bytes of
    /// every value 0..=255 (243..=255, which the quantizer never writes, included) among the random ones.
    #[test]
    fn tq1_0_mul_mat_tiles_match_the_per_pair_models() {
        use crate::formats::tq1_0::{vec_dot_tq1_0_q8_k_model, BlockTQ1_0};
        let mut shapes = tile_shapes(&[1, 2, 3, 5, 16]);
        shapes.push((16, 5, 40));
        shapes.push((7, 8, 3));
        let n = tiles_match_the_per_pair_models(
            17,
            1,
            &shapes,
            |rng| {
                let packed: [u8; 52] = match rng.gen_range(0..6) {
                    0 => std::array::from_fn(|_| rng.gen_range(243..=255)),
                    1 => std::array::from_fn(|_| rng.gen_range(0..243)),
                    _ => std::array::from_fn(|_| rng.gen()),
                };
                BlockTQ1_0 {
                    qs: packed[..48].try_into().expect("48"),
                    qh: packed[48..].try_into().expect("4"),
                    d: test_scale(rng),
                }
            },
            q8_k_activations,
            vec_dot_tq1_0_q8_k_model,
            Kernels::mul_mat_tq1_0_q8_k,
        );
        assert!(n > 2_000);
    }

    /// The f16 scales the fork-format tests mix in: ±0, subnormals, ±65504, ±Inf, NaNs.
    const SPECIAL_SCALES: [u16; 10] = [
        0x0000, 0x8000, 0x0001, 0x83ff, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x7c01,
    ];

    /// A special scale one time in 40, else an ordinary one (about 0.008 to 0.9).
    fn test_scale(rng: &mut SmallRng) -> GgmlHalf {
        GgmlHalf::from_bits(if rng.gen_ratio(1, 40) {
            SPECIAL_SCALES[rng.gen_range(0..SPECIAL_SCALES.len())]
        } else {
            0x2000 + rng.gen_range(0..0x1c00)
        })
    }

    /// The shared loop of the formats' kernel tests: 200,000 rows of 1..12 blocks (every tail of the 2- and 4-block
    /// batches) per float order and SIMD instruction set, `block(rng, case, b)` making block `b` of row `case` and
    /// `activations(rng, case, nb)` the activation blocks of a row of `nb` blocks. The kernel must give the
    /// model's bits, NaN results included (their count is printed).
    fn kernels_match_the_models<B, A>(
        name: &str,
        seed: u64,
        block: impl Fn(&mut SmallRng, usize, usize) -> B,
        activations: impl Fn(&mut SmallRng, usize, usize) -> Vec<A>,
        model: fn(FloatOrder, &[B], &[A]) -> f32,
        kernel: fn(&Kernels, &[B], &[A]) -> f32,
    ) {
        let mut rng = SmallRng::seed_from_u64(seed);
        for order in FloatOrder::ALL {
            for k in simd_kernels(order) {
                let mut nan_results = 0;
                for case in 0..200_000usize {
                    let nb = 1 + case % 12;
                    let x: Vec<B> = (0..nb).map(|b| block(&mut rng, case, b)).collect();
                    let y = activations(&mut rng, case, nb);
                    let (want, got) = (model(order, &x, &y), kernel(&k, &x, &y));
                    assert!(
                        same(got, want),
                        "{name} {:?} {} case {case}: {got} vs {want}",
                        k.isa,
                        order.name()
                    );
                    nan_results += u32::from(want.is_nan());
                }
                eprintln!(
                    "{name} {:?} {}: 200000 cases, {nan_results} NaN results",
                    k.isa,
                    order.name()
                );
            }
        }
    }

    /// The 128-weight formats' activations: four q8_0 blocks per block, all −128 in every seventh row, with
    /// `test_scale` scales.
    fn q8_0_activations(rng: &mut SmallRng, case: usize, nb: usize) -> Vec<BlockQ8_0> {
        (0..4 * nb)
            .map(|_| {
                let mut qs = [-128i8; 32];
                if !case.is_multiple_of(7) {
                    rng.fill(&mut qs[..]);
                }
                BlockQ8_0 {
                    d: test_scale(rng),
                    qs,
                }
            })
            .collect()
    }

    /// Q1_0, both stock orders (the haswell build's eight lanes, the x64 build's chain): every byte value in
    /// every one of the 16 bit positions, all-clear rows (every weight negative, so q8 = −128 meets a cleared
    /// bit: −128 in the haswell order, +128 in the x64 one), all-set rows, random bits. The stock libraries
    /// themselves are compared in `tests/stock_bits.rs`.
    #[test]
    fn q1_0_kernels_match_the_models() {
        use crate::formats::q1_0::{vec_dot_q1_0_q8_0_model, BlockQ1_0};
        kernels_match_the_models(
            "q1_0",
            7,
            |rng, case, b| BlockQ1_0 {
                d: test_scale(rng),
                qs: std::array::from_fn(|j| match case % 5 {
                    0 => ((case / 5 + 7 * b + 31 * j) % 256) as u8,
                    1 => 0x00,
                    2 => 0xff,
                    _ => rng.gen(),
                }),
            },
            q8_0_activations,
            vec_dot_q1_0_q8_0_model,
            Kernels::vec_dot_q1_0_q8_0,
        );
    }

    /// q8_K activations: quants random, all −128 or all 127; bsums the quantizer's own (sums of sixteen) in most
    /// rows, arbitrary i16 (including −32768 and 32767) in one row of five; special f32 scales one block in 40.
    fn q8_k_activations(rng: &mut SmallRng, case: usize, nb: usize) -> Vec<BlockQ8K> {
        let f32_specials = [
            0.0f32,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e-40,
            3.0e38,
        ];
        (0..nb)
            .map(|_| {
                let mut blk = BlockQ8K::default();
                match case % 7 {
                    0 => blk.qs = [-128; 256],
                    1 => blk.qs = [127; 256],
                    _ => rng.fill(&mut blk.qs[..]),
                }
                for m in 0..16 {
                    let v = if case % 5 == 3 {
                        [i16::MIN, i16::MAX, rng.gen()][rng.gen_range(0..3)]
                    } else {
                        blk.qs[16 * m..16 * m + 16].iter().map(|&q| q as i16).sum()
                    };
                    blk.set_bsum(m, v);
                }
                let d = if rng.gen_ratio(1, 40) {
                    f32_specials[rng.gen_range(0..f32_specials.len())]
                } else {
                    rng.gen_range(0.0001f32..0.05)
                };
                blk.d = d.to_le_bytes();
                blk
            })
            .collect()
    }

    /// TQ2_0 against q8_K, both orders, 200,000 rows per order and table: every byte value in every code
    /// position, all-code-3 rows, random codes; quants random, all −128 or all 127; bsums the quantizer's own
    /// (sums of sixteen) in most rows, arbitrary i16 (including −32768 and 32767) in one row of five, which
    /// makes stock's i16 lanes wrap; special f16 weight scales and special f32 activation scales.
    #[test]
    fn tq2_0_kernels_match_the_models() {
        use crate::formats::tq2_0::{vec_dot_tq2_0_q8_k_model, BlockTQ2_0};
        kernels_match_the_models(
            "tq2_0",
            8,
            |rng, case, b| BlockTQ2_0 {
                qs: std::array::from_fn(|j| match case % 4 {
                    0 => ((case / 4 + 7 * b + 31 * j) % 256) as u8,
                    1 => 0xff,
                    _ => rng.gen(),
                }),
                d: test_scale(rng),
            },
            q8_k_activations,
            vec_dot_tq2_0_q8_k_model,
            Kernels::vec_dot_tq2_0_q8_k,
        );
    }

    /// One IQ format against q8_K, both orders: every byte value in every position of the block (cases cycle),
    /// every sign set (so q8 = −128 is negated: −128 in the haswell order, +128 in the x64 one), random bytes;
    /// the q8_K rows of `q8_k_activations`, special f16 scales.
    fn iq_kernels_match_the_models<B: crate::dispatch::IqFormat>(
        name: &str,
        format: usize,
        seed: u64,
    ) {
        let bytes = std::mem::size_of::<B>();
        kernels_match_the_models(
            name,
            seed,
            |rng, case, b| {
                let mut raw: Vec<u8> = (0..bytes)
                    .map(|j| ((case / 3 + 7 * b + 31 * j) % 256) as u8)
                    .collect();
                match case % 3 {
                    0 => {}
                    1 => crate::ab::cases::all_negative(format, &mut raw[2..]),
                    _ => rng.fill(&mut raw[..]),
                }
                raw[..2].copy_from_slice(&test_scale(rng).to_bits().to_le_bytes());
                crate::formats::blocks::<B>(&raw)[0]
            },
            q8_k_activations,
            crate::formats::iq::vec_dot_iq_q8_k_model::<B>,
            Kernels::vec_dot_iq_q8_k::<B>,
        );
    }

    #[test]
    fn iq2_xxs_kernels_match_the_models() {
        iq_kernels_match_the_models::<crate::formats::iq2_xxs::BlockIQ2XXS>("iq2_xxs", 0, 9);
    }

    #[test]
    fn iq2_xs_kernels_match_the_models() {
        iq_kernels_match_the_models::<crate::formats::iq2_xs::BlockIQ2XS>("iq2_xs", 1, 10);
    }

    #[test]
    fn iq2_s_kernels_match_the_models() {
        iq_kernels_match_the_models::<crate::formats::iq2_s::BlockIQ2S>("iq2_s", 2, 11);
    }

    #[test]
    fn iq3_xxs_kernels_match_the_models() {
        iq_kernels_match_the_models::<crate::formats::iq3_xxs::BlockIQ3XXS>("iq3_xxs", 3, 12);
    }

    #[test]
    fn iq3_s_kernels_match_the_models() {
        iq_kernels_match_the_models::<crate::formats::iq3_s::BlockIQ3S>("iq3_s", 4, 13);
    }

    /// TQ1_0 against q8_K, both orders, 200,000 rows per order and table: every byte value 0..=255 (the
    /// quantizer's 0..=242 and the 243..=255 it never writes) in every one of the 52 packed positions as cases
    /// advance, all-0xff rows, random bytes; the q8_K rows of `q8_k_activations` (bsums arbitrary in one row of
    /// five: stock's i16 lanes wrap); special f16 scales.
    #[test]
    fn tq1_0_kernels_match_the_models() {
        use crate::formats::tq1_0::{vec_dot_tq1_0_q8_k_model, BlockTQ1_0};
        kernels_match_the_models(
            "tq1_0",
            14,
            |rng, case, b| {
                let mut byte = |j: usize| match case % 3 {
                    0 => ((case / 3 + 7 * b + 31 * j) % 256) as u8,
                    1 => 0xff,
                    _ => rng.gen(),
                };
                let qs = std::array::from_fn(&mut byte);
                let qh = std::array::from_fn(|j| byte(48 + j));
                BlockTQ1_0 {
                    qs,
                    qh,
                    d: test_scale(rng),
                }
            },
            q8_k_activations,
            vec_dot_tq1_0_q8_k_model,
            Kernels::vec_dot_tq1_0_q8_k,
        );
    }

    /// TQ1_0 and TQ2_0 rows long enough that the kernels' once-per-row bsum test (a saturating sum of squares)
    /// trips on the quantizer's own bsums (all −128 quants: every |bsum| 2048) and the row is redone by the
    /// model, next to long rows of random quants that stay on the vector path: bit for bit, both orders.
    #[test]
    fn tq_long_rows_match_the_models_on_both_sides_of_the_bsum_test() {
        use crate::formats::tq1_0::{vec_dot_tq1_0_q8_k_model, BlockTQ1_0};
        use crate::formats::tq2_0::{vec_dot_tq2_0_q8_k_model, BlockTQ2_0};
        let mut rng = SmallRng::seed_from_u64(15);
        for order in FloatOrder::ALL {
            for k in simd_kernels(order) {
                for (nb, all_min) in [(110, true), (110, false), (300, false), (97, true)] {
                    let y: Vec<BlockQ8K> = (0..nb)
                        .map(|_| {
                            let mut blk = BlockQ8K::default();
                            if all_min {
                                blk.qs = [-128; 256];
                            } else {
                                rng.fill(&mut blk.qs[..]);
                            }
                            for m in 0..16 {
                                blk.set_bsum(
                                    m,
                                    blk.qs[16 * m..16 * m + 16].iter().map(|&q| q as i16).sum(),
                                );
                            }
                            blk.d = rng.gen_range(0.0001f32..0.05).to_le_bytes();
                            blk
                        })
                        .collect();
                    let x1: Vec<BlockTQ1_0> = (0..nb)
                        .map(|_| BlockTQ1_0 {
                            qs: std::array::from_fn(|_| rng.gen_range(0..243)),
                            qh: std::array::from_fn(|_| rng.gen_range(0..243)),
                            d: test_scale(&mut rng),
                        })
                        .collect();
                    let x2: Vec<BlockTQ2_0> = (0..nb)
                        .map(|_| BlockTQ2_0 {
                            qs: std::array::from_fn(|_| rng.gen()),
                            d: test_scale(&mut rng),
                        })
                        .collect();
                    let pairs = [
                        (
                            vec_dot_tq1_0_q8_k_model(order, &x1, &y),
                            k.vec_dot_tq1_0_q8_k(&x1, &y),
                        ),
                        (
                            vec_dot_tq2_0_q8_k_model(order, &x2, &y),
                            k.vec_dot_tq2_0_q8_k(&x2, &y),
                        ),
                    ];
                    for (name, (want, got)) in ["TQ1_0", "TQ2_0"].into_iter().zip(pairs) {
                        assert!(
                            same(got, want),
                            "{name} {:?} {} nb {nb}: {got} vs {want}",
                            k.isa,
                            order.name()
                        );
                    }
                }
            }
        }
    }

    /// PQ2_0 (no stock build to compare with: the fork is not available): the SIMD kernels against the scalar
    /// models written from the specification; every byte value in every code position, all-code-3 rows.
    #[test]
    fn pq2_0_kernels_match_the_models() {
        use crate::formats::pq2_0::{vec_dot_pq2_0_q8_0_model, BlockPQ2_0};
        kernels_match_the_models(
            "pq2_0",
            5,
            |rng, case, b| BlockPQ2_0 {
                d: test_scale(rng),
                qs: std::array::from_fn(|j| match case % 4 {
                    0 => ((case / 4 + 7 * b + 31 * j) % 256) as u8,
                    1 => 0xff,
                    _ => rng.gen(),
                }),
            },
            q8_0_activations,
            vec_dot_pq2_0_q8_0_model,
            Kernels::vec_dot_pq2_0_q8_0,
        );
    }

    /// PTQ1_0: the SIMD kernels against the scalar models written from the specification; every byte value
    /// 0..=255 in every one of the 26 packed positions (cases cycle through them), rows of bytes 243..=255 that no
    /// quantizer writes.
    #[test]
    fn ptq1_0_kernels_match_the_models() {
        use crate::formats::ptq1_0::{vec_dot_ptq1_0_q8_0_model, BlockPTQ1_0};
        kernels_match_the_models(
            "ptq1_0",
            6,
            |rng, case, _| {
                // Every (position, value) pair within each run of 26·256 cases.
                let (pos, value) = ((case / 256) % 26, (case % 256) as u8);
                let mut packed: [u8; 26] = match case % 5 {
                    0 => [value; 26],
                    1 => std::array::from_fn(|_| rng.gen_range(243..=255)),
                    _ => std::array::from_fn(|_| rng.gen()),
                };
                packed[pos] = value;
                BlockPTQ1_0 {
                    qs: packed[..24].try_into().expect("24"),
                    qh: [packed[24], packed[25]],
                    d: test_scale(rng),
                }
            },
            q8_0_activations,
            vec_dot_ptq1_0_q8_0_model,
            Kernels::vec_dot_ptq1_0_q8_0,
        );
    }

    /// A single trit in each element position, with a q8 row that is zero except at that element: the kernel's
    /// sum is exactly ±d·d1·q there, so a kernel that decodes the right trits into the wrong elements fails.
    #[test]
    fn ptq1_0_kernels_place_each_element() {
        use crate::formats::ptq1_0::{element_source, BlockPTQ1_0, POW3};
        for order in FloatOrder::ALL {
            for k in simd_kernels(order) {
                for nb in [2usize, 4, 5] {
                    for p in 0..128 {
                        let (src, n) = element_source(p);
                        // Byte value with digit n = 2 and every other digit 1: start from all-ones digits.
                        let mut digits = [1u32; 5];
                        digits[n] = 2;
                        let x5 = digits.iter().fold(0, |a, &t| 3 * a + t);
                        let byte = (x5 * 256).div_ceil(243) as u8;
                        let ones = (121u32 * 256).div_ceil(243) as u8;
                        let mut packed = [ones; 26];
                        packed[src] = byte;
                        let block = BlockPTQ1_0 {
                            qs: packed[..24].try_into().expect("24"),
                            qh: [packed[24], packed[25]],
                            d: GgmlHalf::from_bits(0x3c00),
                        };
                        let x = vec![block; nb];
                        let mut y = vec![
                            BlockQ8_0 {
                                d: GgmlHalf::from_bits(0x3c00),
                                qs: [0; 32],
                            };
                            4 * nb
                        ];
                        // Element p of the last block only: the sum must be q (trit 2 → weight +1).
                        y[4 * (nb - 1) + p / 32].qs[p % 32] = 5;
                        let got = k.vec_dot_ptq1_0_q8_0(&x, &y);
                        assert_eq!(
                            got, 5.0,
                            "{:?} element {p} (byte {src}, digit {n}, 3^n = {})",
                            k.isa, POW3[n]
                        );
                    }
                }
            }
        }
    }
}
