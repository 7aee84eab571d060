//! TQ1_0 (ggml type 34): ternary weights at 1.6875 bits, five base-3 digits per byte, 256 per block, against
//! q8_K.
//!
//! Layout: `{ uint8_t qs[48]; uint8_t qh[4]; ggml_half d; }`, 54 bytes, the scale last. Digit `l` of a byte `b`
//! is `((uint8_t)(b·3^l) · 3) >> 8` (0, 1 or 2; weight `(digit − 1)·d`); every byte value decodes, 243..255
//! included. Element order:
//! - `e = 32l + m` (`l` 0..5, `m` 0..32): digit `l` of `qs[m]`;
//! - `e = 160 + 16l + m` (`l` 0..5, `m` 0..16): digit `l` of `qs[32 + m]`;
//! - `e = 240 + 4l + j` (`l` 0..4, `j` 0..4): digit `l` of `qh[j]`.
//!
//! The two stock builds:
//! - x64 (`_generic`): per block `sum = Σ (digit − 1)·q` exactly in `int`, `sumf += (float)sum·(f16(d)·y.d)`,
//!   each step rounded.
//! - haswell (AVX2): the digits by byte arithmetic (the same digits for every byte: `subs`, two `avg` and a
//!   shift compute `(3v) >> 8` exactly, checked for all 256 `v`); `maddubs` pairs against the quants into
//!   sixteen i16 lanes, three accumulators: lane `p` of `A` sums the pairs at `2p` of the 32-element groups 0, 1,
//!   5, of `B` groups 2, 3, 6, of `C` groups 4, 7; then, with i16 wrap-around, `(A − bsums[p]) + (B + C)`;
//!   `madd` by ones into eight i32 lanes; per block `acc = fma(float(lane), y.d·f16(d), acc)` (the source's
//!   multiply and add, contracted by GCC: `vfmadd` in the haswell disassembly); `*s = hsum_float_8(acc)`.
//!   With the quantizer's own bsums nothing wraps; with arbitrary ones the model wraps as the kernel does.
//!
//! `dequantize_row_tq1_0` (ggml-base, both builds): `(float)(digit − 1)·d` in element order.

use super::q1_0::hsum_float_8;
use super::q8_k::{BlockQ8K, QK_K};
use crate::fp16::{GgmlHalf, F16_TO_F32_TABLE};

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockTQ1_0 {
    pub qs: [u8; 48],
    pub qh: [u8; 4],
    pub d: GgmlHalf,
}
const _: () = assert!(std::mem::size_of::<BlockTQ1_0>() == 54);
const _: () = assert!(std::mem::align_of::<BlockTQ1_0>() == 1);

impl Default for BlockTQ1_0 {
    fn default() -> Self {
        BlockTQ1_0 {
            qs: [0; 48],
            qh: [0; 4],
            d: GgmlHalf::default(),
        }
    }
}

/// `3^l` modulo 256 for the digit positions.
pub const POW3: [u8; 5] = [1, 3, 9, 27, 81];

/// Digit `l` of byte `b`: `((uint8_t)(b·3^l) · 3) >> 8`.
#[inline(always)]
pub fn digit(b: u8, l: usize) -> u8 {
    ((b.wrapping_mul(POW3[l]) as u16 * 3) >> 8) as u8
}

/// The byte and digit position element `e` (0..256) reads: `(byte index in qs ++ qh, l)`.
#[inline(always)]
pub const fn element_source(e: usize) -> (usize, usize) {
    if e < 160 {
        (e % 32, e / 32)
    } else if e < 240 {
        (32 + (e - 160) % 16, (e - 160) / 16)
    } else {
        (48 + (e - 240) % 4, (e - 240) / 4)
    }
}

impl BlockTQ1_0 {
    /// Digit (0..=2) of element `e`.
    #[inline(always)]
    pub fn digit_of(&self, e: usize) -> u8 {
        let (b, l) = element_source(e);
        let byte = if b < 48 { self.qs[b] } else { self.qh[b - 48] };
        digit(byte, l)
    }
}

/// `dequantize_row_tq1_0`.
pub fn dequantize_row_tq1_0_model(x: &[BlockTQ1_0], y: &mut [f32]) {
    for (block, out) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = block.d.to_f32();
        for (e, o) in out.iter_mut().enumerate() {
            *o = (block.digit_of(e) as i16 - 1) as f32 * d;
        }
    }
}

/// The scale `d = f16(x.d)·y.d` both builds compute per block (`mulss` with `f16(x.d)` first).
#[inline(always)]
pub fn block_scale(x: &BlockTQ1_0, y: &BlockQ8K) -> f32 {
    crate::x86_float::mul(F16_TO_F32_TABLE[x.d.to_bits() as usize], y.d())
}

/// The x64 build's `ggml_vec_dot_tq1_0_q8_K`: `sumf = (float)sum·d + sumf`, the product the first operand of
/// its `addss` (a NaN product before a NaN sum).
pub fn vec_dot_tq1_0_q8_k_x64_model(x: &[BlockTQ1_0], y: &[BlockQ8K]) -> f32 {
    use crate::x86_float::{add, mul};
    let mut sumf = 0f32;
    for (xb, yb) in x.iter().zip(y) {
        let sum: i32 = (0..QK_K)
            .map(|e| (xb.digit_of(e) as i32 - 1) * yb.qs[e] as i32)
            .sum();
        sumf = add(mul(sum as f32, block_scale(xb, yb)), sumf);
    }
    sumf
}

