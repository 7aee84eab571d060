//! Q2_0 · q8_0: per block half, codes are expanded with one cross-lane dword permute, a per-dword variable shift
//! and a mask, which leaves them in a "shift-major" order inside each 128-bit lane (byte `4r + b` holds the code
//! of weight `4b + r`); the q8 bytes get the matching in-lane byte shuffle. `maddubs(c, q) − maddubs(1, q)` then
//! gives `Σ(c − 1)·q` in pairs. A whole half-block sum is bounded by 32·2·128 = 8192, so the reduction of four
//! blocks (eight halves) stays in i16 with a `phaddw` tree. The float chain follows the stock build exactly:
//! per-block `sumi` in SIMD lanes, then `sumf` sequentially in block order. The tile kernel shares each row's
//! expansion between prepared columns.

use super::*;

/// `Σ(c − 1)·q` of one 32-weight half as 16 i16 pair sums. `codes` points at the block's 16 code bytes
/// (`idx` picks dwords 0,1 or 2,3 of them), `q` at the 32 q8 bytes.
#[inline(always)]
pub(super) unsafe fn q2_half_pairs(codes: __m256i, idx: __m256i, q: *const u8) -> __m256i {
    // SAFETY (whole body): the caller guarantees 32 readable bytes at `q`; the intrinsics need AVX2, which the
    // enclosing target_feature functions enable.
    unsafe {
        let shifts = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
        let shift_major = _mm256_setr_epi8(
            0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1, 5, 9, 13, 2, 6,
            10, 14, 3, 7, 11, 15,
        );
        let c = _mm256_and_si256(
            _mm256_srlv_epi32(_mm256_permutevar8x32_epi32(codes, idx), shifts),
            _mm256_set1_epi8(3),
        );
        let qv = _mm256_loadu_si256(q as *const __m256i);
        let cq = _mm256_maddubs_epi16(c, _mm256_shuffle_epi8(qv, shift_major));
        _mm256_sub_epi16(cq, _mm256_maddubs_epi16(_mm256_set1_epi8(1), qv))
    }
}

/// Both halves of a 64-weight Q2_0 code group (16 code bytes at `codes`) as `q2_half_pairs`.
#[inline(always)]
pub(super) unsafe fn q2_group_pairs(
    codes: *const u8,
    q0: *const u8,
    q1: *const u8,
) -> [__m256i; 2] {
    // SAFETY (whole body): the caller guarantees 16 bytes at `codes` and 32 at `q0` and `q1`; AVX2 is enabled
    // by the calling kernel.
    unsafe {
        let c = _mm256_castsi128_si256(_mm_loadu_si128(codes as *const __m128i));
        [
            q2_half_pairs(c, _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), q0),
            q2_half_pairs(c, _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3), q1),
        ]
    }
}

/// Per-batch float terms of four Q2_0 blocks: for the FMA chain `(d0, sumi)`, for the unfused chain
/// `(d0·sumi, _)`, lane `k` belonging to block `k`. Nothing here depends on the running `sumf`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q2_batch_terms<const FMA: bool>(
    xb: *const u8,
    yb: *const u8,
) -> (__m128, __m128) {
    // SAFETY (whole body): the caller guarantees 4 whole Q2_0 blocks at `xb` and 8 q8_0 blocks at `yb`;
    // features are enabled by this function.
    unsafe {
        let s = group_sums(
            |g, q0, q1| q2_group_pairs(xb.add(g * Q2_BYTES + 2), q0, q1),
            yb,
        );
        let d1 = group_d1(yb);
        let mut d0_bits = [0u16; 8];
        for (k, d) in d0_bits.iter_mut().take(4).enumerate() {
            *d = (xb.add(k * Q2_BYTES) as *const u16).read_unaligned();
        }
        let d0 = _mm_cvtph_ps(_mm_loadu_si128(d0_bits.as_ptr() as *const __m128i));
        let (s_lo, s_hi) = (_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
        let (d1_lo, d1_hi) = (_mm256_castps256_ps128(d1), _mm256_extractf128_ps::<1>(d1));
        if FMA {
            (
                d0,
                _mm_fmadd_ps(d1_hi, s_hi, _mm_fmadd_ps(d1_lo, s_lo, _mm_setzero_ps())),
            )
        } else {
            let sumi = _mm_add_ps(
                _mm_add_ps(_mm_setzero_ps(), _mm_mul_ps(d1_lo, s_lo)),
                _mm_mul_ps(d1_hi, s_hi),
            );
            (_mm_mul_ps(d0, sumi), d0)
        }
    }
}

/// The sequential part: four steps of `sumf = fma(d0, sumi, sumf)` (or `sumf += d0·sumi`), in block order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q2_batch_chain<const FMA: bool>(
    mut sumf: f32,
    terms: (__m128, __m128),
) -> f32 {
    let mut a = [0f32; 4];
    let mut b = [0f32; 4];
    // SAFETY: plain stores of two registers into local arrays.
    unsafe {
        _mm_storeu_ps(a.as_mut_ptr(), terms.0);
        _mm_storeu_ps(b.as_mut_ptr(), terms.1);
    }
    for k in 0..4 {
        sumf = if FMA {
            a[k].mul_add(b[k], sumf)
        } else {
            sumf + a[k]
        };
    }
    sumf
}

