//! IQ2_S (ggml type 22): 2.5625 bits per weight, 256 weights per block, against q8_K.
//!
//! Layout: `{ ggml_half d; uint8_t qs[64]; uint8_t qh[8]; uint8_t scales[8]; }`, 82 bytes. `qs[0..32]` are the
//! low 8 bits of 32 grid indices, `qs[32..64]` the sign bytes. Element `e = 32·ib + 8·l + j` (`ib` 0..8, `l`
//! 0..4, `j` 0..8) has magnitude byte `j` of `iq2s_grid[qs[4·ib + l] | ((qh[ib] >> 2l) & 3) << 8]` (1024 entries,
//! bytes 8, 25, 43), is negative when bit `j` of sign byte `qs[32 + 4·ib + l]` is set, and has scale
//! `s = 2·nibble + 1` with the low nibble of `scales[ib]` for `l` 0..2 and the high one for `l` 2..4.
//!
//! The float orders of both stock builds are those of every IQ format (`iq.rs`), with `OUTPUT_SCALE` 0.125;
//! `dequantize_row_iq2_s`: `db = d·(0.5 + nibble)·0.25`.

use super::iq::IqBlock;
use super::iq_grids::{grid_byte, IQ2S_GRID};
use super::q8_k::QK_K;
use crate::fp16::GgmlHalf;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockIQ2S {
    pub d: GgmlHalf,
    pub qs: [u8; QK_K / 4],
    pub qh: [u8; QK_K / 32],
    pub scales: [u8; QK_K / 32],
}
const _: () = assert!(std::mem::size_of::<BlockIQ2S>() == 82);
const _: () = assert!(std::mem::align_of::<BlockIQ2S>() == 1);

impl Default for BlockIQ2S {
    fn default() -> Self {
        BlockIQ2S {
            d: GgmlHalf::default(),
            qs: [0; QK_K / 4],
            qh: [0; QK_K / 32],
            scales: [0; QK_K / 32],
        }
    }
}

impl BlockIQ2S {
    /// The 10-bit grid index of group `g = 4·ib + l` (eight elements `8g..8g+8`).
    #[inline(always)]
    pub fn grid_index(&self, g: usize) -> usize {
        let (ib, l) = (g / 4, g % 4);
        self.qs[g] as usize | (((self.qh[ib] >> (2 * l)) & 3) as usize) << 8
    }
}

impl IqBlock for BlockIQ2S {
    const OUTPUT_SCALE: f32 = 0.125;
    fn d_bits(&self) -> u16 {
        self.d.to_bits()
    }
    fn magnitude(&self, e: usize) -> u8 {
        grid_byte(IQ2S_GRID[self.grid_index(e / 8)], e % 8)
    }
    fn negative(&self, e: usize) -> bool {
        self.qs[32 + e / 8] >> (e % 8) & 1 == 1
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

    fn one_block() -> BlockIQ2S {
        BlockIQ2S {
            d: GgmlHalf::from_bits(0x3c00),
            ..Default::default()
        }
    }

    #[test]
    fn grid_index_takes_qh_fields_in_order() {
        let mut b = one_block();
        b.qs[4 * 3 + 2] = 0x5a; // group 14: ib 3, l 2
        b.qh[3] = 0b10_01_11_00; // field 2 = 0b01
        assert_eq!(b.grid_index(14), 0x15a);
        assert_eq!(b.grid_index(13), 0x300);
        assert_eq!(b.grid_index(15), 0x200);
        assert_eq!(b.grid_index(12), 0);
    }

    #[test]
    fn decode_signs_scales_and_element_order() {
        let mut b = one_block();
        b.qs[1] = 1; // group 1 → iq2s_grid[1]
        b.qs[32 + 1] = 0b100; // element 8 + 2 negative
        b.scales[0] = 0x73; // elements 0..16: nibble 3, 16..32: nibble 7
        let mut y = [0f32; 256];
        dequantize_row_iq_model(&[b], &mut y);
        let g1 = IQ2S_GRID[1];
        for j in 0..8 {
            let want = 3.5 * 0.25 * grid_byte(g1, j) as f32 * if j == 2 { -1.0 } else { 1.0 };
            assert_eq!(y[8 + j], want, "element {}", 8 + j);
        }
        assert_eq!(y[16], 7.5 * 0.25 * grid_byte(IQ2S_GRID[0], 0) as f32);
        assert_eq!(y[32], 0.5 * 0.25 * 8.0);
        assert_eq!((b.scale(0), b.scale(16), b.scale(32)), (7, 15, 1));
    }

    #[test]
    fn models_agree_with_f64_and_differ_on_a_negated_minus_128() {
        let mut b = one_block();
        for (i, v) in b.qs.iter_mut().enumerate() {
            *v = (i * 37 + 11) as u8;
        }
        b.qh = [0x1b, 0xe4, 0x00, 0xff, 0x39, 0x8d, 0x72, 0x5c];
        b.scales = [0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe];
        check_models_against_f64(b);
    }
}
