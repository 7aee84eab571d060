//! PTQ1_0 (type 143 in PrismML's llama.cpp fork): the "Bonsai 2" ternary format, 1.75 bits per weight.
//!
//! Layout (`formats.md` §3): `{ uint8_t qs[24]; uint8_t qh[2]; ggml_half d; }`, 28 bytes per 128 weights, the
//! scale **last**. Each byte packs base-3 digits that are read by multiplication: digit `n` of byte `q` is
//! `v = (uint8)(q·3ⁿ)`, `trit = (v·3) >> 8` (in 16 bits), weight `(trit − 1)·d`.
//!
//! Element order (the fork's dequantize and dot product both follow it): stages of 32, 16 and 8 bytes are taken
//! while they fit in the 24 `qs` bytes — so a 16-byte stage (`qs[0..16]`) then an 8-byte stage (`qs[16..24]`);
//! inside a stage of `c` bytes at `j`, digits `n = 0..4` outer and bytes `m = 0..c` inner. Then `qh`: digits
//! `n = 0..3` outer, `h = 0..1` inner. 80 + 40 + 8 = 128 weights in row order.
//!
//! The dot product is the PQ2_0 chain (`formats.md` §4): four q8_0 blocks per block, `sumi += d1·isum` per quarter,
//! `sumf += d0·sumi`, FMA-contracted in an FMA build and unfused otherwise (`pq2_0::pq2_0_block_chain`).

use super::pq2_0::{model_block_chain, pq2_0_block_chain, SumiOperands};
use super::q8_0::{BlockQ8_0, QK8_0};
use crate::fp16::GgmlHalf;

pub const QK_PTQ1_0: usize = 128;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockPTQ1_0 {
    pub qs: [u8; 24],
    pub qh: [u8; 2],
    pub d: GgmlHalf,
}
const _: () = assert!(std::mem::size_of::<BlockPTQ1_0>() == 28);
const _: () = assert!(std::mem::align_of::<BlockPTQ1_0>() == 1);
const _: () = assert!(QK_PTQ1_0 == 4 * QK8_0);

/// Bytes of a block before the scale: `qs` then `qh`, indexed 0..26 (the SIMD kernels read them as one run).
pub const PACKED_BYTES: usize = 26;

/// `3ⁿ` for the five digits a byte holds.
pub const POW3: [u8; 5] = [1, 3, 9, 27, 81];

/// Digit `n` (0..5) of byte `q`, as the fork reads it: `v = (uint8)(q·3ⁿ)`, `(v·3) >> 8`. In 0..=2 for every byte.
#[inline(always)]
pub fn trit(q: u8, n: usize) -> u8 {
    let v = q.wrapping_mul(POW3[n]);
    ((v as u16 * 3) >> 8) as u8
}

/// The 128 trits of a block (0..=2, weight `trit − 1`) in element order: a transcription of the fork's loops.
pub fn block_trits(b: &BlockPTQ1_0) -> [u8; QK_PTQ1_0] {
    let mut out = [0u8; QK_PTQ1_0];
    let mut at = 0;
    let mut j = 0;
    for stage in [32usize, 16, 8] {
        if j + stage > b.qs.len() {
            continue;
        }
        for n in 0..5 {
            for m in 0..stage {
                out[at] = trit(b.qs[j + m], n);
                at += 1;
            }
        }
        j += stage;
    }
    for n in 0..4 {
        for h in 0..2 {
            out[at] = trit(b.qh[h], n);
            at += 1;
        }
    }
    debug_assert_eq!(at, QK_PTQ1_0);
    out
}

/// Where element `p` (0..128) comes from: `(packed byte index 0..26, digit)`, `qs[i]` being index `i` and
/// `qh[h]` index `24 + h`. The closed form of `block_trits`' order, which the SIMD kernels build their byte
/// permutations from; a test checks the two agree.
pub const fn element_source(p: usize) -> (usize, usize) {
    if p < 80 {
        (p % 16, p / 16)
    } else if p < 120 {
        (16 + (p - 80) % 8, (p - 80) / 8)
    } else {
        (24 + (p - 120) % 2, (p - 120) / 2)
    }
}

/// `dequantize_row_ptq1_0`: `((int)trit − 1) · d` per weight (so a zero trit weight with a negative scale is −0).
pub fn dequantize_row_ptq1_0_model(x: &[BlockPTQ1_0], y: &mut [f32]) {
    for (block, out) in x.iter().zip(y.chunks_exact_mut(QK_PTQ1_0)) {
        let d = block.d.to_f32();
        for (o, t) in out.iter_mut().zip(block_trits(block)) {
            *o = (t as i32 - 1) as f32 * d;
        }
    }
}

