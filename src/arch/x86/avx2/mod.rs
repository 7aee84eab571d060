//! AVX2 + FMA + F16C kernels, one file per format with the same function names as `avx512/`: `q2_0.rs`,
//! `q1_0.rs`, `fork.rs` (PQ2_0, PTQ1_0), `tq2_0.rs`, `tq1_0.rs`, `iq.rs` and `q8.rs` (the activation quantizers
//! and the F16C scale conversion). This file holds what several formats share: the 32-weight group sums and
//! q8_0 scales of Q2_0 and the fork, and the ternary lane sums of TQ1_0 and TQ2_0.

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
    hsum_epi32, hsum_float_8_ps, iq_block_float_step, iq_row_result, pipelined, prefetch_ahead,
    Base3Layout,
};
use crate::formats::iq::IqBlock;
use crate::formats::iq2_s::BlockIQ2S;
use crate::formats::iq2_xs::BlockIQ2XS;
use crate::formats::iq2_xxs::BlockIQ2XXS;
use crate::formats::iq3_s::BlockIQ3S;
use crate::formats::iq3_xxs::BlockIQ3XXS;
use crate::formats::iq_grids::{
    IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS,
};
use crate::formats::pq2_0::{pq2_0_block_chain, vec_dot_pq2_0_q8_0_from, BlockPQ2_0};
use crate::formats::ptq1_0::{element_source, vec_dot_ptq1_0_q8_0_from, BlockPTQ1_0};
use crate::formats::q1_0::BlockQ1_0;
use crate::formats::q2_0::{vec_dot_q2_0_q8_0_from, BlockQ2_0};
use crate::formats::q8_0::{quantize_block_q8_0_ref_model, BlockQ8_0, QK8_0};
use crate::formats::q8_k::{BlockQ8K, QK_K};
use crate::formats::tq1_0::BlockTQ1_0;
use crate::formats::tq2_0::BlockTQ2_0;
use crate::fp16::{f32_to_f16_ggml_soft_model, GgmlHalf, F16_TO_F32_TABLE};
use crate::tiles::{
    mul_mat_q2_0_avx2_order_tiles, mul_mat_q2_0_tiles, q2_lane_prepare_column, Emit,
    LaneTileKernels, Q2ColumnBatch, Q2LaneColumnBlock, Q2OctetScales, Q2Octets, Rows,
};

const Q2_BYTES: usize = 18;
const Q8_BYTES: usize = 34;
const PQ2_BYTES: usize = 34;
const PTQ1_BYTES: usize = 28;
const Q1_BYTES: usize = 18;

/// `Σ(w − 1)·q` of four 64-weight groups against the 8 q8_0 blocks at `yb`, as floats. `pairs(g, q0, q1)` gives
/// the 16 i16 pair sums of each 32-weight half of group `g`, the q8 quants of its halves being at `q0` and `q1`.
/// Lane `4h + g` holds half `h` of group `g`, i.e. q8_0 block `2g + h`. Shared by Q2_0 (a group is a block),
/// PQ2_0 and PTQ1_0 (a block is two groups).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_sums(
    pairs: impl Fn(usize, *const u8, *const u8) -> [__m256i; 2],
    yb: *const u8,
) -> __m256 {
    // SAFETY (whole body): the caller guarantees 8 q8_0 blocks at `yb`; features are enabled by this function.
    unsafe {
        let mut h = [_mm256_setzero_si256(); 8];
        for g in 0..4 {
            let q0 = yb.add((2 * g) * Q8_BYTES + 2);
            [h[g], h[4 + g]] = pairs(g, q0, q0.add(Q8_BYTES));
        }
        let a = _mm256_hadd_epi16(h[0], h[1]);
        let b = _mm256_hadd_epi16(h[2], h[3]);
        let c = _mm256_hadd_epi16(h[4], h[5]);
        let d = _mm256_hadd_epi16(h[6], h[7]);
        let t = _mm256_hadd_epi16(_mm256_hadd_epi16(a, b), _mm256_hadd_epi16(c, d));
        let sums16 = _mm_add_epi16(_mm256_castsi256_si128(t), _mm256_extracti128_si256::<1>(t));
        _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(sums16))
    }
}

/// The scales of the 8 q8_0 blocks at `yb` in `group_sums`' lane order (q8_0 block `2g + h` in lane `4h + g`),
/// collected with scalar moves (gathers are slow on some cores).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_d1(yb: *const u8) -> __m256 {
    let mut bits = [0u16; 8];
    for g in 0..4 {
        for h in 0..2 {
            // SAFETY: the caller guarantees 8 q8_0 blocks at `yb`; each read is a block's 2-byte scale.
            bits[4 * h + g] =
                unsafe { (yb.add((2 * g + h) * Q8_BYTES) as *const u16).read_unaligned() };
        }
    }
    // SAFETY: a load of the local array.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(bits.as_ptr() as *const __m128i)) }
}

/// A ternary block's integer sums against q8_K as eight i32 lanes, from `w_q`, its groups' i16 pair sums
/// `Σ w·q` added up (`maddubs` of the unsigned weight bytes `w` against the quants), and `q_sum`, the same over
/// the quants alone: haswell, `w_q − bsums` with stock's i16 wrap-around (wrapping adds give the same i16 in any
/// order) and `madd` by ones; x64, `w_q − q_sum` (the block's own quants, not its `bsums`) the same way, exact
/// while every i16 sum stays in range (the callers' bounds). The x64 total is the sum of the lanes.
#[inline(always)]
unsafe fn ternary_block_lanes<const HASWELL: bool>(
    w_q: __m256i,
    q_sum: __m256i,
    yb: &BlockQ8K,
) -> __m256i {
    // SAFETY: a 32-byte load of `yb.bsums`; AVX2 is enabled by the calling kernel.
    unsafe {
        let minus = if HASWELL {
            _mm256_loadu_si256(yb.bsums.as_ptr() as *const __m256i)
        } else {
            q_sum
        };
        _mm256_madd_epi16(_mm256_sub_epi16(w_q, minus), _mm256_set1_epi16(1))
    }
}