/// The haswell kernel's eight i32 lanes of one block (before conversion), with its i16 wrap-around.
pub fn haswell_block_lanes(x: &BlockTQ1_0, y: &BlockQ8K) -> [i32; 8] {
    // acc[a][p]: accumulator a (A, B, C) at i16 lane p, from the 32-element groups it takes.
    const GROUP_ACC: [usize; 8] = [0, 0, 1, 1, 2, 0, 1, 2];
    let mut acc = [[0i32; 16]; 3];
    for e in 0..QK_K {
        acc[GROUP_ACC[e / 32]][(e % 32) / 2] += x.digit_of(e) as i32 * y.qs[e] as i32;
    }
    let mut lanes = [0i32; 8];
    for p in 0..16 {
        let a = (acc[0][p] as i16).wrapping_sub(y.bsum(p));
        let bc = (acc[1][p] as i16).wrapping_add(acc[2][p] as i16);
        lanes[p / 2] += a.wrapping_add(bc) as i32;
    }
    lanes
}

/// The haswell build's `ggml_vec_dot_tq1_0_q8_K`.
pub fn vec_dot_tq1_0_q8_k_haswell_model(x: &[BlockTQ1_0], y: &[BlockQ8K]) -> f32 {
    let mut acc = [0f32; 8];
    for (xb, yb) in x.iter().zip(y) {
        let d = block_scale(xb, yb);
        let lanes = haswell_block_lanes(xb, yb);
        for l in 0..8 {
            acc[l] = crate::x86_float::fmadd(d, lanes[l] as f32, acc[l]);
        }
    }
    hsum_float_8(acc)
}

/// The model of `order`.
pub fn vec_dot_tq1_0_q8_k_model(order: crate::FloatOrder, x: &[BlockTQ1_0], y: &[BlockQ8K]) -> f32 {
    match order {
        crate::FloatOrder::Haswell => vec_dot_tq1_0_q8_k_haswell_model(x, y),
        crate::FloatOrder::X64 => vec_dot_tq1_0_q8_k_x64_model(x, y),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::q8_k::quantize_row_q8_k_model;

    /// Stock haswell's digit: `subs(v, 1)`, `avg(t, avg(t, 0))`, bits 6..8 — the same digit as the C's for
    /// every byte, so one digit function serves both builds.
    #[test]
    fn the_avx2_digit_arithmetic_equals_the_c_for_every_byte() {
        for v in 0..=255u8 {
            let t = v.saturating_sub(1) as u16;
            let half = (t + 1) >> 1;
            let avx2 = (((t + half + 1) >> 1) >> 6) & 3;
            assert_eq!(avx2 as u8, digit(v, 0), "v = {v}");
        }
    }

    #[test]
    fn digits_of_a_packed_byte_are_its_base_3_digits_most_significant_first() {
        // The quantizer stores x = Σ dₙ·3^(4−n) as ceil(x·256/243).
        for x in 0..243u32 {
            let b = ((x * 256).div_ceil(243)) as u8;
            let mut rest = x;
            for l in (0..5).rev() {
                assert_eq!(digit(b, l) as u32, rest % 3, "x = {x}, digit {l}");
                rest /= 3;
            }
        }
    }

    #[test]
    fn element_sources_cover_every_byte_digit_once() {
        let mut seen = [[false; 5]; 52];
        for e in 0..256 {
            let (b, l) = element_source(e);
            assert!(!seen[b][l], "element {e}");
            seen[b][l] = true;
        }
        assert_eq!(element_source(33), (1, 1));
        assert_eq!(element_source(177), (33, 1));
        assert_eq!(element_source(247), (51, 1));
    }

    #[test]
    fn models_agree_with_each_other_and_f64() {
        let x: Vec<f32> = (0..512)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let mut y = vec![BlockQ8K::default(); 2];
        quantize_row_q8_k_model(&x, &mut y);
        let w: Vec<BlockTQ1_0> = (0..2)
            .map(|b| BlockTQ1_0 {
                qs: std::array::from_fn(|j| (j * 53 + b * 7) as u8),
                qh: [250, 3, 128, 77],
                d: GgmlHalf::from_bits(0x2e00),
            })
            .collect();
        let mut exact = 0f64;
        for (xb, yb) in w.iter().zip(&y) {
            for e in 0..256 {
                exact += (xb.digit_of(e) as f64 - 1.0)
                    * xb.d.to_f32() as f64
                    * yb.d() as f64
                    * yb.qs[e] as f64;
            }
        }
        for got in [
            vec_dot_tq1_0_q8_k_x64_model(&w, &y),
            vec_dot_tq1_0_q8_k_haswell_model(&w, &y),
        ] {
            assert!(
                (got as f64 - exact).abs() <= 1e-4 * exact.abs().max(1.0),
                "{got} vs {exact}"
            );
        }
    }
}
