//! TQ2_0 (ggml type 35): ternary weights in 2-bit codes, 256 per block, against q8_K.
//!
//! Layout: `{ uint8_t qs[64]; ggml_half d; }`, 66 bytes, the scale last. Element `e` of a block, with
//! `e = 128·j + 32·l + m` (`j` 0..2, `l` 0..4, `m` 0..32), is code `(qs[32·j + m] >> 2l) & 3` and decodes to
//! `(c − 1)·d`; code 3 is not written by ggml's quantizer but decodes to `+2·d` and is accepted everywhere.
//!
//! The two stock builds run different code:
//! - x64 (`_generic`): per block `sumi = Σ q·(c − 1)` in `int32`, `d = y.d · d0`, `sumf += (float)sumi · d`, each
//!   operation rounded on its own.
//! - haswell (its AVX2 kernel): sixteen i16 lanes; lane `m` (0..16) holds `Σ c·q` over the elements with
//!   `e mod 32 ∈ {2m, 2m + 1}` (`maddubs` pairs, no saturation: at most 16·3·128), minus `bsums[m]`, both with
//!   i16 wrap-around; `madd` against ones makes eight i32 lanes (`L` = i16 lanes `2L`, `2L + 1`), then per block
//!   `acc = fma(float(lane), d, acc)` with the same scalar `d = y.d · d0` (the source writes a multiply and an
//!   add; GCC contracts them into `vfmadd231ps`, seen in the haswell disassembly and required by the bit test),
//!   and `hsum_float_8(acc)` at the end. The q8_K `bsums` enter as given: with the quantizer's own bsums nothing
//!   wraps, with arbitrary ones the model wraps exactly as the kernel does.

use super::q1_0::hsum_float_8;
use super::q8_k::{BlockQ8K, QK_K};
use crate::fp16::{GgmlHalf, F16_TO_F32_TABLE};

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockTQ2_0 {
    pub qs: [u8; QK_K / 4],
    pub d: GgmlHalf,
}
const _: () = assert!(std::mem::size_of::<BlockTQ2_0>() == 66);
const _: () = assert!(std::mem::align_of::<BlockTQ2_0>() == 1);

impl Default for BlockTQ2_0 {
    fn default() -> Self {
        BlockTQ2_0 {
            qs: [0; QK_K / 4],
            d: GgmlHalf::default(),
        }
    }
}

/// Code of element `e` (0..256) of a block.
#[inline(always)]
pub fn code(qs: &[u8; 64], e: usize) -> u8 {
    let (j, l, m) = (e / 128, (e % 128) / 32, e % 32);
    (qs[32 * j + m] >> (2 * l)) & 3
}

/// `dequantize_row_tq2_0`: `(float)(c − 1) · d` per element. Same bits in both builds.
pub fn dequantize_row_tq2_0_model(x: &[BlockTQ2_0], y: &mut [f32]) {
    for (block, out) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = block.d.to_f32();
        for (e, o) in out.iter_mut().enumerate() {
            *o = (code(&block.qs, e) as i32 - 1) as f32 * d;
        }
    }
}

/// The scalar `d = y.d · d0` both builds compute per block: its value, for the kernels (where it is a NaN, the
/// dispatcher takes the model's result instead).
#[inline(always)]
pub fn block_scale(x: &BlockTQ2_0, y: &BlockQ8K) -> f32 {
    F16_TO_F32_TABLE[x.d.to_bits() as usize] * y.d()
}

/// `block_scale` with the builds' NaN: `mulss` with `d0` first.
#[inline(always)]
fn model_block_scale(x: &BlockTQ2_0, y: &BlockQ8K) -> f32 {
    crate::x86_float::mul(F16_TO_F32_TABLE[x.d.to_bits() as usize], y.d())
}

/// The x64 build's `ggml_vec_dot_tq2_0_q8_K`.
pub fn vec_dot_tq2_0_q8_k_x64_model(x: &[BlockTQ2_0], y: &[BlockQ8K]) -> f32 {
    let mut sumf = 0f32;
    for (xb, yb) in x.iter().zip(y) {
        let sumi: i32 = (0..QK_K)
            .map(|e| yb.qs[e] as i32 * (code(&xb.qs, e) as i32 - 1))
            .sum();
        sumf = crate::x86_float::add(sumf, model_block_scale(xb, yb) * sumi as f32);
    }
    sumf
}

