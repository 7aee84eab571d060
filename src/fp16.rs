//! IEEE half-precision conversions with the exact bits of the stock builds.
//!
//! Widening (f16 → f32) is exact, and the F16C instruction (haswell kernels) and ggml's software routine (x64,
//! ggml-base) agree on every input: a NaN comes out quiet with its payload shifted up.
//!
//! Narrowing (f32 → f16) happens in the q8_0 quantizer of both builds through ggml's software routine (the
//! haswell disassembly shows it, not `vcvtps2ph`): round-to-nearest-even, overflow to ±Inf, and every NaN
//! becomes `sign | 0x7E00`. The haswell build fuses the routine's second scaling multiply into its add; that
//! cannot change a result (the product is exact except below 2^-126, where the added bias of 2.0 swamps it).
//! Our vectorised quantizers narrow with F16C where the input is not NaN (the same bits:
//! `arch::x86::avx2::f32_to_f16_ggml_f16c`) and with the model below where it is.

/// An f16 stored as two little-endian bytes, as ggml's `ggml_half` in a block (alignment 1, so blocks can sit at
/// any address ggml hands us).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GgmlHalf(pub [u8; 2]);

impl GgmlHalf {
    pub const fn from_bits(bits: u16) -> Self {
        GgmlHalf(bits.to_le_bytes())
    }
    pub const fn to_bits(self) -> u16 {
        u16::from_le_bytes(self.0)
    }
    pub fn to_f32(self) -> f32 {
        f16_to_f32(self.to_bits())
    }
}

/// f16 bits → f32, exact; NaN inputs come out quiet with the payload shifted up (what F16C and ggml both do).
pub const fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, _) => {
            // Subnormal half: man · 2^-24, renormalised for f32.
            let shift = man.leading_zeros() - 21; // how far the top set bit is below bit 10
            let m = (man << shift) & 0x3ff;
            let e = 127 - 15 + 1 - shift;
            sign | (e << 23) | (m << 13)
        }
        (0x1f, 0) => sign | 0x7f80_0000,
        (0x1f, _) => sign | 0x7fc0_0000 | (man << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

/// `f16_to_f32` of every half, indexed by its bits (256 KiB, built at compile time). Kernels whose inner loops
/// convert a scale per 32 or 128 weights read it instead of converting: a scalar load and a broadcast from
/// memory are load-port work, where `vpbroadcastw` + `vcvtph2ps` compete with the dot product for the vector
/// ports. A test checks every entry against F16C.
pub static F16_TO_F32_TABLE: [f32; 65536] = {
    let mut t = [0f32; 65536];
    let mut i = 0;
    while i < 65536 {
        t[i] = f16_to_f32(i as u16);
        i += 1;
    }
    t
};

/// Round-to-nearest-even f32 → f16 for every non-NaN input (overflow goes to ±Inf, tiny values to subnormals or
/// ±0). `None` for NaN, whose encoding is build-specific.
fn f32_to_f16_rne_non_nan(f: f32) -> Option<u16> {
    let x = f.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32;
    let man = x & 0x7f_ffff;
    if exp == 0xff {
        return if man == 0 { Some(sign | 0x7c00) } else { None };
    }
    // Unbiased exponent of the half result, before rounding.
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return Some(sign | 0x7c00);
    }
    if e <= 0 {
        // Subnormal (or zero) half: shift the full significand right and round once.
        if e < -10 {
            return Some(sign); // below half the smallest subnormal: rounds to zero
        }
        let full = man | 0x80_0000; // f32 zero/subnormal inputs have exp 0 and land in e < -10 above
        let shift = (14 - e) as u32; // 13 mantissa bits dropped + (1 - e) denormalisation
        let kept = full >> shift;
        let rem = full & ((1 << shift) - 1);
        let half = 1 << (shift - 1);
        let rounded = if rem > half || (rem == half && (kept & 1) == 1) {
            kept + 1
        } else {
            kept
        };
        return Some(sign | rounded as u16);
    }
    let kept = ((e as u32) << 10) | (man >> 13);
    let rem = man & 0x1fff;
    let rounded = if rem > 0x1000 || (rem == 0x1000 && (kept & 1) == 1) {
        kept + 1
    } else {
        kept
    };
    // A carry out of the mantissa bumps the exponent, possibly to Inf: exactly what RNE wants.
    Some(sign | rounded as u16)
}

/// f32 → f16 as ggml's software `ggml_compute_fp32_to_fp16` (the x64 build): NaN becomes `sign | 0x7E00`.
pub fn f32_to_f16_ggml_soft_model(f: f32) -> u16 {
    f32_to_f16_rne_non_nan(f).unwrap_or(((f.to_bits() >> 16) & 0x8000) as u16 | 0x7e00)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table and the conversion give F16C's bits for every half, NaNs included.
    #[test]
    fn table_matches_f16c_on_every_half() {
        #[cfg(target_arch = "x86_64")]
        {
            if !std::arch::is_x86_feature_detected!("f16c") {
                eprintln!("no F16C here: the table is checked against the conversion only");
            } else {
                for h in 0..=u16::MAX {
                    // SAFETY: F16C was detected above.
                    let hw = unsafe {
                        use std::arch::x86_64::*;
                        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
                    };
                    assert_eq!(
                        F16_TO_F32_TABLE[h as usize].to_bits(),
                        hw.to_bits(),
                        "{h:#06x}"
                    );
                }
            }
        }
        for h in 0..=u16::MAX {
            assert_eq!(
                F16_TO_F32_TABLE[h as usize].to_bits(),
                f16_to_f32(h).to_bits()
            );
        }
    }

    #[test]
    fn widening_matches_half_crate_on_every_non_nan_input() {
        for h in 0..=u16::MAX {
            let ours = f16_to_f32(h);
            let theirs = half::f16::from_bits(h).to_f32();
            if theirs.is_nan() {
                assert!(ours.is_nan(), "{h:#06x}");
                assert_eq!(
                    ours.to_bits(),
                    0x7fc0_0000 | (((h & 0x8000) as u32) << 16) | (((h & 0x3ff) as u32) << 13)
                );
            } else {
                assert_eq!(ours.to_bits(), theirs.to_bits(), "{h:#06x}");
            }
        }
    }

    #[test]
    fn narrowing_round_trips_every_half() {
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            if f.is_nan() {
                continue;
            }
            assert_eq!(f32_to_f16_ggml_soft_model(f), h, "{h:#06x}");
        }
    }

    #[test]
    fn narrowing_rounds_to_nearest_even_like_the_half_crate() {
        let mut x: u32 = 0x9e37_79b9;
        for _ in 0..2_000_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            for bits in [x, x & 0x807f_ffff | 0x3800_0000, x & 0x8fff_ffff] {
                let f = f32::from_bits(bits);
                if !f.is_nan() {
                    assert_eq!(
                        f32_to_f16_ggml_soft_model(f),
                        half::f16::from_f32(f).to_bits(),
                        "{bits:#010x}"
                    );
                }
            }
        }
    }

    #[test]
    fn soft_model_nan_is_canonical() {
        assert_eq!(
            f32_to_f16_ggml_soft_model(f32::from_bits(0x7f80_0001)),
            0x7e00
        );
        assert_eq!(
            f32_to_f16_ggml_soft_model(f32::from_bits(0xffc1_2345)),
            0xfe00
        );
    }
}
