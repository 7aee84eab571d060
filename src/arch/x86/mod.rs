//! x86-64 kernels: `avx2.rs` and `avx512.rs` define the same function names.
pub mod avx2;
pub mod avx512;

use crate::formats::q2_0::{half_block_isum, BlockQ2_0};
use crate::formats::q8_0::BlockQ8_0;

/// The float chain for the blocks a SIMD main loop leaves over (fewer than its batch), continuing from `sumf`.
/// Same operations as the scalar models, so the bits continue seamlessly.
#[inline(always)]
pub(crate) fn q2_0_tail<const FMA: bool>(mut sumf: f32, x: &[BlockQ2_0], y: &[BlockQ8_0]) -> f32 {
    for (i, xb) in x.iter().enumerate() {
        let (y0, y1) = (&y[2 * i], &y[2 * i + 1]);
        let s0 = half_block_isum(xb, y0, 0) as f32;
        let s1 = half_block_isum(xb, y1, 1) as f32;
        let (d0, d10, d11) = (xb.d.to_f32(), y0.d.to_f32(), y1.d.to_f32());
        if FMA {
            let sumi = d11.mul_add(s1, d10.mul_add(s0, 0.0));
            sumf = d0.mul_add(sumi, sumf);
        } else {
            let sumi = (0.0 + d10 * s0) + d11 * s1;
            sumf += d0 * sumi;
        }
    }
    sumf
}
