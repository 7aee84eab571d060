//! Random and adversarial inputs for the bit tests: every byte value in every position, code 3, q8 = −128, f16
//! scales that are zero, subnormal, the largest, ±Inf and NaN, rows of one block up to 12288 columns, tails
//! that are not whole blocks, and buffers at every alignment.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::formats::q2_0::QK2_0;
use crate::formats::q8_0::QK8_0;

pub const Q2_0_BYTES: usize = 18;
pub const Q8_0_BYTES: usize = 34;
pub const Q1_0_BYTES: usize = 18;
pub const TQ2_0_BYTES: usize = 66;
pub const TQ1_0_BYTES: usize = 54;
pub const Q8_K_BYTES: usize = 292;

/// A byte buffer whose payload starts `offset` bytes into its allocation, so kernels see every alignment.
pub struct Unaligned {
    storage: Vec<u8>,
    offset: usize,
    len: usize,
}

impl Unaligned {
    pub fn new(len: usize, offset: usize) -> Unaligned {
        Unaligned {
            storage: vec![0; len + offset + 64],
            offset,
            len,
        }
    }
    pub fn bytes(&self) -> &[u8] {
        &self.storage[self.offset..self.offset + self.len]
    }
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.offset..self.offset + self.len]
    }
}

/// f16 scales worth trying: ordinary magnitudes, and the edges.
pub const SPECIAL_F16: [u16; 14] = [
    0x0000, 0x8000, // ±0
    0x0001, 0x83ff, // smallest / largest-magnitude negative subnormal
    0x0400, // smallest normal
    0x7bff, 0xfbff, // ±65504
    0x7c00, 0xfc00, // ±Inf
    0x7e00, 0x7c01, 0xfe55, // NaNs (quiet, signalling, negative with payload)
    0x3c00, 0xb800, // 1, -0.5
];

pub struct Gen {
    pub rng: SmallRng,
    pub case: u64,
}

impl Gen {
    pub fn new(seed: u64) -> Gen {
        Gen {
            rng: SmallRng::seed_from_u64(seed),
            case: 0,
        }
    }

    /// A scale: mostly realistic (what quantizers write), sometimes an edge, sometimes any bit pattern.
    pub fn f16_scale(&mut self, realistic: u16) -> u16 {
        match self.rng.gen_range(0..20) {
            0 => SPECIAL_F16[self.rng.gen_range(0..SPECIAL_F16.len())],
            1 => self.rng.gen(),
            _ => realistic,
        }
    }

    fn realistic_weight_scale(&mut self) -> u16 {
        // 0.002 .. 0.1, either sign rarely negative
        let v: f32 =
            self.rng.gen_range(0.002..0.1) * if self.rng.gen_ratio(1, 10) { -1.0 } else { 1.0 };
        half::f16::from_f32(v).to_bits()
    }

    fn realistic_act_scale(&mut self) -> u16 {
        let v: f32 = self.rng.gen_range(0.001..2.0);
        half::f16::from_f32(v).to_bits()
    }

    /// Block count for a row: mostly small (every tail of a 4- or 8-block batch), sometimes the model widths.
    pub fn row_blocks(&mut self, qk: usize) -> usize {
        match self.rng.gen_range(0..10) {
            0 => [1024, 4096, 12288][self.rng.gen_range(0..3)] / qk,
            1 => self.rng.gen_range(1..=12288 / qk),
            _ => self.rng.gen_range(1..=24),
        }
    }

    /// Q2_0 weight bytes for `nb` blocks. The code bytes cycle through every value in every position as
    /// cases advance; other cases are random, ternary-only, or all code 3.
    pub fn q2_0_row(&mut self, nb: usize, out: &mut [u8]) {
        let style = self.rng.gen_range(0..6);
        let case = self.case;
        for b in 0..nb {
            let blk = &mut out[b * Q2_0_BYTES..(b + 1) * Q2_0_BYTES];
            let d = self.realistic_weight_scale();
            let d = self.f16_scale(d);
            blk[..2].copy_from_slice(&d.to_le_bytes());
            for (j, q) in blk[2..].iter_mut().enumerate() {
                *q = match style {
                    0 => ((case as usize + 7 * b + 31 * j) % 256) as u8, // every byte value in every position
                    1 => 0xff,                                           // code 3 everywhere
                    2 => {
                        // ternary 31/38/31 %
                        let mut v = 0u8;
                        for r in 0..4 {
                            let x = self.rng.gen_range(0..100);
                            let c = if x < 31 {
                                0
                            } else if x < 69 {
                                1
                            } else {
                                2
                            };
                            v |= c << (2 * r);
                        }
                        v
                    }
                    _ => self.rng.gen(),
                };
            }
        }
    }

