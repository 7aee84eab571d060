//! The PrismML fork's PQ2_0 and PTQ1_0 (128-weight blocks) against q8_0, through the parent module's group sums
//! (`fork_block_batches`): PQ2_0 with the Q2_0 code expansion, PTQ1_0 with a trit decode per quarter.

use super::*;

/// The driver shared by the fork's 128-weight formats (PQ2_0, PTQ1_0): two blocks (four 64-weight groups) per
/// batch through `group_sums`, then each block's four-step `sumi` and the `sumf` step in scalar code,
/// software-pipelined like the Q2_0 kernel. `pairs(b, h, q0, q1)` gives the i16 pair sums of the two quarters of
/// half `h` of block `b` against the q8 quants at `q0` and `q1`; `d0_bits(b)` is the block's f16 scale. Returns the running
/// sum after `2·batches` blocks; the caller finishes the tail with its format's chain.
///
/// # Safety
/// `yp` points at `8·batches` q8_0 blocks; `pairs` and `d0_bits` are valid for blocks `0..2·batches`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn fork_block_batches<const FMA: bool>(
    batches: usize,
    yp: *const u8,
    pairs: impl Fn(usize, usize, *const u8, *const u8) -> [__m256i; 2],
    d0_bits: impl Fn(usize) -> u16,
) -> f32 {
    // SAFETY (both closures): batch k < batches covers blocks 2k..2k+2 and q8_0 blocks 8k..8k+8, inside what
    // the caller guarantees; this function's target features cover the helpers'.
    pipelined(
        batches,
        |k| unsafe {
            let yb = yp.add(8 * k * Q8_BYTES);
            let s = group_sums(|g, q0, q1| pairs(2 * k + g / 2, g % 2, q0, q1), yb);
            // F16C for the block scales (the software conversion costs more than the rest of a block).
            let d0 = _mm_insert_epi16::<1>(
                _mm_cvtsi32_si128(d0_bits(2 * k) as i32),
                d0_bits(2 * k + 1) as i32,
            );
            let mut d0s = [0f32; 4];
            _mm_storeu_ps(d0s.as_mut_ptr(), _mm_cvtph_ps(d0));
            (s, group_d1(yb), [d0s[0], d0s[1]])
        },
        |mut sumf, (s, d1, d0): (__m256, __m256, [f32; 2])| {
            let (mut sv, mut dv) = ([0f32; 8], [0f32; 8]);
            // SAFETY: stores of two registers into local arrays.
            unsafe {
                _mm256_storeu_ps(sv.as_mut_ptr(), s);
                _mm256_storeu_ps(dv.as_mut_ptr(), d1);
            }
            for (p, d0p) in d0.into_iter().enumerate() {
                // q8_0 block k of block p is half k % 2 of group 2p + k / 2: lane 4·(k % 2) + 2p + k / 2.
                let lane = |k: usize| 4 * (k % 2) + 2 * p + k / 2;
                sumf = pq2_0_block_chain::<FMA>(
                    sumf,
                    d0p,
                    [0, 1, 2, 3].map(|k| dv[lane(k)]),
                    [0, 1, 2, 3].map(|k| sv[lane(k)]),
                );
            }
            sumf
        },
    )
}

/// `ggml_vec_dot_pq2_0_q8_0` (PrismML fork) with the FMA (`FMA = true`) or unfused chain: the Q2_0 code
/// expansion on each 64-weight half, through `fork_block_batches`.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `y.len() >= 4 * x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_pq2_0_q8_0<const FMA: bool>(x: &[BlockPQ2_0], y: &[BlockQ8_0]) -> f32 {
    debug_assert!(y.len() >= 4 * x.len());
    let batches = x.len() / 2;
    let xp = x.as_ptr() as *const u8;
    // SAFETY: blocks 0..2·batches of x and 8·batches q8_0 blocks of y are inside the slices; each half's 16
    // code bytes are inside its block.
    let sumf = unsafe {
        fork_block_batches::<FMA>(
            batches,
            y.as_ptr() as *const u8,
            |b, h, q0, q1| q2_group_pairs(xp.add(b * PQ2_BYTES + 2 + 16 * h), q0, q1),
            |b| x[b].d.to_bits(),
        )
    };
    let done = 2 * batches;
    vec_dot_pq2_0_q8_0_from::<FMA>(sumf, &x[done..], &y[4 * done..])
}

/// PTQ1_0 quarter `k`'s byte shuffle: byte `i` of lane `l` picks the packed byte of element `32k + 16l + i`,
/// counted from the lane's source (`ptq1_quarter_sources`: packed bytes 0..16 or 12..28).
pub(super) const fn ptq1_quarter_shuffle(k: usize) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut i = 0;
    while i < 32 {
        let base = if ptq1_lane_from_high(k, i / 16) {
            12
        } else {
            0
        };
        out[i] = (element_source(32 * k + i).0 - base) as u8;
        i += 1;
    }
    out
}

/// Whether lane `l` of quarter `k` reads the bytes at 12..28 of the block (else 0..16): elements 80..128 come
/// from packed bytes 16..26.
pub(super) const fn ptq1_lane_from_high(k: usize, l: usize) -> bool {
    32 * k + 16 * l >= 80
}

