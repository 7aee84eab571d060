//! PQ2_0 (type 142 in PrismML's llama.cpp fork, earlier named Q2_0_g128): the "Bonsai 2" 2-bit format.
//!
//! Layout (`formats.md` §3): `{ ggml_half d; uint8_t qs[32]; }`, 34 bytes per 128 weights, the scale first. Weight
//! `j` is the code `c = (qs[j/4] >> 2·(j%4)) & 3`, least significant bits first, decoding to `(c − 1)·d`, as Q2_0
//! with a group of 128. The dot product meets four q8_0 blocks per block.
//!
//! No mainline build loads the type and the fork has no x86 SIMD kernel: its generic C is the specification
//! (`formats.md` §4): per block `i`, `sumi = 0; sumi += d1[4i+k]·isum_k` for k = 0..3; `sumf += d0·sumi`, from
//! `sumf = 0`, blocks in order; with FMA contraction in an FMA build, each product and sum rounded on its own
//! otherwise. The fork's build is not available here, so these models are written from that text and checked by
//! hand-built known answers (tests below) and against f64; their NaN results follow that C as GCC compiles it
//! (`model_block_chain`, checked against the compiled C by `tests/fork_reference.rs`).

use super::q8_0::{BlockQ8_0, QK8_0};
use crate::fp16::GgmlHalf;

pub const QK_PQ2_0: usize = 128;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockPQ2_0 {
    pub d: GgmlHalf,
    pub qs: [u8; QK_PQ2_0 / 4],
}
const _: () = assert!(std::mem::size_of::<BlockPQ2_0>() == 34);
const _: () = assert!(std::mem::align_of::<BlockPQ2_0>() == 1);
const _: () = assert!(QK_PQ2_0 == 4 * QK8_0);

/// Code of weight `j` (0..128) of a block.
#[inline(always)]
pub fn code(qs: &[u8; 32], j: usize) -> u8 {
    (qs[j / 4] >> (2 * (j % 4))) & 3
}

/// `dequantize_row_pq2_0`: `((int)c − 1) · d` per weight (so code 1 with a negative scale gives −0).
pub fn dequantize_row_pq2_0_model(x: &[BlockPQ2_0], y: &mut [f32]) {
    for (block, out) in x.iter().zip(y.chunks_exact_mut(QK_PQ2_0)) {
        let d = block.d.to_f32();
        for (j, o) in out.iter_mut().enumerate() {
            *o = (code(&block.qs, j) as i32 - 1) as f32 * d;
        }
    }
}

/// `Σ (c − 1)·q` over quarter `k` (0..3) of a block: the integer sum the chain multiplies by `d1[4i + k]`.
#[inline(always)]
pub fn quarter_isum(x: &BlockPQ2_0, y: &BlockQ8_0, k: usize) -> i32 {
    (0..QK8_0)
        .map(|j| (code(&x.qs, 32 * k + j) as i32 - 1) * y.qs[j] as i32)
        .sum()
}

/// The chain of one block, continuing `sumf`, from the four quarter sums.
#[inline(always)]
pub fn pq2_0_block_chain<const FMA: bool>(sumf: f32, d0: f32, d1: [f32; 4], s: [f32; 4]) -> f32 {
    if FMA {
        let mut sumi = 0.0f32;
        for k in 0..4 {
            sumi = d1[k].mul_add(s[k], sumi);
        }
        d0.mul_add(sumi, sumf)
    } else {
        let mut sumi = 0.0f32;
        for k in 0..4 {
            sumi += d1[k] * s[k];
        }
        sumf + d0 * sumi
    }
}

/// Which operand the unfused `sumi += d1·isum` of the compiled C takes first: the one step whose order two
/// builds of the same source differ in (GCC 12 at `-O3` puts the running sum first in PQ2_0's loop and the
/// product first in PTQ1_0's unrolled one), and which decides which NaN a row with two NaN scales returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SumiOperands {
    SumFirst,
    ProductFirst,
}