/// `ggml_vec_dot_q2_0_q8_0` with the haswell (`FMA = true`) or x64 (`FMA = false`) float chain.
///
/// Software-pipelined: the work of batch `k + 1` is issued before the sequential chain of batch `k`, so the
/// chain runs while the next batch's vector work executes instead of behind it.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `y.len() >= 2 * x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q2_0_q8_0<const FMA: bool>(x: &[BlockQ2_0], y: &[BlockQ8_0]) -> f32 {
    debug_assert!(y.len() >= 2 * x.len());
    let batches = x.len() / 4;
    let xp = x.as_ptr() as *const u8;
    let yp = y.as_ptr() as *const u8;
    // SAFETY (both closures): batch k < batches covers blocks 4k..4k+4 of x and 8k..8k+8 of y, inside the
    // slices; this function's target features cover the helpers'.
    let sumf = pipelined(
        batches,
        |k| unsafe { q2_batch_terms::<FMA>(xp.add(4 * k * Q2_BYTES), yp.add(8 * k * Q8_BYTES)) },
        |sumf, terms| unsafe { q2_batch_chain::<FMA>(sumf, terms) },
    );
    // Up to three blocks left: the scalar chain continues with the same float order.
    let done = 4 * batches;
    vec_dot_q2_0_q8_0_from::<FMA>(sumf, &x[done..], &y[2 * done..])
}

/// Lane order of the AVX2 tile kernel's per-batch vectors (`q2_tile_terms`): lane `l` holds block
/// `AVX2_TILE_BLOCKS[l]` (what two `vphaddd` and one `vshufps` leave, kept instead of permuted back).
pub(super) const AVX2_TILE_BLOCKS: [usize; 8] = [0, 2, 4, 6, 1, 3, 5, 7];

/// `vpshufb` index grouping one 16-quant lane by field: bytes `4k..4k+4` take the quants of weights `4i + k`.
pub(super) const FIELD_GROUPS: [u8; 32] = {
    let mut t = [0u8; 32];
    let mut j = 0;
    while j < 32 {
        t[j] = (16 * (j / 16) + 4 * (j % 4) + (j % 16) / 4) as u8;
        j += 1;
    }
    t
};

/// Prepares the full batches of one q8_0 column (`y.len() / 16` of them) into `out`, in the layout of
/// `tiles::Q2ColumnBatch` (the quants exactly as the AVX-512 preparation lays them out; `qsum` and `d1` in
/// `AVX2_TILE_BLOCKS` order: lane `8h + l` for q8_0 block `2·AVX2_TILE_BLOCKS[l] + h`).
///
/// # Safety
/// The CPU must have AVX2 and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn q2_prepare_column(y: &[BlockQ8_0], out: &mut Vec<Q2ColumnBatch>) {
    out.clear();
    let yp = y.as_ptr() as *const u8;
    // SAFETY: batch k < y.len() / 16 reads q8_0 blocks 16k..16k+16 of `y`; stores go to the local batch.
    unsafe {
        let groups = _mm256_loadu_si256(FIELD_GROUPS.as_ptr() as *const __m256i);
        let interleave = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for k in 0..y.len() / 16 {
            let yb = yp.add(16 * k * Q8_BYTES);
            let mut batch = Q2ColumnBatch::ZERO;
            for b in 0..8 {
                // Block b's 64 quants: lanes L0..L3 of 16; each lane grouped by field, then a 4 × 4 transpose
                // of dwords gathers field f's four dwords [L0, L1, L2, L3].
                let q = yb.add(2 * b * Q8_BYTES + 2);
                let a = _mm256_shuffle_epi8(_mm256_loadu_si256(q as *const __m256i), groups);
                let c = _mm256_shuffle_epi8(
                    _mm256_loadu_si256(q.add(Q8_BYTES) as *const __m256i),
                    groups,
                );
                let f01 = _mm256_permutevar8x32_epi32(_mm256_unpacklo_epi32(a, c), interleave);
                let f23 = _mm256_permutevar8x32_epi32(_mm256_unpackhi_epi32(a, c), interleave);
                let (h, g) = (b / 4, b % 4);
                let fields = [
                    _mm256_castsi256_si128(f01),
                    _mm256_extracti128_si256::<1>(f01),
                    _mm256_castsi256_si128(f23),
                    _mm256_extracti128_si256::<1>(f23),
                ];
                for (f, v) in fields.into_iter().enumerate() {
                    _mm_storeu_si128(batch.q[h][f].as_mut_ptr().add(16 * g) as *mut __m128i, v);
                }
            }
            let mut d1_bits = [0u16; 16];
            for (l, &b) in AVX2_TILE_BLOCKS.iter().enumerate() {
                for h in 0..2 {
                    let block = &y[16 * k + 2 * b + h];
                    batch.qsum[8 * h + l] = block.qs.iter().map(|&v| v as i32).sum();
                    d1_bits[8 * h + l] = block.d.to_bits();
                }
            }
            for h in 0..2 {
                let words = _mm_loadu_si128(d1_bits.as_ptr().add(8 * h) as *const __m128i);
                _mm256_storeu_ps(batch.d1.as_mut_ptr().add(8 * h), _mm256_cvtph_ps(words));
            }
            out.push(batch);
        }
    }
}