/// `Σ (trit − 1)·q` of the four quarters of a block against its four q8_0 blocks.
pub fn quarter_isums(x: &BlockPTQ1_0, y: &[BlockQ8_0]) -> [i32; 4] {
    let t = block_trits(x);
    std::array::from_fn(|k| {
        (0..QK8_0)
            .map(|j| (t[32 * k + j] as i32 - 1) * y[k].qs[j] as i32)
            .sum()
    })
}

/// The scale, the four q8_0 scales and the four quarter sums of block `x` against its q8_0 blocks `q`.
#[inline(always)]
fn block_terms(x: &BlockPTQ1_0, q: &[BlockQ8_0]) -> (f32, [f32; 4], [f32; 4]) {
    let s = quarter_isums(x, q).map(|v| v as f32);
    let d1 = [0, 1, 2, 3].map(|k| q[k].d.to_f32());
    (x.d.to_f32(), d1, s)
}

/// The fork's chain over `x`, continuing from `sumf` (0 for a whole row); the SIMD kernels finish their rows
/// with it.
// Always inlined: the SIMD kernels finish their rows with it inside their own target features, where the
// contracted steps are FMA instructions (compiled on its own, for the baseline CPU, each is a call to `fmaf`).
#[inline(always)]
pub fn vec_dot_ptq1_0_q8_0_from<const FMA: bool>(
    mut sumf: f32,
    x: &[BlockPTQ1_0],
    y: &[BlockQ8_0],
) -> f32 {
    for (i, xb) in x.iter().enumerate() {
        let (d0, d1, s) = block_terms(xb, &y[4 * i..4 * i + 4]);
        sumf = pq2_0_block_chain::<FMA>(sumf, d0, d1, s);
    }
    sumf
}

/// The model of a whole row: the chain in the compiled C's operand order (`pq2_0::model_block_chain`; this
/// C's unfused `sumi +=` takes the product first).
fn model<const FMA: bool>(x: &[BlockPTQ1_0], y: &[BlockQ8_0]) -> f32 {
    x.iter().enumerate().fold(0.0, |sumf, (i, xb)| {
        let (d0, d1, s) = block_terms(xb, &y[4 * i..4 * i + 4]);
        model_block_chain::<FMA>(sumf, d0, d1, s, SumiOperands::ProductFirst)
    })
}

/// The fork's `ggml_vec_dot_ptq1_0_q8_0` built with FMA (GCC contracts each `+= ·`).
pub fn vec_dot_ptq1_0_q8_0_fma_model(x: &[BlockPTQ1_0], y: &[BlockQ8_0]) -> f32 {
    model::<true>(x, y)
}

/// The same generic C built without FMA.
pub fn vec_dot_ptq1_0_q8_0_nofma_model(x: &[BlockPTQ1_0], y: &[BlockQ8_0]) -> f32 {
    model::<false>(x, y)
}