/// `pq2_0_block_chain` with every step's operands in the order of the compiled C (its disassembly): with FMA
/// `vfmadd·ss` with d1 a multiplicand and `sumi` the addend, then `sumi · d0 + sumf`; without, `isum · d1`
/// added to `sumi` in `sum_first`'s order, `sumi · d0`, and `sumf + ·`. The values are the kernels' chain's;
/// only a NaN result can tell the two apart, and the models give the C's (`x86_float`).
#[inline(always)]
pub fn model_block_chain<const FMA: bool>(
    sumf: f32,
    d0: f32,
    d1: [f32; 4],
    s: [f32; 4],
    sumi_operands: SumiOperands,
) -> f32 {
    use crate::x86_float::{add, fmadd, mul};
    let mut sumi = 0.0f32;
    for k in 0..4 {
        sumi = if FMA {
            fmadd(d1[k], s[k], sumi)
        } else {
            let p = mul(s[k], d1[k]);
            match sumi_operands {
                SumiOperands::SumFirst => add(sumi, p),
                SumiOperands::ProductFirst => add(p, sumi),
            }
        };
    }
    if FMA {
        fmadd(sumi, d0, sumf)
    } else {
        add(sumf, mul(sumi, d0))
    }
}

/// The scale, the four q8_0 scales and the four quarter sums of block `x` against its q8_0 blocks `q`.
#[inline(always)]
fn block_terms(x: &BlockPQ2_0, q: &[BlockQ8_0]) -> (f32, [f32; 4], [f32; 4]) {
    let s = [0, 1, 2, 3].map(|k| quarter_isum(x, &q[k], k) as f32);
    let d1 = [0, 1, 2, 3].map(|k| q[k].d.to_f32());
    (x.d.to_f32(), d1, s)
}

/// The fork's chain over `x`, continuing from `sumf` (0 for a whole row); the SIMD kernels finish their rows
/// with it, so the float order lives in one place.
// Always inlined: the SIMD kernels finish their rows with it inside their own target features, where the
// contracted steps are FMA instructions (compiled on its own, for the baseline CPU, each is a call to `fmaf`).
#[inline(always)]
pub fn vec_dot_pq2_0_q8_0_from<const FMA: bool>(
    mut sumf: f32,
    x: &[BlockPQ2_0],
    y: &[BlockQ8_0],
) -> f32 {
    for (i, xb) in x.iter().enumerate() {
        let (d0, d1, s) = block_terms(xb, &y[4 * i..4 * i + 4]);
        sumf = pq2_0_block_chain::<FMA>(sumf, d0, d1, s);
    }
    sumf
}

/// The model of a whole row: `model_block_chain` over the blocks.
fn model<const FMA: bool>(x: &[BlockPQ2_0], y: &[BlockQ8_0]) -> f32 {
    x.iter().enumerate().fold(0.0, |sumf, (i, xb)| {
        let (d0, d1, s) = block_terms(xb, &y[4 * i..4 * i + 4]);
        model_block_chain::<FMA>(sumf, d0, d1, s, SumiOperands::SumFirst)
    })
}

/// The fork's `ggml_vec_dot_pq2_0_q8_0` built with FMA (GCC contracts each `+= ·`).
pub fn vec_dot_pq2_0_q8_0_fma_model(x: &[BlockPQ2_0], y: &[BlockQ8_0]) -> f32 {
    model::<true>(x, y)
}

/// The same generic C built without FMA.
pub fn vec_dot_pq2_0_q8_0_nofma_model(x: &[BlockPQ2_0], y: &[BlockQ8_0]) -> f32 {
    model::<false>(x, y)
}

