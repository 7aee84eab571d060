//! q8_K (ggml type 15): the activation side of the K-quants and of TQ1_0/TQ2_0, 256 values per block.
//!
//! Layout: `{ float d; int8_t qs[256]; int16_t bsums[16]; }`, 292 bytes; `bsums[m]` is the sum of quants
//! `16m..16m+16`. Stored here as bytes (alignment 1, like every block type of this crate), so blocks can sit at
//! any address ggml passes.
//!
//! `quantize_row_q8_K` is the reference C in ggml-base in both stock builds (the x86 "kernel" only calls it):
//! per block the value of largest magnitude (the first one on ties, `fabsf(x) > amax`), `iscale = −127/max`,
//! each quant `min(127, nearest_int(iscale·x))` where `nearest_int` adds 1.5·2^23 and reads the low mantissa
//! bits (round to nearest even, and for huge or non-finite products whatever those bits say), stored as
//! `int8_t`; `d = 1/iscale`; an all-zero block (`amax == 0`) gets zero quants and `d = 0`, and its `bsums` are left as
//! they were (stock does not write them).

pub const QK_K: usize = 256;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockQ8K {
    /// `float d`, little-endian bytes.
    pub d: [u8; 4],
    pub qs: [i8; QK_K],
    /// `int16_t bsums[16]`, little-endian bytes.
    pub bsums: [u8; 32],
}
const _: () = assert!(std::mem::size_of::<BlockQ8K>() == 292);
const _: () = assert!(std::mem::align_of::<BlockQ8K>() == 1);

impl Default for BlockQ8K {
    fn default() -> Self {
        BlockQ8K {
            d: [0; 4],
            qs: [0; QK_K],
            bsums: [0; 32],
        }
    }
}

impl BlockQ8K {
    pub fn d(&self) -> f32 {
        f32::from_le_bytes(self.d)
    }
    pub fn bsum(&self, m: usize) -> i16 {
        i16::from_le_bytes([self.bsums[2 * m], self.bsums[2 * m + 1]])
    }
    pub fn set_bsum(&mut self, m: usize, v: i16) {
        self.bsums[2 * m..2 * m + 2].copy_from_slice(&v.to_le_bytes());
    }
}

/// ggml's `nearest_int`: `fval + 1.5·2^23` rounded to f32, its mantissa bits minus 2^22.
#[inline(always)]
pub fn nearest_int(fval: f32) -> i32 {
    let val = fval + 12_582_912.0f32;
    (val.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// `quantize_row_q8_K`: whole blocks of `x` into `y` (a tail shorter than a block is ignored).
pub fn quantize_row_q8_k_model(x: &[f32], y: &mut [BlockQ8K]) {
    for (xb, out) in x.chunks_exact(QK_K).zip(y.iter_mut()) {
        let (mut max, mut amax) = (0f32, 0f32);
        for &v in xb {
            let ax = v.abs();
            if ax > amax {
                amax = ax;
                max = v;
            }
        }
        if amax == 0.0 {
            out.d = [0; 4];
            out.qs = [0; QK_K];
            continue;
        }
        let iscale = -127.0f32 / max;
        for (q, &v) in out.qs.iter_mut().zip(xb) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for m in 0..QK_K / 16 {
            let sum: i32 = out.qs[16 * m..16 * m + 16].iter().map(|&q| q as i32).sum();
            out.set_bsum(m, sum as i16);
        }
        out.d = (1.0f32 / iscale).to_le_bytes();
    }
}

impl super::RandomActivation for BlockQ8K {
    /// The block sums are the quants' own, as ggml's quantizer writes them.
    fn fill_random(out: &mut [u8], state: &mut u64) {
        for blk in out.chunks_exact_mut(std::mem::size_of::<BlockQ8K>()) {
            let d = (1 + super::xorshift64(state) % 1000) as f32 * 1e-4;
            blk[..4].copy_from_slice(&d.to_le_bytes());
            blk[4..260]
                .iter_mut()
                .for_each(|q| *q = super::xorshift64(state) as u8);
            for j in 0..16 {
                let sum: i16 = blk[4 + 16 * j..20 + 16 * j]
                    .iter()
                    .map(|&q| q as i8 as i16)
                    .sum();
                blk[260 + 2 * j..262 + 2 * j].copy_from_slice(&sum.to_le_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(-0.5), 0);
        assert_eq!(nearest_int(-1.5), -2);
        assert_eq!(nearest_int(-127.0), -127);
    }

    #[test]
    fn largest_magnitude_maps_to_minus_127_and_bsums_sum_sixteen() {
        let mut x = [0f32; 256];
        x[3] = 2.0;
        x[200] = -4.0;
        x[17] = 1.0;
        let mut y = [BlockQ8K::default()];
        quantize_row_q8_k_model(&x, &mut y);
        // max = −4 (largest magnitude), iscale = −127/−4 = 31.75: −4 → −127, 2 → 63.5 → 64 (even), 1 → 32.
        assert_eq!(y[0].qs[200], -127);
        assert_eq!(y[0].qs[3], 64); // 63.5 rounds to even
        assert_eq!(y[0].qs[17], 32);
        assert_eq!(y[0].bsum(0), 64);
        assert_eq!(y[0].bsum(1), 32);
        assert_eq!(y[0].bsum(12), -127);
        assert_eq!(y[0].d(), 1.0 / 31.75);
    }

    #[test]
    fn all_zero_block_zeroes_quants_and_scale_but_leaves_bsums() {
        let x = [0f32; 256];
        let mut y = [BlockQ8K {
            d: [1; 4],
            qs: [5; 256],
            bsums: [7; 32],
        }];
        quantize_row_q8_k_model(&x, &mut y);
        assert_eq!(y[0].d, [0; 4]);
        assert_eq!(y[0].qs, [0; 256]);
        assert_eq!(y[0].bsums, [7; 32]);
    }
}
