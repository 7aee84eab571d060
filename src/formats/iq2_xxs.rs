//! IQ2_XXS (ggml type 16): 2.0625 bits per weight, 256 weights per block, against q8_K.
//!
//! Layout: `{ ggml_half d; uint16_t qs[32]; }`, 66 bytes. Each 32-weight chunk `ib` reads two little-endian
//! words from `qs` bytes `8·ib..8·ib+8`: `a0` holds four grid indices (byte `l` for the eight elements
//! `32·ib + 8·l..+8`, into the 256-entry `iq2xxs_grid`), `a1` four 7-bit sign fields (bits `7l..7l+7`, completed
//! to an even-parity byte by `ksigns_iq2xs`; bit `j` negates element `8l + j`) and the chunk's scale nibble in
//! bits 28..32 (`s = 2·nibble + 1` for all 32 elements).
//!
//! The float orders are those of every IQ format (`iq.rs`), `OUTPUT_SCALE` 0.125;
//! `dequantize_row_iq2_xxs`: `db = d·(0.5 + nibble)·0.25`.

use super::iq::{ksigns_negative, IqBlock};
use super::iq_grids::{grid_byte, IQ2XXS_GRID};
use super::q8_k::QK_K;
use crate::fp16::GgmlHalf;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockIQ2XXS {
    pub d: GgmlHalf,
    /// `uint16_t qs[32]`, little-endian bytes.
    pub qs: [u8; QK_K / 4],
}
const _: () = assert!(std::mem::size_of::<BlockIQ2XXS>() == 66);
const _: () = assert!(std::mem::align_of::<BlockIQ2XXS>() == 1);

impl Default for BlockIQ2XXS {
    fn default() -> Self {
        BlockIQ2XXS {
            d: GgmlHalf::default(),
            qs: [0; QK_K / 4],
        }
    }
}

impl BlockIQ2XXS {
    /// The sign/scale word `a1` of chunk `ib`.
    #[inline(always)]
    pub fn sign_word(&self, ib: usize) -> u32 {
        u32::from_le_bytes(self.qs[8 * ib + 4..8 * ib + 8].try_into().unwrap())
    }
}

impl IqBlock for BlockIQ2XXS {
    const OUTPUT_SCALE: f32 = 0.125;
    fn d_bits(&self) -> u16 {
        self.d.to_bits()
    }
    fn magnitude(&self, e: usize) -> u8 {
        let (ib, l) = (e / 32, (e % 32) / 8);
        grid_byte(IQ2XXS_GRID[self.qs[8 * ib + l] as usize], e % 8)
    }
    fn negative(&self, e: usize) -> bool {
        ksigns_negative(self.sign_word(e / 32), e)
    }
    fn nibble(&self, e: usize) -> u8 {
        (self.sign_word(e / 32) >> 28) as u8
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
    fn chunk_words_give_indices_signs_and_scale() {
        let mut b = BlockIQ2XXS {
            d: GgmlHalf::from_bits(0x3c00),
            ..Default::default()
        };
        // chunk 1: indices 3, 0, 0, 0; sign field of group 2 = 0b0000011 (parity even: byte 0x03), scale 5.
        b.qs[8] = 3;
        let a1: u32 = (0b11 << 14) | (5 << 28);
        b.qs[12..16].copy_from_slice(&a1.to_le_bytes());
        let mut y = [0f32; 256];
        dequantize_row_iq_model(&[b], &mut y);
        for j in 0..8 {
            assert_eq!(
                y[32 + j],
                5.5 * 0.25 * grid_byte(IQ2XXS_GRID[3], j) as f32,
                "{j}"
            );
        }
        assert!(b.negative(32 + 16) && b.negative(32 + 17) && !b.negative(32 + 18));
        // 0b0000001 has odd parity: bit 7 completes it.
        let a1: u32 = 1 << 7;
        b.qs[12..16].copy_from_slice(&a1.to_le_bytes());
        assert!(b.negative(32 + 8) && b.negative(32 + 15) && !b.negative(32 + 9));
        assert_eq!(b.scale(32), 1);
    }

    #[test]
    fn models_agree_with_f64_and_differ_on_a_negated_minus_128() {
        let mut b = BlockIQ2XXS {
            d: GgmlHalf::from_bits(0x3c00),
            ..Default::default()
        };
        for (i, v) in b.qs.iter_mut().enumerate() {
            *v = (i * 37 + 11) as u8;
        }
        check_models_against_f64(b);
    }
}
