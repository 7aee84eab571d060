//! Scalar float operations with the NaN rules of x86's SSE/AVX instructions, for the scalar models of stock
//! SIMD kernels whose NaN results must be reproduced bit for bit.
//!
//! Rust leaves the bits of a NaN result unspecified (and the compiler may swap the operands of `+`), while the
//! hardware is exact about them: when any source operand is a NaN, the result is the first NaN source, made
//! quiet — in operand order for `vaddps dst, src1, src2` and `vmulps`, and for the fused forms in the order of
//! their formula, first multiplicand, second, addend (`vfmadd132ps op1, op2, op3` computes `op1·op3 + op2`, so
//! op1, op3, op2; measured on this CPU by the test below for all three forms) — and when none is but the
//! operation is invalid (∞ − ∞, 0 · ∞), the result is the "default NaN" `0xffc0_0000`. Which operand comes first
//! is a property of the compiled instruction, so a model names the order the stock binary uses, and a helper that
//! meets a NaN runs that instruction on its operands in that order (an emulator's NaN rules may differ from the
//! hardware's, and the stock binary it models runs under the same emulator).

/// The NaN x86 returns for an invalid operation on numbers.
pub(crate) const DEFAULT_NAN: u32 = 0xffc0_0000;
const QUIET_BIT: u32 = 0x0040_0000;

/// `v` made quiet (a signalling NaN gets the quiet bit; anything else is unchanged).
fn quiet(v: f32) -> f32 {
    f32::from_bits(v.to_bits() | QUIET_BIT)
}

/// The NaN an instruction returns when its result is a NaN: the first NaN of `operands`, quiet, or the default
/// NaN when none is (an invalid operation). The rule of x86 hardware, for where the instruction itself cannot
/// run (`fmadd` on a CPU without FMA).
#[inline(always)]
fn nan_result<const N: usize>(operands: [f32; N]) -> f32 {
    let mut nan = f32::from_bits(DEFAULT_NAN);
    for v in operands.into_iter().rev() {
        nan = if v.is_nan() { quiet(v) } else { nan };
    }
    nan
}

// Each helper computes the value with Rust's operator; where that is a NaN (exactly when an operand is one or
// the operation is invalid) it runs the instruction itself on the operands in the model's order, so the NaN is
// the CPU's own: x86's rule above on hardware, and whatever an emulator does instead (QEMU 7.2's default NaN
// is positive), as the stock binary it models would get there. Only NaN inputs take that branch; the values
// stay plain operators, so the models' chains keep their speed inside the kernels.

/// `addss a, b`.
#[inline(always)]
pub fn add(a: f32, b: f32) -> f32 {
    let v = a + b;
    if v.is_nan() {
        instruction_nan(Op::Add, a, b, 0.0)
    } else {
        v
    }
}

/// `mulss a, b`.
#[inline(always)]
pub fn mul(a: f32, b: f32) -> f32 {
    let v = a * b;
    if v.is_nan() {
        instruction_nan(Op::Mul, a, b, 0.0)
    } else {
        v
    }
}

/// `a · b + c`, rounded once, as the fused forms compute it (`vfmadd132ss op1, op2, op3` is
/// `fmadd(op1, op3, op2)`, `vfmadd213ss` is `fmadd(op2, op1, op3)`, `vfmadd231ss` is `fmadd(op2, op3, op1)`).
#[inline(always)]
pub fn fmadd(a: f32, b: f32, c: f32) -> f32 {
    let v = a.mul_add(b, c);
    if v.is_nan() {
        instruction_nan(Op::Fmadd, a, b, c)
    } else {
        v
    }
}

#[derive(Clone, Copy)]
enum Op {
    Add,
    Mul,
    Fmadd,
}