/// The haswell kernel's eight i32 lanes of one block (before conversion): i16 lane `m` is
/// `wrap16(Σ c·q − bsums[m])` over `e mod 32 ∈ {2m, 2m + 1}`, lane `L` the sum of i16 lanes `2L` and `2L + 1`.
pub fn haswell_block_lanes(x: &BlockTQ2_0, y: &BlockQ8K) -> [i32; 8] {
    let mut p = [0i32; 16];
    for e in 0..QK_K {
        p[(e % 32) / 2] += code(&x.qs, e) as i32 * y.qs[e] as i32;
    }
    let mut lanes = [0i32; 8];
    for (m, &pm) in p.iter().enumerate() {
        lanes[m / 2] += (pm as i16).wrapping_sub(y.bsum(m)) as i32;
    }
    lanes
}

/// The haswell build's `ggml_vec_dot_tq2_0_q8_K` over `x`, from the eight accumulator lanes `acc`.
pub fn haswell_lanes_from(mut acc: [f32; 8], x: &[BlockTQ2_0], y: &[BlockQ8K]) -> [f32; 8] {
    for (xb, yb) in x.iter().zip(y) {
        let d = model_block_scale(xb, yb);
        let lanes = haswell_block_lanes(xb, yb);
        for l in 0..8 {
            acc[l] = crate::x86_float::fmadd(d, lanes[l] as f32, acc[l]);
        }
    }
    acc
}

/// The haswell build's `ggml_vec_dot_tq2_0_q8_K`.
pub fn vec_dot_tq2_0_q8_k_haswell_model(x: &[BlockTQ2_0], y: &[BlockQ8K]) -> f32 {
    hsum_float_8(haswell_lanes_from([0.0; 8], x, y))
}

/// The model of `order`.
pub fn vec_dot_tq2_0_q8_k_model(order: crate::FloatOrder, x: &[BlockTQ2_0], y: &[BlockQ8K]) -> f32 {
    match order {
        crate::FloatOrder::Haswell => vec_dot_tq2_0_q8_k_haswell_model(x, y),
        crate::FloatOrder::X64 => vec_dot_tq2_0_q8_k_x64_model(x, y),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::q8_k::quantize_row_q8_k_model;

    #[test]
    fn element_order_is_j_then_field_then_byte() {
        let mut qs = [0x55u8; 64]; // every code 1 (weight 0)
        qs[33] = 0x55 & !(3 << 4) | (2 << 4); // byte 33 field 2: element 128 + 64 + 1 = 193 → code 2
        let b = BlockTQ2_0 {
            qs,
            d: GgmlHalf::from_bits(0x3c00),
        };
        let mut y = [0f32; 256];
        dequantize_row_tq2_0_model(&[b], &mut y);
        for (e, &v) in y.iter().enumerate() {
            assert_eq!(v, if e == 193 { 1.0 } else { 0.0 }, "element {e}");
        }
    }

    #[test]
    fn models_agree_with_each_other_and_f64_on_quantized_activations() {
        let x: Vec<f32> = (0..512)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let mut y = vec![BlockQ8K::default(); 2];
        quantize_row_q8_k_model(&x, &mut y);
        let w: Vec<BlockTQ2_0> = (0..2)
            .map(|b| BlockTQ2_0 {
                qs: std::array::from_fn(|j| (j * 7 + b * 13) as u8 & 0b1010_1001),
                d: GgmlHalf::from_bits(0x2e00),
            })
            .collect();
        let mut exact = 0f64;
        for (xb, yb) in w.iter().zip(&y) {
            for e in 0..256 {
                exact += (code(&xb.qs, e) as f64 - 1.0)
                    * xb.d.to_f32() as f64
                    * yb.d() as f64
                    * yb.qs[e] as f64;
            }
        }
        for got in [
            vec_dot_tq2_0_q8_k_x64_model(&w, &y),
            vec_dot_tq2_0_q8_k_haswell_model(&w, &y),
        ] {
            assert!(
                (got as f64 - exact).abs() <= 1e-4 * exact.abs().max(1.0),
                "{got} vs {exact}"
            );
        }
    }

    #[test]
    fn inconsistent_bsums_wrap_in_i16_lanes() {
        let b = BlockTQ2_0 {
            qs: [0xff; 64], // code 3 everywhere
            d: GgmlHalf::from_bits(0x3c00),
        };
        let mut y = BlockQ8K {
            qs: [127; 256],
            ..Default::default()
        };
        y.set_bsum(0, i16::MIN);
        // Lane 0: 16 elements · 3 · 127 = 6096; 6096 − (−32768) wraps to 6096 − 32768 = −26672.
        let lanes = haswell_block_lanes(&b, &y);
        assert_eq!(lanes[0], -26672 + 6096);
    }
}
