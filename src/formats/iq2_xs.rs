//! IQ2_XS (ggml type 17): 2.3125 bits per weight, 256 weights per block, against q8_K.
//!
//! Layout: `{ ggml_half d; uint16_t qs[32]; uint8_t scales[8]; }`, 74 bytes. Word `qs[g]` covers elements
//! `8g..8g+8`: its low 9 bits index the 512-entry `iq2xs_grid`, its top 7 bits are a sign field completed to an
//! even-parity byte by `ksigns_iq2xs` (bit `j` negates element `8g + j`). `scales[ib]` holds the scale nibbles
//! of chunk `ib`: the low one for its first 16 elements, the high one for the last 16 (`s = 2·nibble + 1`).
//!
//! The float orders are those of every IQ format (`iq.rs`), `OUTPUT_SCALE` 0.125;
//! `dequantize_row_iq2_xs`: `db = d·(0.5 + nibble)·0.25`.

use super::iq::IqBlock;
use super::iq_grids::{grid_byte, IQ2XS_GRID, KSIGNS_IQ2XS};
use super::q8_k::QK_K;
use crate::fp16::GgmlHalf;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockIQ2XS {
    pub d: GgmlHalf,
    /// `uint16_t qs[32]`, little-endian bytes.
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; QK_K / 32],
}
const _: () = assert!(std::mem::size_of::<BlockIQ2XS>() == 74);
const _: () = assert!(std::mem::align_of::<BlockIQ2XS>() == 1);

impl Default for BlockIQ2XS {
    fn default() -> Self {
        BlockIQ2XS {
            d: GgmlHalf::default(),
            qs: [0; QK_K / 4],
            scales: [0; QK_K / 32],
        }
    }
}

impl BlockIQ2XS {
    /// Word `g` of `qs`.
    #[inline(always)]
    pub fn word(&self, g: usize) -> u16 {
        u16::from_le_bytes([self.qs[2 * g], self.qs[2 * g + 1]])
    }
}

impl IqBlock for BlockIQ2XS {
    const OUTPUT_SCALE: f32 = 0.125;
    fn d_bits(&self) -> u16 {
        self.d.to_bits()
    }
    fn magnitude(&self, e: usize) -> u8 {
        grid_byte(IQ2XS_GRID[(self.word(e / 8) & 511) as usize], e % 8)
    }
    fn negative(&self, e: usize) -> bool {
        KSIGNS_IQ2XS[(self.word(e / 8) >> 9) as usize] >> (e % 8) & 1 == 1
    }
    fn nibble(&self, e: usize) -> u8 {
        (self.scales[e / 32] >> (4 * ((e % 32) / 16))) & 0xf
    }
    fn group_scale(d: f32, nibble: u8) -> f32 {
        d * (0.5 + nibble as f32) * 0.25
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::iq::{check_models_against_f64, dequantize_row_iq_model};

    #[test]
    fn words_give_index_and_signs_scales_split_at_16() {
        let mut b = BlockIQ2XS {
            d: GgmlHalf::from_bits(0x3c00),
            ..Default::default()
        };
        let w: u16 = 0x1ff | (0b0000011 << 9); // last grid entry, elements 0 and 1 negative
        b.qs[2..4].copy_from_slice(&w.to_le_bytes()); // group 1: elements 8..16
        b.scales[0] = 0x92; // nibbles 2 (elements 0..16) and 9 (16..32)
        let mut y = [0f32; 256];
        dequantize_row_iq_model(&[b], &mut y);
        for j in 0..8 {
            let sign = if j < 2 { -1.0 } else { 1.0 };
            assert_eq!(
                y[8 + j],
                2.5 * 0.25 * grid_byte(IQ2XS_GRID[511], j) as f32 * sign
            );
        }
        assert_eq!((b.scale(15), b.scale(16)), (5, 19));
    }

    #[test]
    fn models_agree_with_f64_and_differ_on_a_negated_minus_128() {
        let mut b = BlockIQ2XS {
            d: GgmlHalf::from_bits(0x3c00),
            ..Default::default()
        };
        for (i, v) in b.qs.iter_mut().enumerate() {
            *v = (i * 37 + 11) as u8;
        }
        b.scales = [0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe];
        check_models_against_f64(b);
    }
}