/// Eight dword partials of `Σ c·q` for the two blocks whose code bytes are in `codes` (one per 128-bit lane):
/// field `k` of every code byte (shifted down and masked: AVX2 has no GFNI) times the quants prepared for it
/// with `vpmaddubsw` (at most 2·3·128 per i16 pair, 4 fields fit in i16), summed, then widened in pairs.
#[inline(always)]
pub(super) unsafe fn q2_tile_pair(codes: __m256i, q: &[[u8; 64]; 4], half: usize) -> __m256i {
    // SAFETY (whole body): 32-byte loads inside the prepared arrays; features come from the caller.
    unsafe {
        let three = _mm256_set1_epi8(3);
        let load = |k: usize| _mm256_loadu_si256(q[k].as_ptr().add(32 * half) as *const __m256i);
        let field = |k: i32| match k {
            0 => _mm256_and_si256(codes, three),
            1 => _mm256_and_si256(_mm256_srli_epi16::<2>(codes), three),
            2 => _mm256_and_si256(_mm256_srli_epi16::<4>(codes), three),
            _ => _mm256_and_si256(_mm256_srli_epi16::<6>(codes), three),
        };
        let m01 = _mm256_add_epi16(
            _mm256_maddubs_epi16(field(0), load(0)),
            _mm256_maddubs_epi16(field(1), load(1)),
        );
        let m23 = _mm256_add_epi16(
            _mm256_maddubs_epi16(field(2), load(2)),
            _mm256_maddubs_epi16(field(3), load(3)),
        );
        _mm256_madd_epi16(_mm256_add_epi16(m01, m23), _mm256_set1_epi16(1))
    }
}

/// One row's float terms for one batch against a prepared column, lanes in `AVX2_TILE_BLOCKS` order:
/// `(d0, sumi)` for the FMA chain, `(d0·sumi, _)` for the unfused one, `sumi` computed as the vec_dot kernels do.
#[inline(always)]
pub(super) unsafe fn q2_tile_terms<const FMA: bool>(
    xb: *const u8,
    p: &Q2ColumnBatch,
) -> (__m256, __m256) {
    // SAFETY (whole body): the caller guarantees eight whole Q2_0 blocks (144 bytes) at `xb`; every load stays
    // inside them or the prepared batch; features come from the caller.
    unsafe {
        // acc[j]: blocks 2j (low lane) and 2j + 1 (high lane); dword 4g + w sums weights 16w..16w+16.
        let codes = |j: usize| {
            let lo = _mm_loadu_si128(xb.add(Q2_BYTES * 2 * j + 2) as *const __m128i);
            let hi = _mm_loadu_si128(xb.add(Q2_BYTES * (2 * j + 1) + 2) as *const __m128i);
            _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(lo), hi)
        };
        let acc = [
            q2_tile_pair(codes(0), &p.q[0], 0),
            q2_tile_pair(codes(1), &p.q[0], 1),
            q2_tile_pair(codes(2), &p.q[1], 0),
            q2_tile_pair(codes(3), &p.q[1], 1),
        ];
        // Per lane, hadd gives [b h0, b h1, b' h0, b' h1]: blocks (0, 2 | 1, 3) and (4, 6 | 5, 7).
        let x = _mm256_castsi256_ps(_mm256_hadd_epi32(acc[0], acc[1]));
        let y = _mm256_castsi256_ps(_mm256_hadd_epi32(acc[2], acc[3]));
        let half = |v: __m256, k: usize| {
            let sums = _mm256_castps_si256(v);
            let qsum = _mm256_loadu_si256(p.qsum.as_ptr().add(8 * k) as *const __m256i);
            _mm256_cvtepi32_ps(_mm256_sub_epi32(sums, qsum))
        };
        let s_lo = half(_mm256_shuffle_ps::<0x88>(x, y), 0);
        let s_hi = half(_mm256_shuffle_ps::<0xdd>(x, y), 1);
        let d1_lo = _mm256_loadu_ps(p.d1.as_ptr());
        let d1_hi = _mm256_loadu_ps(p.d1.as_ptr().add(8));
        let mut d0_bits = [0u16; 8];
        for (l, &b) in AVX2_TILE_BLOCKS.iter().enumerate() {
            d0_bits[l] = (xb.add(b * Q2_BYTES) as *const u16).read_unaligned();
        }
        let d0 = _mm256_cvtph_ps(_mm_loadu_si128(d0_bits.as_ptr() as *const __m128i));
        if FMA {
            let first = _mm256_fmadd_ps(d1_lo, s_lo, _mm256_setzero_ps());
            (d0, _mm256_fmadd_ps(d1_hi, s_hi, first))
        } else {
            let zero = _mm256_setzero_ps();
            let sumi = _mm256_add_ps(
                _mm256_add_ps(zero, _mm256_mul_ps(d1_lo, s_lo)),
                _mm256_mul_ps(d1_hi, s_hi),
            );
            (_mm256_mul_ps(d0, sumi), d0)
        }
    }
}