pub fn vec_dot_ptq1_0_q8_0_model(
    order: crate::FloatOrder,
    x: &[BlockPTQ1_0],
    y: &[BlockQ8_0],
) -> f32 {
    match order {
        crate::FloatOrder::Haswell => vec_dot_ptq1_0_q8_0_fma_model(x, y),
        crate::FloatOrder::X64 => vec_dot_ptq1_0_q8_0_nofma_model(x, y),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn half(v: f32) -> GgmlHalf {
        GgmlHalf::from_bits(half::f16::from_f32(v).to_bits())
    }

    /// The byte a ternary quantizer stores for five digits (first digit most significant):
    /// `ceil(x·256 / 243)` with `x = Σ dₙ·3^(4−n)`. Decoding it must give the digits back in order `n = 0..4`.
    fn pack5(digits: [u8; 5]) -> u8 {
        let x = digits.iter().fold(0u32, |a, &t| 3 * a + t as u32);
        ((x * 256).div_ceil(243)) as u8
    }

    #[test]
    fn trit_reads_back_every_base3_packing() {
        for x in 0..243u32 {
            let digits: [u8; 5] = std::array::from_fn(|n| (x / 3u32.pow(4 - n as u32) % 3) as u8);
            let q = pack5(digits);
            for (n, &want) in digits.iter().enumerate() {
                assert_eq!(trit(q, n), want, "x = {x}, byte {q}, digit {n}");
            }
        }
    }

    #[test]
    fn trit_of_every_byte_and_digit_is_a_ternary_digit_by_the_formula() {
        // Every byte value 0..=255 (243..=255 never come out of a quantizer but must decode as the fork does),
        // computed here in u32 arithmetic, independently of the u8 wrapping in `trit`.
        for q in 0..=255u32 {
            for n in 0..5 {
                let v = (q * 3u32.pow(n as u32)) % 256;
                let want = (v * 3) / 256;
                assert_eq!(trit(q as u8, n) as u32, want, "byte {q} digit {n}");
                assert!(want <= 2);
            }
        }
    }

    /// The element order spelled out by hand for a few positions of each stage.
    #[test]
    fn element_order_by_hand() {
        let by_hand = [
            (0, (0, 0)),
            (1, (1, 0)),
            (15, (15, 0)),
            (16, (0, 1)),
            (17, (1, 1)),
            (79, (15, 4)),
            (80, (16, 0)),
            (87, (23, 0)),
            (88, (16, 1)),
            (119, (23, 4)),
            (120, (24, 0)),
            (121, (25, 0)),
            (122, (24, 1)),
            (127, (25, 3)),
        ];
        for (p, src) in by_hand {
            assert_eq!(element_source(p), src, "element {p}");
        }
    }

    fn packed(b: &BlockPTQ1_0) -> [u8; PACKED_BYTES] {
        std::array::from_fn(|i| if i < 24 { b.qs[i] } else { b.qh[i - 24] })
    }

    fn set_packed(b: &mut BlockPTQ1_0, i: usize, v: u8) {
        if i < 24 {
            b.qs[i] = v
        } else {
            b.qh[i - 24] = v
        }
    }

    /// Exhaustive: every byte value in every one of the 26 positions, over a background block; exactly the
    /// elements `element_source` names change, each to its digit, and `block_trits` (the loop transcription)
    /// agrees with the closed form everywhere. A wrong stage or digit order fails here.
    #[test]
    fn every_byte_in_every_position_decodes_in_element_order() {
        let mut background = BlockPTQ1_0 {
            d: half(1.0),
            ..Default::default()
        };
        for i in 0..PACKED_BYTES {
            set_packed(&mut background, i, (37 * i as u8).wrapping_add(11));
        }
        for pos in 0..PACKED_BYTES {
            for value in 0..=255u8 {
                let mut b = background;
                set_packed(&mut b, pos, value);
                let t = block_trits(&b);
                let bytes = packed(&b);
                for (p, &tp) in t.iter().enumerate() {
                    let (src, n) = element_source(p);
                    assert_eq!(tp, trit(bytes[src], n), "element {p}, byte {pos} = {value}");
                }
                let digits = if pos < 24 { 5 } else { 4 };
                let touched = (0..QK_PTQ1_0)
                    .filter(|&p| element_source(p).0 == pos)
                    .count();
                assert_eq!(touched, digits, "byte {pos} feeds {digits} elements");
            }
        }
        // Every element has exactly one source.
        let mut seen = [[false; 5]; PACKED_BYTES];
        for p in 0..QK_PTQ1_0 {
            let (src, n) = element_source(p);
            assert!(!seen[src][n], "element {p} shares a source");
            seen[src][n] = true;
        }
    }

    /// Hand-built block: scale last; a byte whose five digits are 2,1,0,2,1 in stage 1, one in stage 2 and one
    /// in qh, with q8 = 1 so each quarter sum is Σ(trit − 1) of its 32 elements.
    #[test]
    fn known_answer_scale_last_and_quarters() {
        // Background byte: every digit 1 (weight 0).
        let ones = pack5([1; 5]);
        assert!((0..5).all(|n| trit(ones, n) == 1));
        let mut raw = [ones; 28];
        raw[26..].copy_from_slice(&half(-0.5).to_bits().to_le_bytes());
        raw[3] = pack5([2, 1, 0, 2, 1]); // elements 3, 19, 35, 51, 67
        raw[17] = pack5([0, 0, 2, 2, 2]); // elements 81, 89, 97, 105, 113
        raw[25] = pack5([2, 0, 0, 2, 1]); // qh[1]: elements 121, 123, 125, 127 (4 digits)
        let b: BlockPTQ1_0 = crate::formats::blocks::<BlockPTQ1_0>(&raw)[0];
        assert_eq!(b.d.to_f32(), -0.5);
        let mut y = [f32::NAN; 128];
        dequantize_row_ptq1_0_model(&[b], &mut y);
        let mut want = [-0.0f32; 128];
        for (p, w) in [
            (3, 1),
            (35, -1),
            (51, 1),
            (81, -1),
            (89, -1),
            (97, 1),
            (105, 1),
            (113, 1),
            (121, 1),
            (123, -1),
            (125, -1),
            (127, 1),
        ] {
            want[p] = w as f32 * -0.5;
        }
        assert_eq!(y.map(f32::to_bits), want.map(f32::to_bits));
        let q: Vec<BlockQ8_0> = (0..4)
            .map(|_| BlockQ8_0 {
                d: half(1.0),
                qs: [1; 32],
            })
            .collect();
        // Quarters: 0..32 → +1 (3); 32..64 → −1 + 1 (35, 51); 64..96 → −1 − 1 (81, 89); 96..128 → 1+1+1+1−1−1+1.
        assert_eq!(quarter_isums(&b, &q), [1, 0, -2, 3]);
        assert_eq!(vec_dot_ptq1_0_q8_0_fma_model(&[b], &q), -1.0);
        assert_eq!(vec_dot_ptq1_0_q8_0_nofma_model(&[b], &q), -1.0);
    }
}
