//! The C ABI: ggml's own symbol names and signatures, each a thin line over the dispatcher.
//!
//! Behaviour at the boundary, identical to a stock release build:
//! - `n` (or `k`) not a multiple of the block size: the tail past the last whole block is ignored; `n ≤ 0`
//!   computes an empty sum (`*s = 0`) or writes nothing.
//! - `nrc` and the strides `bs`, `bx`, `by` are ignored: one value is computed, as release builds do for these
//!   types (debug builds of ggml assert `nrc == 1`).
//! - No panic crosses this boundary: an unexpected one prints a message and aborts the process.

use std::ffi::{c_char, c_int, c_void};

use crate::dispatch::active;
use crate::formats::q2_0::QK2_0;
use crate::formats::q8_0::QK8_0;

/// Prints `ggml-lowbit: <message>` on stderr and aborts: for errors that must not go on silently.
pub fn fatal(message: &str) -> ! {
    eprintln!("ggml-lowbit: {message}");
    std::process::abort()
}

/// Runs `f`, turning a panic into `fatal` so that no unwinding reaches C.
#[inline(always)]
fn guard<R>(symbol: &str, f: impl FnOnce() -> R) -> R {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => fatal(&format!("internal error in {symbol}; aborting")),
    }
}

/// Whole blocks in `n` values, as C's `n / qk` for `n ≥ 0` (and none for a negative `n`).
#[inline(always)]
fn whole_blocks(n: i64, qk: usize) -> usize {
    if n > 0 {
        // ggml keeps the block count in an `int`.
        (n / qk as i64).min(c_int::MAX as i64) as usize
    } else {
        0
    }
}

/// # Safety
/// `len` elements of `T` must be readable at `p` (which may be null when `len == 0`).
#[inline(always)]
unsafe fn slice_in<'a, T>(p: *const c_void, len: usize) -> &'a [T] {
    if len == 0 {
        &[]
    } else {
        // SAFETY: the caller guarantees `len` readable elements; `T` has alignment 1 for every block type.
        unsafe { std::slice::from_raw_parts(p as *const T, len) }
    }
}

/// # Safety
/// `len` elements of `T` must be writable at `p` (which may be null when `len == 0`).
#[inline(always)]
unsafe fn slice_out<'a, T>(p: *mut c_void, len: usize) -> &'a mut [T] {
    if len == 0 {
        &mut []
    } else {
        // SAFETY: as `slice_in`, for writing; ggml never aliases a kernel's input and output.
        unsafe { std::slice::from_raw_parts_mut(p as *mut T, len) }
    }
}

/// `*s = Σ` of one Q2_0 row (`vx`, `n/64` blocks) against one q8_0 row (`vy`, `n/32` blocks).
///
/// # Safety
/// As ggml's: `vx` and `vy` hold `n/64` and `2·(n/64)` blocks, `s` is writable.
#[no_mangle]
pub unsafe extern "C" fn ggml_vec_dot_q2_0_q8_0(
    n: c_int,
    s: *mut f32,
    bs: usize,
    vx: *const c_void,
    bx: usize,
    vy: *const c_void,
    by: usize,
    nrc: c_int,
) {
    let _ = (bs, bx, by, nrc);
    guard("ggml_vec_dot_q2_0_q8_0", || {
        let nb = whole_blocks(n as i64, QK2_0);
        // SAFETY: ggml's contract for this symbol (see above).
        unsafe { *s = active().vec_dot_q2_0_q8_0(slice_in(vx, nb), slice_in(vy, 2 * nb)) }
    })
}

/// Quantizes `k` floats (whole blocks of 32) at `x` into q8_0 blocks at `vy`.
///
/// # Safety
/// As ggml's: `x` holds `k` floats, `vy` has room for `k/32` blocks.
#[no_mangle]
pub unsafe extern "C" fn quantize_row_q8_0(x: *const f32, vy: *mut c_void, k: i64) {
    guard("quantize_row_q8_0", || {
        let nb = whole_blocks(k, QK8_0);
        // SAFETY: ggml's contract for this symbol.
        unsafe {
            active().quantize_row_q8_0(slice_in(x as *const c_void, nb * QK8_0), slice_out(vy, nb))
        }
    })
}

/// Dequantizes `k` weights (whole blocks of 64) of a Q2_0 row.
///
/// # Safety
/// As ggml's: `vx` holds `k/64` blocks, `y` has room for `k` floats.
#[no_mangle]
pub unsafe extern "C" fn dequantize_row_q2_0(vx: *const c_void, y: *mut f32, k: i64) {
    guard("dequantize_row_q2_0", || {
        let nb = whole_blocks(k, QK2_0);
        // SAFETY: ggml's contract for this symbol.
        unsafe {
            active().dequantize_row_q2_0(slice_in(vx, nb), slice_out(y as *mut c_void, nb * QK2_0))
        }
    })
}

/// The instruction set the library runs on: a static NUL-terminated string (`"scalar"`, `"avx2"`, `"avx512"`).
#[no_mangle]
pub extern "C" fn ggml_lowbit_isa() -> *const c_char {
    guard("ggml_lowbit_isa", || match active().isa {
        crate::dispatch::Isa::Scalar => c"scalar".as_ptr(),
        crate::dispatch::Isa::Avx2 => c"avx2".as_ptr(),
        crate::dispatch::Isa::Avx512 => c"avx512".as_ptr(),
    })
}

/// The stock build whose bits the library reproduces: `"haswell"` or `"x64"`.
#[no_mangle]
pub extern "C" fn ggml_lowbit_float_order() -> *const c_char {
    guard("ggml_lowbit_float_order", || match active().order {
        crate::FloatOrder::Haswell => c"haswell".as_ptr(),
        crate::FloatOrder::X64 => c"x64".as_ptr(),
    })
}

/// A hash of the sources the library was built from: lets a harness or test refuse a stale build.
#[no_mangle]
pub extern "C" fn ggml_lowbit_source_hash() -> *const c_char {
    concat!(env!("GGML_LOWBIT_SOURCE_HASH"), "\0").as_ptr() as *const c_char
}