/// The sequential part of one row's batch: eight chain steps in block order (lanes in `AVX2_TILE_BLOCKS`
/// order, so block `b` is read from lane `2b` or `2b − 7`).
#[inline(always)]
pub(super) fn q2_tile_chain<const FMA: bool>(mut sumf: f32, terms: (__m256, __m256)) -> f32 {
    let mut a = [0f32; 8];
    let mut b = [0f32; 8];
    // SAFETY: plain stores of two registers into local arrays (AVX is enabled by every caller).
    unsafe {
        _mm256_storeu_ps(a.as_mut_ptr(), terms.0);
        _mm256_storeu_ps(b.as_mut_ptr(), terms.1);
    }
    for block in 0..8 {
        let l = if block % 2 == 0 {
            block / 2
        } else {
            4 + block / 2
        };
        sumf = if FMA {
            a[l].mul_add(b[l], sumf)
        } else {
            sumf + a[l]
        };
    }
    sumf
}

/// The running sums of `R` rows after every full batch of a prepared column, chains interleaved and
/// software-pipelined as in the AVX-512 tile kernel. (Each file keeps its own copy of this loop: one generic
/// helper taking the terms as a closure was not inlined and cost 42 % of the AVX2 speed and 22 % of the
/// AVX-512 one, measured.)
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q2_tile_rows<const FMA: bool, const R: usize>(
    rows: [*const u8; R],
    prep: &[Q2ColumnBatch],
) -> [f32; R] {
    let mut sumf = [0f32; R];
    if prep.is_empty() {
        return sumf;
    }
    // SAFETY: every row holds 8·prep.len() blocks (caller); batch k reads bytes 144k..144k+144.
    unsafe {
        let zero = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut pending = [zero; R];
        for r in 0..R {
            pending[r] = q2_tile_terms::<FMA>(rows[r], &prep[0]);
        }
        for (k, p) in prep.iter().enumerate().skip(1) {
            let mut next = [zero; R];
            for r in 0..R {
                prefetch_ahead(rows[r].wrapping_add(8 * k * Q2_BYTES), 8 * Q2_BYTES);
                next[r] = q2_tile_terms::<FMA>(rows[r].add(8 * k * Q2_BYTES), p);
            }
            for r in 0..R {
                sumf[r] = q2_tile_chain::<FMA>(sumf[r], pending[r]);
            }
            pending = next;
        }
        for r in 0..R {
            sumf[r] = q2_tile_chain::<FMA>(sumf[r], pending[r]);
        }
    }
    sumf
}

/// An octet's per-batch scales (`tiles::Q2OctetScales`) from its eight prepared columns, whose `qsum` and `d1`
/// are in `AVX2_TILE_BLOCKS` lane order.
///
/// # Safety
/// None beyond the signature's (plain copies); `unsafe fn` for `tiles::Q2Octets`.
pub(super) unsafe fn q2_octet_scales(cols: [&[Q2ColumnBatch]; 8], out: &mut Vec<Q2OctetScales>) {
    out.clear();
    let batches = cols.iter().map(|c| c.len()).min().unwrap_or(0);
    for k in 0..batches {
        let mut s = Q2OctetScales {
            qsum: [[[0; 8]; 2]; 8],
            d1: [[[0.0; 8]; 2]; 8],
        };
        for (l, &b) in AVX2_TILE_BLOCKS.iter().enumerate() {
            for h in 0..2 {
                for (c, col) in cols.iter().enumerate() {
                    s.qsum[b][h][c] = col[k].qsum[8 * h + l];
                    s.d1[b][h][c] = col[k].d1[8 * h + l];
                }
            }
        }
        out.push(s);
    }
}