/// The instruction's result on `a`, `b` (and `c`), in that operand order.
#[cold]
#[inline(never)]
fn instruction_nan(op: Op, a: f32, b: f32, c: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::asm;
        use std::arch::x86_64::{_mm_cvtss_f32, _mm_set_ss};
        // SAFETY (each block): SSE is part of x86_64 and FMA is checked before its use; the asm only reads and
        // writes xmm registers. `asm!`, not intrinsics: the compiler may swap the operands of a sum or product.
        unsafe {
            let (mut r, b, c) = (_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c));
            match op {
                Op::Add => asm!("addss {r}, {b}", r = inout(xmm_reg) r, b = in(xmm_reg) b,
                    options(pure, nomem, nostack)),
                Op::Mul => asm!("mulss {r}, {b}", r = inout(xmm_reg) r, b = in(xmm_reg) b,
                    options(pure, nomem, nostack)),
                Op::Fmadd if std::arch::is_x86_feature_detected!("fma") => {
                    // vfmadd231ss c, a, b: a·b + c, with a's NaN first, then b's, then c's.
                    let mut acc = c;
                    asm!("vfmadd231ss {acc}, {a}, {b}", acc = inout(xmm_reg) acc, a = in(xmm_reg) r,
                        b = in(xmm_reg) b, options(pure, nomem, nostack));
                    r = acc;
                }
                Op::Fmadd => return nan_result([a, _mm_cvtss_f32(b), _mm_cvtss_f32(c)]),
            }
            _mm_cvtss_f32(r)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    match op {
        Op::Add | Op::Mul => nan_result([a, b]),
        Op::Fmadd => nan_result([a, b, c]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// These are the hardware's rules: each helper against the instruction it names, run on this CPU, over
    /// NaNs of every kind in every position, infinities, zeros and numbers.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn helpers_give_the_bits_of_the_instructions() {
        use std::arch::x86_64::*;
        let values = [
            1.5f32,
            -0.0,
            0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::from_bits(0x7fc0_1234),
            f32::from_bits(0xffc0_0042),
            f32::from_bits(0x7f80_0001), // signalling
            f32::from_bits(0xff80_7000), // signalling, negative
            3.0e38,
        ];
        for &a in &values {
            for &b in &values {
                // The instructions in `asm!`: the compiler treats the intrinsics' sums and products as
                // commutative and may swap their operands.
                // SAFETY: SSE is part of x86_64; the asm only reads and writes xmm registers.
                let hw = |mul: bool| unsafe {
                    let (mut r, b) = (_mm_set_ss(a), _mm_set_ss(b));
                    if mul {
                        std::arch::asm!("mulss {r}, {b}", r = inout(xmm_reg) r, b = in(xmm_reg) b,
                            options(pure, nomem, nostack));
                    } else {
                        std::arch::asm!("addss {r}, {b}", r = inout(xmm_reg) r, b = in(xmm_reg) b,
                            options(pure, nomem, nostack));
                    }
                    _mm_cvtss_f32(r).to_bits()
                };
                assert_eq!(add(a, b).to_bits(), hw(false), "{a:?} + {b:?}");
                assert_eq!(mul(a, b).to_bits(), hw(true), "{a:?} · {b:?}");
                // The written rule (for FMA without the instruction) is this hardware's too.
                for (form, v) in [("+", hw(false)), ("·", hw(true))] {
                    if f32::from_bits(v).is_nan() {
                        assert_eq!(nan_result([a, b]).to_bits(), v, "rule {a:?} {form} {b:?}");
                    }
                }
                if !std::arch::is_x86_feature_detected!("fma") {
                    continue;
                }
                for &c in &values {
                    // SAFETY: the CPU has FMA (checked above); the asm only reads and writes xmm registers.
                    let hw = |form: usize| unsafe {
                        let (mut r, b, c) = (_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c));
                        match form {
                            132 => {
                                std::arch::asm!("vfmadd132ss {r}, {b}, {c}", r = inout(xmm_reg) r,
                                b = in(xmm_reg) b, c = in(xmm_reg) c, options(pure, nomem, nostack))
                            }
                            213 => {
                                std::arch::asm!("vfmadd213ss {r}, {b}, {c}", r = inout(xmm_reg) r,
                                b = in(xmm_reg) b, c = in(xmm_reg) c, options(pure, nomem, nostack))
                            }
                            _ => std::arch::asm!("vfmadd231ss {r}, {b}, {c}", r = inout(xmm_reg) r,
                                b = in(xmm_reg) b, c = in(xmm_reg) c, options(pure, nomem, nostack)),
                        }
                        _mm_cvtss_f32(r).to_bits()
                    };
                    let what = format!("op1 {a:?}, op2 {b:?}, op3 {c:?}");
                    assert_eq!(fmadd(a, c, b).to_bits(), hw(132), "132: {what}");
                    assert_eq!(fmadd(b, a, c).to_bits(), hw(213), "213: {what}");
                    assert_eq!(fmadd(b, c, a).to_bits(), hw(231), "231: {what}");
                    if f32::from_bits(hw(231)).is_nan() {
                        assert_eq!(nan_result([b, c, a]).to_bits(), hw(231), "rule 231: {what}");
                    }
                }
            }
        }
    }
}