    /// Q1_0 blocks for `nb` blocks (18 bytes each): bit bytes cycling through every value in every position
    /// as cases advance, all clear (every weight −d, so q8 = −128 meets a cleared bit), all set, or random.
    pub fn q1_0_row(&mut self, nb: usize, out: &mut [u8]) {
        let style = self.rng.gen_range(0..5);
        let case = self.case;
        for b in 0..nb {
            let blk = &mut out[b * Q1_0_BYTES..(b + 1) * Q1_0_BYTES];
            let d = self.realistic_weight_scale();
            let d = self.f16_scale(d);
            blk[..2].copy_from_slice(&d.to_le_bytes());
            for (j, q) in blk[2..].iter_mut().enumerate() {
                *q = match style {
                    0 => ((case as usize + 7 * b + 31 * j) % 256) as u8,
                    1 => 0x00,
                    2 => 0xff,
                    _ => self.rng.gen(),
                };
            }
        }
    }

    /// TQ2_0 blocks (66 bytes, scale last): code bytes cycling through every value in every position, all code 3,
    /// ternary, or random.
    pub fn tq2_0_row(&mut self, nb: usize, out: &mut [u8]) {
        let style = self.rng.gen_range(0..5);
        let case = self.case;
        for b in 0..nb {
            let blk = &mut out[b * TQ2_0_BYTES..(b + 1) * TQ2_0_BYTES];
            for (j, q) in blk[..64].iter_mut().enumerate() {
                *q = match style {
                    0 => ((case as usize + 7 * b + 31 * j) % 256) as u8,
                    1 => 0xff,
                    2 => {
                        let mut v = 0u8;
                        for r in 0..4 {
                            v |= self.rng.gen_range(0..3u8) << (2 * r);
                        }
                        v
                    }
                    _ => self.rng.gen(),
                };
            }
            let d = self.realistic_weight_scale();
            let d = self.f16_scale(d);
            blk[64..].copy_from_slice(&d.to_le_bytes());
        }
    }

    /// Blocks of IQ format `format` (`interpose::IQ_SYMBOLS` order; `bytes` per block, the f16 scale first):
    /// every byte value in every position as cases advance, every weight negative (so q8 = −128 is negated),
    /// or random; realistic or special f16 scales.
    pub fn iq_row(&mut self, format: usize, bytes: usize, nb: usize, out: &mut [u8]) {
        let style = self.rng.gen_range(0..4);
        let case = self.case;
        for b in 0..nb {
            let blk = &mut out[b * bytes..(b + 1) * bytes];
            let d = self.realistic_weight_scale();
            let d = self.f16_scale(d);
            blk[..2].copy_from_slice(&d.to_le_bytes());
            for (j, q) in blk[2..].iter_mut().enumerate() {
                *q = match style {
                    0 => ((case as usize + 7 * b + 31 * j) % 256) as u8,
                    _ => self.rng.gen(),
                };
            }
            if style == 1 {
                all_negative(format, &mut blk[2..]);
            }
        }
    }

    /// TQ1_0 blocks (54 bytes, scale last): packed bytes cycling through every value 0..=255 (243..=255, which
    /// the quantizer never writes, included) in every position, all 0xff, packings of random digits as the
    /// quantizer writes them, or random.
    pub fn tq1_0_row(&mut self, nb: usize, out: &mut [u8]) {
        let style = self.rng.gen_range(0..4);
        let case = self.case;
        for b in 0..nb {
            let blk = &mut out[b * TQ1_0_BYTES..(b + 1) * TQ1_0_BYTES];
            for (j, q) in blk[..52].iter_mut().enumerate() {
                *q = match style {
                    0 => ((case as usize + 7 * b + 31 * j) % 256) as u8,
                    1 => 0xff,
                    2 => {
                        // Five digits per qs byte, four (and a zero) per qh byte, packed as ceil(x·256/243).
                        let mut x = 0u32;
                        for n in 0..5 {
                            let digit = if j >= 48 && n == 4 {
                                0
                            } else {
                                self.rng.gen_range(0..3u32)
                            };
                            x = 3 * x + digit;
                        }
                        (x * 256).div_ceil(243) as u8
                    }
                    _ => self.rng.gen(),
                };
            }
            let d = self.realistic_weight_scale();
            let d = self.f16_scale(d);
            blk[52..].copy_from_slice(&d.to_le_bytes());
        }
    }

    /// q8_K blocks (292 bytes): mostly activations quantized by `quantize` (stock's own `quantize_row_q8_K`,
    /// so the bsums are the quantizer's), sometimes bytes built directly: all −128 quants with consistent
    /// bsums, or random quants with arbitrary bsums (stock's i16 lanes then wrap) and arbitrary `d` bits.
    pub fn q8_k_row(&mut self, nb: usize, out: &mut [u8], quantize: crate::stock::QuantizeRowFn) {
        match self.rng.gen_range(0..6) {
            0 => {
                for blk in out.chunks_exact_mut(Q8_K_BYTES).take(nb) {
                    let d: f32 = self.rng.gen_range(0.001..0.05);
                    blk[..4].copy_from_slice(&d.to_le_bytes());
                    blk[4..260].fill(0x80);
                    for m in 0..16 {
                        blk[260 + 2 * m..262 + 2 * m].copy_from_slice(&(-2048i16).to_le_bytes());
                    }
                }
            }
            1 => {
                for blk in out.chunks_exact_mut(Q8_K_BYTES).take(nb) {
                    self.rng.fill(&mut blk[..]);
                    if self.rng.gen_ratio(1, 2) {
                        let d: f32 = self.rng.gen_range(0.001..0.05);
                        blk[..4].copy_from_slice(&d.to_le_bytes());
                    }
                    for m in 0..16 {
                        let v = [i16::MIN, i16::MAX, self.rng.gen()][self.rng.gen_range(0..3)];
                        blk[260 + 2 * m..262 + 2 * m].copy_from_slice(&v.to_le_bytes());
                    }
                }
            }
            _ => {
                let mut x = vec![0f32; 256 * nb];
                self.activations(256 * nb, &mut x);
                // SAFETY: `x` holds `nb` blocks of floats and `out` room for `nb` q8_K blocks.
                unsafe {
                    quantize(
                        x.as_ptr(),
                        out.as_mut_ptr() as *mut std::ffi::c_void,
                        (256 * nb) as i64,
                    )
                };
            }
        }
    }