/// The running sums of four rows against eight prepared columns after every full batch, `[row][column]`: the
/// prefill kernel. Each row's codes are split into fields once for the eight columns; the four dword partials of
/// each (row, column, block) are reduced with `vphaddd` and two shuffles straight into lanes by column, so each
/// row's eight chains (one per column, in block order, as stock's C) advance in one vector step per block
/// instead of eight scalar ones.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; every row holds `8·scales.len()` blocks, every column at least
/// `scales.len()` batches.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q2_octet_rows<const FMA: bool>(
    rows: [*const u8; 4],
    cols: [&[Q2ColumnBatch]; 8],
    scales: &[Q2OctetScales],
) -> [[f32; 8]; 4] {
    assert!(cols.iter().all(|c| c.len() >= scales.len()), "short column");
    let mut out = [[0f32; 8]; 4];
    // SAFETY (whole body): batch k < scales.len() reads blocks 8k..8k+8 of every row (144 bytes) and batch k of
    // every column; features come from this function.
    unsafe {
        let three = _mm256_set1_epi8(3);
        let ones = _mm256_set1_epi16(1);
        let zero = _mm256_setzero_ps();
        let mut sumf = [zero; 4];
        for (k, s) in scales.iter().enumerate() {
            for j in 0..4 {
                // Blocks 2j (low lane) and 2j + 1 (high lane) of the batch; their quants are in `q[j / 2]`.
                let (h, off) = (j / 2, 32 * (j % 2));
                for r in 0..4 {
                    let xb = rows[r].add(8 * k * Q2_BYTES);
                    let lo = _mm_loadu_si128(xb.add(Q2_BYTES * 2 * j + 2) as *const __m128i);
                    let hi = _mm_loadu_si128(xb.add(Q2_BYTES * (2 * j + 1) + 2) as *const __m128i);
                    let codes = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(lo), hi);
                    let fields = [
                        _mm256_and_si256(codes, three),
                        _mm256_and_si256(_mm256_srli_epi16::<2>(codes), three),
                        _mm256_and_si256(_mm256_srli_epi16::<4>(codes), three),
                        _mm256_and_si256(_mm256_srli_epi16::<6>(codes), three),
                    ];
                    // Column c's eight dword partials: per lane, dword w sums weights 16w..16w + 16 of its block.
                    let partials = |c: usize| {
                        let q = &cols[c][k].q[h];
                        let load =
                            |f: usize| _mm256_loadu_si256(q[f].as_ptr().add(off) as *const __m256i);
                        let m01 = _mm256_add_epi16(
                            _mm256_maddubs_epi16(fields[0], load(0)),
                            _mm256_maddubs_epi16(fields[1], load(1)),
                        );
                        let m23 = _mm256_add_epi16(
                            _mm256_maddubs_epi16(fields[2], load(2)),
                            _mm256_maddubs_epi16(fields[3], load(3)),
                        );
                        _mm256_madd_epi16(_mm256_add_epi16(m01, m23), ones)
                    };
                    // Per lane [c h0, c h1, c' h0, c' h1], then the halves of four columns apart, then of eight:
                    // `h0[e]` holds half 0 of block 2j + e for columns 0..8 in lanes 0..8.
                    let quads = |c: usize| {
                        let a =
                            _mm256_castsi256_ps(_mm256_hadd_epi32(partials(c), partials(c + 1)));
                        let b = _mm256_castsi256_ps(_mm256_hadd_epi32(
                            partials(c + 2),
                            partials(c + 3),
                        ));
                        (
                            _mm256_shuffle_ps::<0x88>(a, b),
                            _mm256_shuffle_ps::<0xdd>(a, b),
                        )
                    };
                    let (h0_lo, h1_lo) = quads(0);
                    let (h0_hi, h1_hi) = quads(4);
                    let h0 = [
                        _mm256_permute2f128_ps::<0x20>(h0_lo, h0_hi),
                        _mm256_permute2f128_ps::<0x31>(h0_lo, h0_hi),
                    ];
                    let h1 = [
                        _mm256_permute2f128_ps::<0x20>(h1_lo, h1_hi),
                        _mm256_permute2f128_ps::<0x31>(h1_lo, h1_hi),
                    ];
                    for e in 0..2 {
                        let b = 2 * j + e;
                        let half = |v: __m256, hh: usize| {
                            let qsum = _mm256_load_si256(s.qsum[b][hh].as_ptr() as *const __m256i);
                            _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_castps_si256(v), qsum))
                        };
                        let (s0, s1) = (half(h0[e], 0), half(h1[e], 1));
                        let d10 = _mm256_load_ps(s.d1[b][0].as_ptr());
                        let d11 = _mm256_load_ps(s.d1[b][1].as_ptr());
                        let d0 = _mm256_cvtph_ps(_mm_set1_epi16(
                            (xb.add(b * Q2_BYTES) as *const i16).read_unaligned(),
                        ));
                        sumf[r] = if FMA {
                            let sumi = _mm256_fmadd_ps(d11, s1, _mm256_fmadd_ps(d10, s0, zero));
                            _mm256_fmadd_ps(d0, sumi, sumf[r])
                        } else {
                            let sumi = _mm256_add_ps(
                                _mm256_add_ps(zero, _mm256_mul_ps(d10, s0)),
                                _mm256_mul_ps(d11, s1),
                            );
                            _mm256_add_ps(sumf[r], _mm256_mul_ps(d0, sumi))
                        };
                    }
                }
            }
        }
        for r in 0..4 {
            _mm256_storeu_ps(out[r].as_mut_ptr(), sumf[r]);
        }
    }
    out
}