pub fn vec_dot_pq2_0_q8_0_model(
    order: crate::FloatOrder,
    x: &[BlockPQ2_0],
    y: &[BlockQ8_0],
) -> f32 {
    match order {
        crate::FloatOrder::Haswell => vec_dot_pq2_0_q8_0_fma_model(x, y),
        crate::FloatOrder::X64 => vec_dot_pq2_0_q8_0_nofma_model(x, y),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn half(v: f32) -> GgmlHalf {
        GgmlHalf::from_bits(half::f16::from_f32(v).to_bits())
    }

    /// Hand-built: scale first, then codes LSB first; every code value in every position of a byte.
    #[test]
    fn known_answer_layout_and_every_code() {
        let mut raw = [0u8; 34];
        raw[..2].copy_from_slice(&half(0.5).to_bits().to_le_bytes());
        // byte 0: codes 0,1,2,3 (weights 0..3); byte 1: 3,2,1,0 (weights 4..7); last byte: all code 3.
        raw[2] = 0b11_10_01_00;
        raw[3] = 0b00_01_10_11;
        raw[33] = 0xff;
        let b: BlockPQ2_0 = crate::formats::blocks::<BlockPQ2_0>(&raw)[0];
        let mut y = [f32::NAN; 128];
        dequantize_row_pq2_0_model(&[b], &mut y);
        assert_eq!(&y[..8], &[-0.5, 0.0, 0.5, 1.0, 1.0, 0.5, 0.0, -0.5]);
        assert_eq!(&y[124..], &[1.0; 4]);
        // every other byte is 0: code 0, weight -d
        assert!(y[8..124].iter().all(|&v| v == -0.5));
    }

    /// Known answer for the dot product: one block, q8 = 1 everywhere, unit scales: Σ(c − 1) exactly.
    #[test]
    fn known_answer_dot() {
        let mut qs = [0x55u8; 32]; // code 1 everywhere: weight 0
        qs[0] = 0b11_10_01_00; // codes 0,1,2,3 → -1 + 0 + 1 + 2 = 2
        qs[31] = 0xaa; // four code 2 → +4 (in quarter 3)
        let x = [BlockPQ2_0 { d: half(1.0), qs }];
        let y: Vec<BlockQ8_0> = (0..4)
            .map(|_| BlockQ8_0 {
                d: half(1.0),
                qs: [1; 32],
            })
            .collect();
        assert_eq!(quarter_isum(&x[0], &y[0], 0), 2);
        assert_eq!(quarter_isum(&x[0], &y[3], 3), 4);
        assert_eq!(vec_dot_pq2_0_q8_0_fma_model(&x, &y), 6.0);
        assert_eq!(vec_dot_pq2_0_q8_0_nofma_model(&x, &y), 6.0);
    }

    /// The two chains differ where fusing changes a rounding, and both stay close to the exact value.
    #[test]
    fn chains_round_as_specified() {
        let d1 = [0.1f32, 0.3, 0.7, 1.3];
        let s = [3.0f32, -7.0, 11.0, 13.0];
        let fused = pq2_0_block_chain::<true>(0.25, 0.3, d1, s);
        let mut sumi = 0.0f32;
        for k in 0..4 {
            sumi = d1[k].mul_add(s[k], sumi);
        }
        assert_eq!(fused.to_bits(), 0.3f32.mul_add(sumi, 0.25).to_bits());
        let plain = pq2_0_block_chain::<false>(0.25, 0.3, d1, s);
        let sumi: f32 = ((0.0 + d1[0] * s[0] + d1[1] * s[1]) + d1[2] * s[2]) + d1[3] * s[3];
        assert_eq!(plain.to_bits(), (0.25 + 0.3 * sumi).to_bits());
        let exact: f64 = 0.25
            + 0.3
                * d1.iter()
                    .zip(&s)
                    .map(|(a, b)| *a as f64 * *b as f64)
                    .sum::<f64>();
        assert!((fused as f64 - exact).abs() < 1e-5 && (plain as f64 - exact).abs() < 1e-5);
    }
}
