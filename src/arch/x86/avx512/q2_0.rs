//! Q2_0 · q8_0, eight blocks per batch:
//! - one zmm per block: `vpmovzxwq` puts code word `Q` in qword `Q`, `vpmultishiftqb` takes the bits at offset
//!   `2·(j % 8)` for byte `j`, a mask leaves the code of weight `j` in byte `j`;
//! - `vpdpbusd(c, q) − vpdpbusd(1, q)` gives sixteen dword partials of `Σ(c − 1)·q` (eight per half);
//! - the reduction uses in-lane unpacks and two 128-bit-lane shuffles (no cross-lane index permutes), the
//!   fastest of the variants measured (`docs/q2_0.md`);
//! - the q8_0 scales are collected with four `vpermt2w` from eight loads (gathers are microcoded and slow on
//!   Zen 4, sixteen scalar moves cost more), the block scales with scalar moves and F16C;
//! - the float chain follows the stock build exactly, and is software-pipelined: batch `k + 1`'s vector work is
//!   issued before batch `k`'s sequential `sumf` steps, so the 4-cycle-per-block chain overlaps it.
//!
//! The tile kernel (`mul_mat_q2_0_q8_0`) shares each row's code expansion between prepared columns.

use super::*;

/// The 64 codes of one Q2_0 code group (16 bytes at `codes`), one per byte: `vpmovzxwq` puts code word `Q` in
/// qword `Q`, `vpmultishiftqb` takes the bits at offset `2·(j % 8)` for byte `j`, a mask keeps two bits.
#[inline(always)]
pub(super) unsafe fn q2_group_codes(codes: *const u8) -> __m512i {
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

/// `group_sums`' lane order for Q2_0 (group `g` is block `g`, its halves meet q8_0 blocks `2g` and `2g + 1`):
/// lane `8(g / 4) + 4h + g % 4` holds q8_0 block `2g + h`.
pub(super) static Q2_D1: D1Tables = D1Tables::new({
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
pub(super) unsafe fn q2_batch_terms<const FMA: bool, const SCALE_GATHER: bool>(
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
pub(super) const CHAIN_LANES: [usize; 8] = [0, 1, 2, 3, 8, 9, 10, 11];

/// The sequential part: eight steps of `sumf = fma(d0, sumi, sumf)` (or `sumf += d0·sumi`), in block order.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub(super) unsafe fn q2_batch_chain<const FMA: bool>(
    mut sumf: f32,
    terms: (__m512, __m512),
) -> f32 {
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
pub(super) unsafe fn q2_batch_chain_table_d0(mut sumf: f32, sumi: __m512, xb: *const u8) -> f32 {
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
pub(super) const FIELD_LANES: [u8; 64] = {
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
pub(super) const CODE_GATHER: [[u8; 64]; 2] = {
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
pub(super) const PAIR_EVEN: [u32; 16] = {
    let mut t = [0u32; 16];
    let mut l = 0;
    while l < 16 {
        let (h, b) = (l / 8, l % 8);
        t[l] = (16 * (b / 4) + 4 * (b % 4) + 2 * h) as u32;
        l += 1;
    }
    t
};
pub(super) const PAIR_ODD: [u32; 16] = {
    let mut t = PAIR_EVEN;
    let mut l = 0;
    while l < 16 {
        t[l] += 1;
        l += 1;
    }
    t
};

/// `vpermt2w` indices of the eight block scales of a batch (word `9b` of the first 128 bytes).
pub(super) const D0_GATHER: [u16; 32] = {
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
pub(super) const FIELD_AFFINE: [i64; 3] = [
    (1 << (56 + 2)) | (1 << (48 + 3)),
    (1 << (56 + 4)) | (1 << (48 + 5)),
    (1 << (56 + 6)) | (1i64 << (48 + 7)),
];

/// Field `k` of every code byte of `codes`, moved to bits 0–1 in place: `AND 3` for `k = 0`, one
/// `vgf2p8affineqb` for the others.
#[inline(always)]
pub(super) unsafe fn q2_tile_fields(codes: __m512i) -> [__m512i; 4] {
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
pub(super) unsafe fn q2_tile_dot(fields: &[__m512i; 4], q: &[[u8; 64]; 4]) -> __m512i {
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
pub(super) unsafe fn q2_tile_terms<const FMA: bool, const C: usize>(
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
pub(super) fn q2_tile_chain<const FMA: bool>(mut sumf: f32, terms: (__m256, __m256)) -> f32 {
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
pub(super) unsafe fn q2_tile_rows<const FMA: bool, const R: usize, const C: usize>(
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
pub(super) unsafe fn q2_tile_rows_1col<const FMA: bool, const R: usize>(
    rows: [*const u8; R],
    prep: &[Q2ColumnBatch],
) -> [f32; R] {
    // SAFETY: the caller's contract, passed on.
    unsafe { q2_tile_rows::<FMA, R, 1>(rows, [prep])[0] }
}

/// `q2_tile_rows` against two columns (the driver's `TileRows2`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c,gfni")]
pub(super) unsafe fn q2_tile_rows_2col<const FMA: bool>(
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
            None,
            q2_tail::<FMA>,
        )
    }
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

// ggml ≥ 0.27.0's own AVX2 order (`formats::q2_0::vec_dot_q2_0_q8_0_avx2_model`, `avx2/q2_0.rs`) with VNNI: one
// zmm holds the eight lanes of two elements (one row against two columns), so each step does twice the work
// of the AVX2 one, and one `vpdpbusd` from the columns' negated quant sums gives the exact lane sums that
// `vpmaddubsw`, `vpmaddwd` and a subtraction give there. The scale product keeps `d_x`'s NaN first with a
// masked move; in the FMA only the scale and the accumulator can be NaN, and every form takes the scale's first.
//
// Not yet run on a CPU with AVX-512: the dispatcher takes it only under `GGML_LOWBIT_FORMS=q2-vnni-tiles=1`, and
// its tier-1 test runs only where the CPU has AVX-512 (`arch/x86/mod.rs`).

/// Two columns' halves of one block side by side: for half `h`, `[column a | column b]` quants, negated quant
/// lane sums, and scales.
#[inline(always)]
unsafe fn q2_lane_column_pair(
    a: &Q2LaneColumnBlock,
    b: &Q2LaneColumnBlock,
    h: usize,
) -> (__m512i, __m512i, __m512) {
    // SAFETY: loads inside the two entries; features come from the caller.
    unsafe {
        let pair = |x: *const u8, y: *const u8| {
            _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(_mm256_loadu_si256(x as *const __m256i)),
                _mm256_loadu_si256(y as *const __m256i),
            )
        };
        let q = pair(
            a.q.as_ptr().add(32 * h) as *const u8,
            b.q.as_ptr().add(32 * h) as *const u8,
        );
        let qsum = pair(
            a.qsum.as_ptr().add(8 * h) as *const u8,
            b.qsum.as_ptr().add(8 * h) as *const u8,
        );
        let d = _mm512_castpd_ps(_mm512_insertf64x4::<1>(
            _mm512_castps_pd(_mm512_castps256_ps512(_mm256_set1_ps(a.d[h]))),
            _mm256_castps_pd(_mm256_set1_ps(b.d[h])),
        ));
        (q, _mm512_sub_epi32(_mm512_setzero_si512(), qsum), d)
    }
}

/// The eight lanes (both accumulators added) of `R` rows against `C` prepared columns (`C` even, taken in
/// pairs) in ggml ≥ 0.27.0's AVX2 order, over `nb` blocks: even blocks, then odd ones, as the AVX2 tiles.
///
/// # Safety
/// The CPU must have the AVX-512 set of `Isa::Avx512`; every row holds `nb` blocks and every column `nb`
/// entries; `C` is even.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
unsafe fn q2_lane_tile_rows_vnni<const R: usize, const C: usize>(
    nb: usize,
    rows: [*const u8; R],
    cols: [&[Q2LaneColumnBlock]; C],
) -> [[[f32; 8]; R]; C] {
    debug_assert!(C.is_multiple_of(2));
    let mut lanes = [[[[0f32; 8]; R]; C]; 2];
    // SAFETY: block i < nb of every row and entry i of every column exist (the caller's contract).
    unsafe {
        for (parity, lanes) in lanes.iter_mut().enumerate() {
            let mut acc = [[_mm512_setzero_ps(); C]; R];
            let mut i = parity;
            while i < nb {
                let mut pairs = [[(
                    _mm512_setzero_si512(),
                    _mm512_setzero_si512(),
                    _mm512_setzero_ps(),
                ); 2]; C];
                for p in 0..C / 2 {
                    let (a, b) = (
                        cols[2 * p].get_unchecked(i),
                        cols[2 * p + 1].get_unchecked(i),
                    );
                    pairs[p] = [q2_lane_column_pair(a, b, 0), q2_lane_column_pair(a, b, 1)];
                }
                for r in 0..R {
                    let xb = rows[r].add(i * Q2_BYTES);
                    prefetch_ahead(xb, 2 * Q2_BYTES);
                    let dx =
                        _mm512_cvtph_ps(_mm256_set1_epi16((xb as *const i16).read_unaligned()));
                    let dx_nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(dx, dx);
                    let codes = q2_group_codes(xb.add(2));
                    let halves = [
                        _mm512_shuffle_i64x2::<0x44>(codes, codes),
                        _mm512_shuffle_i64x2::<0xee>(codes, codes),
                    ];
                    for p in 0..C / 2 {
                        for (h, &c) in halves.iter().enumerate() {
                            let (q, neg_qsum, dy) = pairs[p][h];
                            let s = _mm512_dpbusd_epi32(neg_qsum, c, q);
                            let d = _mm512_mask_mov_ps(_mm512_mul_ps(dx, dy), dx_nan, dx);
                            acc[r][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, acc[r][p]);
                        }
                    }
                }
                i += 2;
            }
            for r in 0..R {
                for p in 0..C / 2 {
                    let mut both = [0f32; 16];
                    _mm512_storeu_ps(both.as_mut_ptr(), acc[r][p]);
                    lanes[2 * p][r].copy_from_slice(&both[..8]);
                    lanes[2 * p + 1][r].copy_from_slice(&both[8..]);
                }
            }
        }
    }
    let [even, odd] = lanes;
    std::array::from_fn(|c| {
        std::array::from_fn(|r| crate::formats::q2_0::avx2_model_lanes(even[c][r], odd[c][r]))
    })
}

/// One column as a pair with itself (the lane-tile driver's single-column steps), the duplicate dropped.
///
/// # Safety
/// As `q2_lane_tile_rows_vnni`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
unsafe fn q2_lane_tile_rows_vnni_1<const R: usize>(
    nb: usize,
    rows: [*const u8; R],
    cols: [&[Q2LaneColumnBlock]; 1],
) -> [[[f32; 8]; R]; 1] {
    // SAFETY: the caller's contract, with the column twice.
    let [first, _] = unsafe { q2_lane_tile_rows_vnni::<R, 2>(nb, rows, [cols[0], cols[0]]) };
    [first]
}

/// `W · Y` in ggml ≥ 0.27.0's own AVX2 order with AVX-512 VNNI, through the lane-tile driver; every element with
/// the bits of that `ggml_vec_dot_q2_0_q8_0`.
///
/// # Safety
/// The CPU must have the AVX-512 set of `Isa::Avx512`; `y.nb() >= 2 * x.nb()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub unsafe fn mul_mat_q2_0_q8_0_avx2_order(
    x: Rows<'_, BlockQ2_0>,
    y: Rows<'_, BlockQ8_0>,
    emit: Emit<'_>,
) {
    // SAFETY: the caller's contract covers the kernels' features.
    unsafe {
        crate::tiles::mul_mat_q2_0_avx2_order_tiles(
            x,
            y,
            emit,
            &LaneTileKernels {
                prepare: crate::tiles::q2_lane_prepare_column,
                rows4: q2_lane_tile_rows_vnni_1::<4>,
                rows1: q2_lane_tile_rows_vnni_1::<1>,
                rows4x2: q2_lane_tile_rows_vnni::<4, 2>,
            },
        )
    }
}

/// The scalar chain for a row's blocks past its last full batch, compiled with FMA so that its contracted steps
/// are instructions, not calls to libm's `fmaf` (`tiles::TailChain`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q2_tail<const FMA: bool>(sumf: f32, x: &[BlockQ2_0], y: &[BlockQ8_0]) -> f32 {
    vec_dot_q2_0_q8_0_from::<FMA>(sumf, x, y)
}