/// `W · Y` for Q2_0 weights against q8_0 columns through the shared tile driver, with `vpmaddubsw` in place of
/// VNNI and shifts in place of GFNI; every element with the bits of `vec_dot_q2_0_q8_0::<FMA>`.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `y.nb() >= 2 * x.nb()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn mul_mat_q2_0_q8_0<const FMA: bool>(
    x: Rows<'_, BlockQ2_0>,
    y: Rows<'_, BlockQ8_0>,
    emit: Emit<'_>,
) {
    // SAFETY: the caller's contract covers the functions' features.
    unsafe {
        mul_mat_q2_0_tiles::<FMA>(
            x,
            y,
            emit,
            q2_prepare_column,
            q2_tile_rows::<FMA, 4>,
            q2_tile_rows::<FMA, 1>,
            None,
            Some(Q2Octets {
                scales: q2_octet_scales,
                rows: q2_octet_rows::<FMA>,
            }),
            q2_tail::<FMA>,
        )
    }
}

/// `dequantize_row_q2_0`: `((c − 1) as f32) · d`, eight weights per step.
///
/// # Safety
/// The CPU must have AVX2 and F16C; `y.len() >= 64 * x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dequantize_row_q2_0(x: &[BlockQ2_0], y: &mut [f32]) {
    debug_assert!(y.len() >= 64 * x.len());
    // SAFETY: block i < x.len() and 64 floats per block fit in y by the contract above.
    unsafe {
        let shifts = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
        let three = _mm256_set1_epi32(3);
        let one = _mm256_set1_epi32(1);
        let out = y.as_mut_ptr();
        for (i, b) in x.iter().enumerate() {
            let d = _mm256_set1_ps(b.d.to_f32());
            for w in 0..8 {
                let pair = u16::from_le_bytes([b.qs[2 * w], b.qs[2 * w + 1]]) as i32;
                let c = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(pair), shifts), three);
                let v = _mm256_cvtepi32_ps(_mm256_sub_epi32(c, one));
                _mm256_storeu_ps(out.add(64 * i + 8 * w), _mm256_mul_ps(v, d));
            }
        }
    }
}

// ggml ≥ 0.27.0's own AVX2 order (`formats::q2_0::vec_dot_q2_0_q8_0_avx2_model`): per half block eight i32 lane
// sums of four weights, `fma(sum, d_x·d_y, acc)` per lane into one of two accumulators (even and odd blocks).
// Its NaN results follow the stock instructions' operands: the compiler may put either operand of a multiply
// or an add first, so the two operations whose operands may both be NaN pick the first one explicitly
// (`scale_product`, `q2_0::avx2_model_lanes`); in the FMA only the scale and the accumulator may be NaN, and the
// scale, a multiplicand, comes first in every FMA form.

/// `d_x·d_y` with `d_x`'s NaN before `d_y`'s, as stock's `vmulss d_x, d_y`: the product, or `d_x` itself where
/// it is a NaN (`dx_nan`, its lanes all ones; F16C has already made it quiet).
#[inline(always)]
unsafe fn scale_product(dx: __m256, dx_nan: __m256, dy: __m256) -> __m256 {
    // SAFETY: register-only AVX; the callers enable AVX2.
    unsafe { _mm256_blendv_ps(_mm256_mul_ps(dx, dy), dx, dx_nan) }
}

/// Half `h` of a Q2_0 block's codes (its 16 code bytes at `codes`) as one byte per weight in weight order:
/// each code byte widened to a dword and spread so that byte `k` of the dword holds field `k`.
#[inline(always)]
unsafe fn q2_codes_in_order(codes: *const u8, h: usize) -> __m256i {
    // SAFETY: the caller guarantees 16 code bytes at `codes`; features come from the caller.
    unsafe {
        let b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(codes.add(8 * h) as *const __m128i));
        let t = _mm256_or_si256(b, _mm256_slli_epi32::<12>(b));
        let t = _mm256_or_si256(t, _mm256_slli_epi32::<6>(t));
        _mm256_and_si256(t, _mm256_set1_epi32(0x0303_0303))
    }
}