pub(super) static PTQ1_SHUFFLE: [[u8; 32]; 4] = [
    ptq1_quarter_shuffle(0),
    ptq1_quarter_shuffle(1),
    ptq1_quarter_shuffle(2),
    ptq1_quarter_shuffle(3),
];
/// PTQ1_0's per-word multipliers per 32-element quarter (`Base3Layout`).
pub(super) static PTQ1_MULT_EVEN: [[u16; 16]; 4] = [
    PTQ1.word_mult::<16, false>(0),
    PTQ1.word_mult::<16, false>(32),
    PTQ1.word_mult::<16, false>(64),
    PTQ1.word_mult::<16, false>(96),
];
pub(super) static PTQ1_MULT_ODD: [[u16; 16]; 4] = [
    PTQ1.word_mult::<16, true>(0),
    PTQ1.word_mult::<16, true>(32),
    PTQ1.word_mult::<16, true>(64),
    PTQ1.word_mult::<16, true>(96),
];
pub(super) const PTQ1: Base3Layout = Base3Layout::Ptq1_0;

/// The 32 trits (0..=2, element order) of quarter `k` of the PTQ1_0 block at `b`, from its two 16-byte windows
/// `low` (bytes 0..16) and `high` (bytes 12..28, so nothing past the block is read): an in-lane shuffle to each
/// element's byte, `vpmullw` to `v = q·3ⁿ` in each word's high byte, `vpmulhuw` by 3 (even byte) or 768 (odd byte)
/// for `(v·3) >> 8`, and a merge.
#[inline(always)]
pub(super) unsafe fn ptq1_quarter_trits(low: __m128i, high: __m128i, k: usize) -> __m256i {
    // SAFETY (whole body): register operations and loads of 32-byte statics; AVX2 is enabled by the calling
    // kernel.
    unsafe {
        let pick = |l: usize| if ptq1_lane_from_high(k, l) { high } else { low };
        let src = _mm256_set_m128i(pick(1), pick(0));
        let x = _mm256_shuffle_epi8(
            src,
            _mm256_loadu_si256(PTQ1_SHUFFLE[k].as_ptr() as *const __m256i),
        );
        let high_bytes = _mm256_set1_epi16(0xff00u16 as i16);
        let even = _mm256_mulhi_epu16(
            _mm256_mullo_epi16(
                x,
                _mm256_loadu_si256(PTQ1_MULT_EVEN[k].as_ptr() as *const __m256i),
            ),
            _mm256_set1_epi16(3),
        );
        let odd = _mm256_mulhi_epu16(
            _mm256_mullo_epi16(
                _mm256_and_si256(x, high_bytes),
                _mm256_loadu_si256(PTQ1_MULT_ODD[k].as_ptr() as *const __m256i),
            ),
            _mm256_set1_epi16(768),
        );
        _mm256_or_si256(even, _mm256_and_si256(odd, high_bytes))
    }
}

/// `Σ(t − 1)·q` of 32 trits in element order against 32 q8 bytes at `q`, as 16 i16 pair sums (each pair is at
/// most 2·128 in magnitude, so `maddubs` never saturates).
#[inline(always)]
pub(super) unsafe fn trit_pairs(t: __m256i, q: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 32 bytes at `q`; AVX2 is enabled by the calling kernel.
    unsafe {
        let qv = _mm256_loadu_si256(q as *const __m256i);
        _mm256_sub_epi16(
            _mm256_maddubs_epi16(t, qv),
            _mm256_maddubs_epi16(_mm256_set1_epi8(1), qv),
        )
    }
}

/// `ggml_vec_dot_ptq1_0_q8_0` (PrismML fork) with the FMA (`FMA = true`) or unfused chain:
/// `ptq1_quarter_trits` on each 32-weight quarter, through `fork_block_batches`.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `y.len() >= 4 * x.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn vec_dot_ptq1_0_q8_0<const FMA: bool>(x: &[BlockPTQ1_0], y: &[BlockQ8_0]) -> f32 {
    debug_assert!(y.len() >= 4 * x.len());
    let batches = x.len() / 2;
    let xp = x.as_ptr() as *const u8;
    // SAFETY: blocks 0..2·batches of x and 8·batches q8_0 blocks of y are inside the slices; both 16-byte
    // windows (0..16 and 12..28) are inside a block.
    let sumf = unsafe {
        fork_block_batches::<FMA>(
            batches,
            y.as_ptr() as *const u8,
            |b, h, q0, q1| {
                let block = xp.add(b * PTQ1_BYTES);
                let low = _mm_loadu_si128(block as *const __m128i);
                let high = _mm_loadu_si128(block.add(12) as *const __m128i);
                [
                    trit_pairs(ptq1_quarter_trits(low, high, 2 * h), q0),
                    trit_pairs(ptq1_quarter_trits(low, high, 2 * h + 1), q1),
                ]
            },
            |b| x[b].d.to_bits(),
        )
    };
    let done = 2 * batches;
    vec_dot_ptq1_0_q8_0_from::<FMA>(sumf, &x[done..], &y[4 * done..])
}
