//! IQ3_S (ggml type 21): 3.4375 bits per weight, 256 weights per block, against q8_K.
//!
//! Layout: `{ ggml_half d; uint8_t qs[64]; uint8_t qh[8]; uint8_t signs[32]; uint8_t scales[4]; }`, 110 bytes.
//! Entry `k` (0..8) of chunk `ib` (elements `32·ib + 4k..+4`) indexes the 512-entry `iq3s_grid` with
//! `qs[8·ib + k] | ((qh[ib] >> k) & 1) << 8`; bit `j` of `signs[4·ib + l]` negates element `32·ib + 8l + j`;
//! `scales[ib/2]` holds the chunk's nibble (low for even `ib`, high for odd; `s = 2·nibble + 1`).
//!
//! The float orders are those of every IQ format (`iq.rs`) with `OUTPUT_SCALE` 1 (stock multiplies by
//! nothing, the same bits); `dequantize_row_iq3_s`: `db = d·(float)(1 + 2·nibble)`.

use super::iq::IqBlock;
use super::iq_grids::IQ3S_GRID;
use super::q8_k::QK_K;
use crate::fp16::GgmlHalf;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockIQ3S {
    pub d: GgmlHalf,
    pub qs: [u8; QK_K / 4],
    pub qh: [u8; QK_K / 32],
    pub signs: [u8; QK_K / 8],
    pub scales: [u8; QK_K / 64],
}
const _: () = assert!(std::mem::size_of::<BlockIQ3S>() == 110);
const _: () = assert!(std::mem::align_of::<BlockIQ3S>() == 1);

impl Default for BlockIQ3S {
    fn default() -> Self {
        BlockIQ3S {
            d: GgmlHalf::default(),
            qs: [0; QK_K / 4],
            qh: [0; QK_K / 32],
            signs: [0; QK_K / 8],
            scales: [0; QK_K / 64],
        }
    }
}

impl BlockIQ3S {
    /// The 9-bit grid index of entry `k = e / 4` (elements `4k..4k+4`).
    #[inline(always)]
    pub fn grid_index(&self, k: usize) -> usize {
        self.qs[k] as usize | (((self.qh[k / 8] >> (k % 8)) & 1) as usize) << 8
    }
}

impl IqBlock for BlockIQ3S {
    const OUTPUT_SCALE: f32 = 1.0;
    fn d_bits(&self) -> u16 {
        self.d.to_bits()
    }
    fn magnitude(&self, e: usize) -> u8 {
        (IQ3S_GRID[self.grid_index(e / 4)] >> (8 * (e % 4))) as u8
    }
    fn negative(&self, e: usize) -> bool {
        self.signs[e / 8] >> (e % 8) & 1 == 1
    }
    fn nibble(&self, e: usize) -> u8 {
        let ib = e / 32;
        (self.scales[ib / 2] >> (4 * (ib % 2))) & 0xf
    }
    fn group_scale(d: f32, nibble: u8) -> f32 {
        d * (1 + 2 * nibble as i32) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::iq::{check_models_against_f64, dequantize_row_iq_model};

    #[test]
    fn qh_bit_k_extends_entry_k_and_nibbles_alternate_by_chunk() {
        let mut b = BlockIQ3S {
            d: GgmlHalf::from_bits(0x3c00),
            ..Default::default()
        };
        b.qs[8 + 5] = 7; // chunk 1, entry 5: elements 52..56
        b.qh[1] = 1 << 5;
        b.signs[4 + 2] = 1 << 5; // chunk 1, group 2, j = 5: element 32 + 16 + 5 = 53
        b.scales[0] = 0x43; // chunk 0 nibble 3, chunk 1 nibble 4
        assert_eq!(b.grid_index(13), 256 + 7);
        let mut y = [0f32; 256];
        dequantize_row_iq_model(&[b], &mut y);
        for j in 0..4 {
            let sign = if j == 1 { -1.0 } else { 1.0 };
            let g = (IQ3S_GRID[263] >> (8 * j)) as u8;
            assert_eq!(y[52 + j], 9.0 * g as f32 * sign, "{j}");
        }
        assert_eq!((b.scale(31), b.scale(32)), (7, 9));
    }

    #[test]
    fn models_agree_with_f64_and_differ_on_a_negated_minus_128() {
        let mut b = BlockIQ3S {
            d: GgmlHalf::from_bits(0x3c00),
            ..Default::default()
        };
        for (i, v) in b.qs.iter_mut().enumerate() {
            *v = (i * 37 + 11) as u8;
        }
        b.qh = [0x1b, 0xe4, 0x00, 0xff, 0x39, 0x8d, 0x72, 0x5c];
        for (i, v) in b.signs.iter_mut().enumerate() {
            *v = (i * 53 + 5) as u8;
        }
        b.scales = [0x10, 0x32, 0x54, 0x76];
        check_models_against_f64(b);
    }
}