/// The eight lane sums `Σ c·q` of one half: pairs by `vpmaddubsw`, then pairs of pairs by `vpmaddwd` (exact:
/// a pair is within ±768).
#[inline(always)]
unsafe fn q2_lane_sums(codes: __m256i, q: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 32 bytes at `q`; features come from the caller.
    unsafe {
        let pairs = _mm256_maddubs_epi16(codes, _mm256_loadu_si256(q as *const __m256i));
        _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
    }
}

/// The f16 at `p` as a float in every lane (F16C: a NaN comes out quiet with its payload, as from ggml's
/// table).
#[inline(always)]
unsafe fn f16_broadcast(p: *const u8) -> __m256 {
    // SAFETY: the caller guarantees two bytes at `p`; F16C comes from the caller.
    unsafe { _mm256_cvtph_ps(_mm_set1_epi16((p as *const i16).read_unaligned())) }
}

/// `ggml_vec_dot_q2_0_q8_0` in ggml ≥ 0.27.0's own AVX2 order, NaN bits included.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `y.len() >= 2 * x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_q2_0_q8_0_avx2_order(x: &[BlockQ2_0], y: &[BlockQ8_0]) -> f32 {
    debug_assert!(y.len() >= 2 * x.len());
    let xp = x.as_ptr() as *const u8;
    let yp = y.as_ptr() as *const u8;
    // SAFETY: block i < x.len() and q8_0 blocks 2i, 2i + 1 lie inside the slices.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); 2];
        for i in 0..x.len() {
            let xb = xp.add(i * Q2_BYTES);
            let dx = f16_broadcast(xb);
            let dx_nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(dx, dx);
            for h in 0..2 {
                let yb = yp.add((2 * i + h) * Q8_BYTES);
                let q = yb.add(2);
                let c = q2_codes_in_order(xb.add(2), h);
                let pairs = _mm256_sub_epi16(
                    _mm256_maddubs_epi16(c, _mm256_loadu_si256(q as *const __m256i)),
                    _mm256_maddubs_epi16(
                        _mm256_set1_epi8(1),
                        _mm256_loadu_si256(q as *const __m256i),
                    ),
                );
                let sums = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
                let dy = f16_broadcast(yb);
                let a = &mut acc[i % 2];
                *a = _mm256_fmadd_ps(sums, scale_product(dx, dx_nan, dy), *a);
            }
        }
        let mut lanes = [[0f32; 8]; 2];
        _mm256_storeu_ps(lanes[0].as_mut_ptr(), acc[0]);
        _mm256_storeu_ps(lanes[1].as_mut_ptr(), acc[1]);
        crate::formats::q2_0::avx2_model_reduce(crate::formats::q2_0::avx2_model_lanes(
            lanes[0], lanes[1],
        ))
    }
}

/// One row's block against `C` prepared columns: its codes expanded once, then for each column and half the
/// lane sums, the scale `d_x·d_y` and the FMA into that column's accumulator.
#[inline(always)]
unsafe fn q2_lane_block<const C: usize>(
    xb: *const u8,
    entries: [&Q2LaneColumnBlock; C],
    acc: &mut [__m256; C],
) {
    // SAFETY: the caller guarantees a whole block at `xb`; features come from the caller.
    unsafe {
        let dx = f16_broadcast(xb);
        let dx_nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(dx, dx);
        let codes = [
            q2_codes_in_order(xb.add(2), 0),
            q2_codes_in_order(xb.add(2), 1),
        ];
        for (a, e) in acc.iter_mut().zip(entries) {
            for (h, &code) in codes.iter().enumerate() {
                let s = _mm256_sub_epi32(
                    q2_lane_sums(code, e.q.as_ptr().add(32 * h) as *const u8),
                    _mm256_load_si256(e.qsum.as_ptr().add(8 * h) as *const __m256i),
                );
                let d = scale_product(dx, dx_nan, _mm256_broadcast_ss(&e.d[h]));
                *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, *a);
            }
        }
    }
}

