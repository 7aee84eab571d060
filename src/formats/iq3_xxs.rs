//! IQ3_XXS (ggml type 18): 3.0625 bits per weight, 256 weights per block, against q8_K.
//!
//! Layout: `{ ggml_half d; uint8_t qs[96]; }`, 98 bytes. `qs[0..64]` index the 256-entry `iq3xxs_grid` (four
//! magnitudes per entry): byte `8·ib + k` for elements `32·ib + 4k..+4`. `qs[64..96]` are eight little-endian
//! words, one per chunk `ib`: four 7-bit sign fields (bits `7l..7l+7`, completed to an even-parity byte by
//! `ksigns_iq2xs`; bit `j` negates element `32·ib + 8l + j`) and the scale nibble in bits 28..32
//! (`s = 2·nibble + 1` for the chunk).
//!
//! The float orders are those of every IQ format (`iq.rs`), `OUTPUT_SCALE` 0.25;
//! `dequantize_row_iq3_xxs`: `db = d·(0.5 + nibble)·0.5`.

use super::iq::{ksigns_negative, IqBlock};
use super::iq_grids::IQ3XXS_GRID;
use super::q8_k::QK_K;
use crate::fp16::GgmlHalf;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockIQ3XXS {
    pub d: GgmlHalf,
    pub qs: [u8; 3 * QK_K / 8],
}
const _: () = assert!(std::mem::size_of::<BlockIQ3XXS>() == 98);
const _: () = assert!(std::mem::align_of::<BlockIQ3XXS>() == 1);

impl Default for BlockIQ3XXS {
    fn default() -> Self {
        BlockIQ3XXS {
            d: GgmlHalf::default(),
            qs: [0; 3 * QK_K / 8],
        }
    }
}

impl BlockIQ3XXS {
    /// The sign/scale word of chunk `ib`.
    #[inline(always)]
    pub fn sign_word(&self, ib: usize) -> u32 {
        u32::from_le_bytes(self.qs[64 + 4 * ib..68 + 4 * ib].try_into().unwrap())
    }
}

impl IqBlock for BlockIQ3XXS {
    const OUTPUT_SCALE: f32 = 0.25;
    fn d_bits(&self) -> u16 {
        self.d.to_bits()
    }
    fn magnitude(&self, e: usize) -> u8 {
        (IQ3XXS_GRID[self.qs[e / 4] as usize] >> (8 * (e % 4))) as u8
    }
    fn negative(&self, e: usize) -> bool {
        ksigns_negative(self.sign_word(e / 32), e)
    }
    fn nibble(&self, e: usize) -> u8 {
        (self.sign_word(e / 32) >> 28) as u8
    }
    fn group_scale(d: f32, nibble: u8) -> f32 {
        d * (0.5 + nibble as f32) * 0.5
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::iq::{check_models_against_f64, dequantize_row_iq_model};

    #[test]
    fn index_bytes_cover_four_elements_and_words_hold_signs_and_scale() {
        let mut b = BlockIQ3XXS {
            d: GgmlHalf::from_bits(0x3c00),
            ..Default::default()
        };
        b.qs[8 + 3] = 200; // chunk 1, entry 3: elements 44..48
                           // Group 1's field 0b0001000 gets the parity bit 7: elements 32 + 8 + 3 and 32 + 8 + 7 are negative.
        let w: u32 = (0b0001000 << 7) | (6 << 28);
        b.qs[68..72].copy_from_slice(&w.to_le_bytes());
        let mut y = [0f32; 256];
        dequantize_row_iq_model(&[b], &mut y);
        for j in 0..4 {
            let sign = if j == 3 { -1.0 } else { 1.0 };
            let g = (IQ3XXS_GRID[200] >> (8 * j)) as u8;
            assert_eq!(y[44 + j], 6.5 * 0.5 * g as f32 * sign, "{j}");
        }
        assert_eq!(b.scale(40), 13);
    }

    #[test]
    fn models_agree_with_f64_and_differ_on_a_negated_minus_128() {
        let mut b = BlockIQ3XXS {
            d: GgmlHalf::from_bits(0x3c00),
            ..Default::default()
        };
        for (i, v) in b.qs.iter_mut().enumerate() {
            *v = (i * 37 + 11) as u8;
        }
        check_models_against_f64(b);
    }
}
