//! The C ABI: ggml's own symbol names and signatures, each a thin line over `interpose` (which serves a call
//! with our kernels, the stock symbol, or both) and the dispatcher.
//!
//! Behaviour at the boundary, identical to a stock release build:
//! - `n` (or `k`) not a multiple of the block size: the tail past the last whole block is ignored; `n ≤ 0`
//!   computes an empty sum (`*s = 0`) or writes nothing.
//! - `nrc` and the strides `bs`, `bx`, `by` are ignored: one value is computed, as release builds do for these
//!   types (debug builds of ggml assert `nrc == 1`).
//! - No panic crosses this boundary: an unexpected one prints a message and aborts the process.

use std::ffi::{c_char, c_int, c_void};

use crate::dispatch::active;
use crate::interpose::{self, VecDotArgs};

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
    let args = VecDotArgs::new(n, s, bs, vx, bx, vy, by, nrc);
    // SAFETY: ggml's contract for this symbol, passed on.
    guard("ggml_vec_dot_q2_0_q8_0", || unsafe {
        interpose::vec_dot_q2_0_q8_0(args)
    })
}

/// Quantizes `k` floats (whole blocks of 32) at `x` into q8_0 blocks at `vy`.
///
/// # Safety
/// As ggml's: `x` holds `k` floats, `vy` has room for `k/32` blocks.
#[no_mangle]
pub unsafe extern "C" fn quantize_row_q8_0(x: *const f32, vy: *mut c_void, k: i64) {
    // SAFETY: ggml's contract for this symbol, passed on.
    guard("quantize_row_q8_0", || unsafe {
        interpose::quantize_row_q8_0(x, vy, k)
    })
}

/// Dequantizes `k` weights (whole blocks of 64) of a Q2_0 row.
///
/// # Safety
/// As ggml's: `vx` holds `k/64` blocks, `y` has room for `k` floats.
#[no_mangle]
pub unsafe extern "C" fn dequantize_row_q2_0(vx: *const c_void, y: *mut f32, k: i64) {
    // SAFETY: ggml's contract for this symbol, passed on.
    guard("dequantize_row_q2_0", || unsafe {
        interpose::dequantize_row_q2_0(vx, y, k)
    })
}

/// PrismML fork: `*s = Σ` of one PQ2_0 row (`vx`, `n/128` blocks) against one q8_0 row (`vy`, `n/32` blocks).
///
/// # Safety
/// As the fork's: `vx` and `vy` hold `n/128` and `4·(n/128)` blocks, `s` is writable.
#[no_mangle]
pub unsafe extern "C" fn ggml_vec_dot_pq2_0_q8_0(
    n: c_int,
    s: *mut f32,
    bs: usize,
    vx: *const c_void,
    bx: usize,
    vy: *const c_void,
    by: usize,
    nrc: c_int,
) {
    let args = VecDotArgs::new(n, s, bs, vx, bx, vy, by, nrc);
    // SAFETY: the fork's contract for this symbol, passed on.
    guard("ggml_vec_dot_pq2_0_q8_0", || unsafe {
        interpose::vec_dot_pq2_0_q8_0(args)
    })
}

/// PrismML fork: dequantizes `k` weights (whole blocks of 128) of a PQ2_0 row.
///
/// # Safety
/// As the fork's: `vx` holds `k/128` blocks, `y` has room for `k` floats.
#[no_mangle]
pub unsafe extern "C" fn dequantize_row_pq2_0(vx: *const c_void, y: *mut f32, k: i64) {
    // SAFETY: the fork's contract for this symbol, passed on.
    guard("dequantize_row_pq2_0", || unsafe {
        interpose::dequantize_row_pq2_0(vx, y, k)
    })
}

/// PrismML fork: `*s = Σ` of one PTQ1_0 row (`vx`, `n/128` blocks) against one q8_0 row (`vy`, `n/32` blocks).
///
/// # Safety
/// As the fork's: `vx` and `vy` hold `n/128` and `4·(n/128)` blocks, `s` is writable.
#[no_mangle]
pub unsafe extern "C" fn ggml_vec_dot_ptq1_0_q8_0(
    n: c_int,
    s: *mut f32,
    bs: usize,
    vx: *const c_void,
    bx: usize,
    vy: *const c_void,
    by: usize,
    nrc: c_int,
) {
    let args = VecDotArgs::new(n, s, bs, vx, bx, vy, by, nrc);
    // SAFETY: the fork's contract for this symbol, passed on.
    guard("ggml_vec_dot_ptq1_0_q8_0", || unsafe {
        interpose::vec_dot_ptq1_0_q8_0(args)
    })
}

/// PrismML fork: dequantizes `k` weights (whole blocks of 128) of a PTQ1_0 row.
///
/// # Safety
/// As the fork's: `vx` holds `k/128` blocks, `y` has room for `k` floats.
#[no_mangle]
pub unsafe extern "C" fn dequantize_row_ptq1_0(vx: *const c_void, y: *mut f32, k: i64) {
    // SAFETY: the fork's contract for this symbol, passed on.
    guard("dequantize_row_ptq1_0", || unsafe {
        interpose::dequantize_row_ptq1_0(vx, y, k)
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