/// The eight lanes (both accumulators added) of `R` rows against `C` prepared columns in ggml ≥ 0.27.0's AVX2
/// order, over `nb` blocks. Each accumulator is its own chain, so the even blocks run first and the odd ones
/// after (`R·C` live accumulators instead of twice as many); each row's codes are expanded once per block for
/// all `C` columns, and each column's quant sums come prepared. `R·C ≤ 4` keeps every accumulator in a
/// register.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; every row holds `nb` blocks and every column `nb` entries.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q2_lane_tile_rows<const R: usize, const C: usize>(
    nb: usize,
    rows: [*const u8; R],
    cols: [&[Q2LaneColumnBlock]; C],
) -> [[[f32; 8]; R]; C] {
    let mut lanes = [[[[0f32; 8]; R]; C]; 2];
    // SAFETY: block i < nb of every row and entry i of every column exist (the caller's contract).
    unsafe {
        for (parity, lanes) in lanes.iter_mut().enumerate() {
            let mut acc = [[_mm256_setzero_ps(); C]; R];
            let mut i = parity;
            while i < nb {
                let entries = cols.map(|c| c.get_unchecked(i));
                for r in 0..R {
                    let xb = rows[r].add(i * Q2_BYTES);
                    prefetch_ahead(xb, 2 * Q2_BYTES);
                    q2_lane_block::<C>(xb, entries, &mut acc[r]);
                }
                i += 2;
            }
            for (r, acc) in acc.iter().enumerate() {
                for (c, &a) in acc.iter().enumerate() {
                    _mm256_storeu_ps(lanes[c][r].as_mut_ptr(), a);
                }
            }
        }
    }
    let [even, odd] = lanes;
    std::array::from_fn(|c| {
        std::array::from_fn(|r| crate::formats::q2_0::avx2_model_lanes(even[c][r], odd[c][r]))
    })
}

/// Four rows against one column as two passes of two rows (see `q2_lane_tile_rows`).
///
/// # Safety
/// As `q2_lane_tile_rows`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q2_lane_tile_rows_4x1(
    nb: usize,
    rows: [*const u8; 4],
    cols: [&[Q2LaneColumnBlock]; 1],
) -> [[[f32; 8]; 4]; 1] {
    // SAFETY: the caller's contract, for each pair of rows.
    let (a, b) = unsafe {
        (
            q2_lane_tile_rows::<2, 1>(nb, [rows[0], rows[1]], cols),
            q2_lane_tile_rows::<2, 1>(nb, [rows[2], rows[3]], cols),
        )
    };
    [[a[0][0], a[0][1], b[0][0], b[0][1]]]
}

/// Four rows against two columns as two passes of two rows: four accumulators and each row's two code
/// vectors fit the sixteen registers (four rows at once spilled accumulators).
///
/// # Safety
/// As `q2_lane_tile_rows`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q2_lane_tile_rows_4x2(
    nb: usize,
    rows: [*const u8; 4],
    cols: [&[Q2LaneColumnBlock]; 2],
) -> [[[f32; 8]; 4]; 2] {
    // SAFETY: the caller's contract, for each pair of rows.
    let (a, b) = unsafe {
        (
            q2_lane_tile_rows::<2, 2>(nb, [rows[0], rows[1]], cols),
            q2_lane_tile_rows::<2, 2>(nb, [rows[2], rows[3]], cols),
        )
    };
    std::array::from_fn(|c| [a[c][0], a[c][1], b[c][0], b[c][1]])
}

/// `W · Y` in ggml ≥ 0.27.0's own AVX2 order through the lane-tile driver; every element with the bits of
/// `vec_dot_q2_0_q8_0_avx2_order`.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `y.nb() >= 2 * x.nb()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn mul_mat_q2_0_q8_0_avx2_order(
    x: Rows<'_, BlockQ2_0>,
    y: Rows<'_, BlockQ8_0>,
    emit: Emit<'_>,
) {
    // SAFETY: the caller's contract covers the kernels' features.
    unsafe {
        mul_mat_q2_0_avx2_order_tiles(
            x,
            y,
            emit,
            &LaneTileKernels {
                prepare: q2_lane_prepare_column,
                rows4: q2_lane_tile_rows_4x1,
                rows1: q2_lane_tile_rows::<1, 1>,
                rows4x2: q2_lane_tile_rows_4x2,
            },
        )
    }
}

/// A row's blocks past the tile kernel's last full batch of eight (`tiles::TailChain`): the per-call kernel's
/// four-block batches continuing the chain from `sumf`, then the scalar chain, all in this file's features.
/// Rows shorter than eight blocks (a 256-wide matrix) run here whole, as fast as the per-call kernel.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `y.len() >= 2 * x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q2_tail<const FMA: bool>(mut sumf: f32, x: &[BlockQ2_0], y: &[BlockQ8_0]) -> f32 {
    assert!(
        y.len() >= 2 * x.len(),
        "q8_0 column shorter than the Q2_0 row"
    );
    let (xp, yp) = (x.as_ptr() as *const u8, y.as_ptr() as *const u8);
    let batches = x.len() / 4;
    for k in 0..batches {
        // SAFETY: batch k < batches covers blocks 4k..4k+4 of x and 8k..8k+8 of y, inside the slices; this
        // function's target features cover the helpers'.
        sumf = unsafe {
            let terms = q2_batch_terms::<FMA>(xp.add(4 * k * Q2_BYTES), yp.add(8 * k * Q8_BYTES));
            q2_batch_chain::<FMA>(sumf, terms)
        };
    }
    let done = 4 * batches;
    vec_dot_q2_0_q8_0_from::<FMA>(sumf, &x[done..], &y[2 * done..])
}