    /// q8_0 activation bytes for `nb8` blocks: random, saturated at −128/127, or a constant byte.
    pub fn q8_0_row(&mut self, nb8: usize, out: &mut [u8]) {
        let style = self.rng.gen_range(0..6);
        let fill: i8 = self.rng.gen();
        for b in 0..nb8 {
            let blk = &mut out[b * Q8_0_BYTES..(b + 1) * Q8_0_BYTES];
            let d = self.realistic_act_scale();
            let d = self.f16_scale(d);
            blk[..2].copy_from_slice(&d.to_le_bytes());
            for q in blk[2..].iter_mut() {
                let v: i8 = match style {
                    0 => -128,
                    1 => {
                        if self.rng.gen() {
                            -128
                        } else {
                            127
                        }
                    }
                    2 => fill,
                    _ => self.rng.gen(),
                };
                *q = v as u8;
            }
        }
    }

    /// Floats for `quantize_row_q8_0`: realistic activations at many magnitudes, exact ties, and the edges
    /// (zeros, −0, subnormals, huge values, ±Inf, NaN).
    pub fn activations(&mut self, k: usize, out: &mut [f32]) {
        let style = self.rng.gen_range(0..8);
        let scale = 10f32.powi(self.rng.gen_range(-30..30));
        for (j, v) in out[..k].iter_mut().enumerate() {
            *v = match style {
                0 => {
                    // max 127 → id = 1 in both builds, so k + 0.5 values are exact ties
                    if j % QK8_0 == 0 {
                        127.0
                    } else {
                        self.rng.gen_range(-127i32..127) as f32 + 0.5
                    }
                }
                1 => 0.0,
                2 => f32::from_bits(self.rng.gen()),
                3 => {
                    let specials = [
                        0.0,
                        -0.0,
                        f32::INFINITY,
                        f32::NEG_INFINITY,
                        f32::NAN,
                        1e-40,
                        -1e-45,
                        3.0e38,
                        -3.4e38,
                        1.0,
                    ];
                    if self.rng.gen_ratio(1, 4) {
                        specials[self.rng.gen_range(0..specials.len())]
                    } else {
                        self.rng.gen_range(-1.0f32..1.0)
                    }
                }
                4 => self.rng.gen_range(-1.0f32..1.0) * 1e-38,
                _ => {
                    // roughly normal: sum of uniforms
                    let s: f32 = (0..4).map(|_| self.rng.gen_range(-1.0f32..1.0)).sum();
                    s * scale
                }
            };
        }
    }
}

/// Values per row for a case with `nb` Q2_0 blocks.
pub fn q2_0_row_len(nb: usize) -> usize {
    nb * QK2_0
}

/// Sets every sign of an IQ block (the bytes after its f16 scale) to negative: the raw sign bytes of IQ2_S and
/// IQ3_S, the 7-bit sign fields of the others (all ones: `ksigns_iq2xs[127]` is 0xff).
pub fn all_negative(format: usize, blk: &mut [u8]) {
    match format {
        // IQ2_XXS: bits 0..28 of each chunk's second word
        0 => {
            for ib in 0..8 {
                let w = u32::from_le_bytes(blk[8 * ib + 4..8 * ib + 8].try_into().unwrap());
                blk[8 * ib + 4..8 * ib + 8].copy_from_slice(&(w | 0x0fff_ffff).to_le_bytes());
            }
        }
        // IQ2_XS: the top 7 bits of each word
        1 => {
            for g in 0..32 {
                blk[2 * g + 1] |= 0xfe;
            }
        }
        // IQ2_S: qs[32..64]
        2 => blk[32..64].fill(0xff),
        // IQ3_XXS: bits 0..28 of the eight words at qs[64..96]
        3 => {
            for ib in 0..8 {
                let at = 64 + 4 * ib;
                let w = u32::from_le_bytes(blk[at..at + 4].try_into().unwrap());
                blk[at..at + 4].copy_from_slice(&(w | 0x0fff_ffff).to_le_bytes());
            }
        }
        // IQ3_S: signs[32] after qs[64] and qh[8]
        _ => blk[72..104].fill(0xff),
    }
}
