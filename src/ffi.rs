//! The C ABI: ggml's own symbol names and signatures, each a thin line over `interpose` (which serves a call
//! with our kernels, the stock symbol, or both) and the dispatcher.
//!
//! Behaviour at the boundary, identical to a stock release build:
//! - `n` (or `k`) not a multiple of the block size: the tail past the last whole block is ignored; `n ≤ 0`
//!   computes an empty sum (`*s = 0`) or writes nothing.
//! - `nrc` and the strides `bs`, `bx`, `by` are ignored: one value is computed, as release builds do for these
//!   types (debug builds of ggml assert `nrc == 1`).
//! - No panic crosses this boundary: an unexpected one prints a message and aborts the process (through `guard`,
//!   or, on a vec_dot symbol's direct path, through Rust's abort at the `extern "C"` boundary).

use std::ffi::{c_char, c_int, c_void};

use crate::formats::iq2_s::BlockIQ2S;
use crate::formats::iq2_xs::BlockIQ2XS;
use crate::formats::iq2_xxs::BlockIQ2XXS;
use crate::formats::iq3_s::BlockIQ3S;
use crate::formats::iq3_xxs::BlockIQ3XXS;
use crate::interpose::active;
use crate::interpose::{self, VecDotArgs};
use crate::process::guard;

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
    unsafe { interpose::vec_dot(&interpose::VEC_DOT_Q2_0, args) }
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

/// `*s = Σ` of one Q1_0 row (`vx`, `n/128` blocks) against one q8_0 row (`vy`, `n/32` blocks).
///
/// # Safety
/// As ggml's: `vx` and `vy` hold `n/128` and `4·(n/128)` blocks, `s` is writable.
#[no_mangle]
pub unsafe extern "C" fn ggml_vec_dot_q1_0_q8_0(
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
    unsafe { interpose::vec_dot(&interpose::VEC_DOT_Q1_0, args) }
}

/// Dequantizes `k` weights (whole blocks of 128) of a Q1_0 row.
///
/// # Safety
/// As ggml's: `vx` holds `k/128` blocks, `y` has room for `k` floats.
#[no_mangle]
pub unsafe extern "C" fn dequantize_row_q1_0(vx: *const c_void, y: *mut f32, k: i64) {
    // SAFETY: ggml's contract for this symbol, passed on.
    guard("dequantize_row_q1_0", || unsafe {
        interpose::dequantize_row_q1_0(vx, y, k)
    })
}

/// `*s = Σ` of one TQ2_0 row (`vx`, `n/256` blocks) against one q8_K row (`vy`, `n/256` blocks).
///
/// # Safety
/// As ggml's: `vx` and `vy` hold `n/256` blocks each, `s` is writable.
#[no_mangle]
pub unsafe extern "C" fn ggml_vec_dot_tq2_0_q8_K(
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
    unsafe { interpose::vec_dot(&interpose::VEC_DOT_TQ2_0, args) }
}

/// `*s = Σ` of one TQ1_0 row (`vx`, `n/256` blocks) against one q8_K row (`vy`, `n/256` blocks).
///
/// # Safety
/// As ggml's: `vx` and `vy` hold `n/256` blocks each, `s` is writable.
#[no_mangle]
pub unsafe extern "C" fn ggml_vec_dot_tq1_0_q8_K(
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
    unsafe { interpose::vec_dot(&interpose::VEC_DOT_TQ1_0, args) }
}

/// Dequantizes `k` weights (whole blocks of 256) of a TQ1_0 row.
///
/// # Safety
/// As ggml's: `vx` holds `k/256` blocks, `y` has room for `k` floats.
#[no_mangle]
pub unsafe extern "C" fn dequantize_row_tq1_0(vx: *const c_void, y: *mut f32, k: i64) {
    // SAFETY: ggml's contract for this symbol, passed on.
    guard("dequantize_row_tq1_0", || unsafe {
        interpose::dequantize_row_tq1_0(vx, y, k)
    })
}

/// Dequantizes `k` weights (whole blocks of 256) of a TQ2_0 row.
///
/// # Safety
/// As ggml's: `vx` holds `k/256` blocks, `y` has room for `k` floats.
#[no_mangle]
pub unsafe extern "C" fn dequantize_row_tq2_0(vx: *const c_void, y: *mut f32, k: i64) {
    // SAFETY: ggml's contract for this symbol, passed on.
    guard("dequantize_row_tq2_0", || unsafe {
        interpose::dequantize_row_tq2_0(vx, y, k)
    })
}

/// Quantizes `k` floats (whole blocks of 256; a tail is ignored) into q8_K blocks (`vy`), as ggml's
/// `quantize_row_q8_K`.
///
/// # Safety
/// As ggml's: `x` holds `k` floats, `vy` has room for `k/256` blocks.
#[no_mangle]
pub unsafe extern "C" fn quantize_row_q8_K(x: *const f32, vy: *mut c_void, k: i64) {
    // SAFETY: ggml's contract for this symbol, passed on.
    guard("quantize_row_q8_K", || unsafe {
        interpose::quantize_row_q8_k(x, vy, k)
    })
}

/// `*s = Σ` of one IQ2_XXS row (`vx`, `n/256` blocks) against one q8_K row (`vy`, `n/256` blocks).
///
/// # Safety
/// As ggml's: `vx` and `vy` hold `n/256` blocks each, `s` is writable.
#[no_mangle]
pub unsafe extern "C" fn ggml_vec_dot_iq2_xxs_q8_K(
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
    unsafe { interpose::vec_dot(&interpose::VEC_DOT_IQ2_XXS, args) }
}

/// Dequantizes `k` weights (whole blocks of 256) of an IQ2_XXS row.
///
/// # Safety
/// As ggml's: `vx` holds `k/256` blocks, `y` has room for `k` floats.
#[no_mangle]
pub unsafe extern "C" fn dequantize_row_iq2_xxs(vx: *const c_void, y: *mut f32, k: i64) {
    // SAFETY: ggml's contract for this symbol, passed on.
    guard("dequantize_row_iq2_xxs", || unsafe {
        interpose::dequantize_row_iq::<BlockIQ2XXS>(vx, y, k)
    })
}

/// `*s = Σ` of one IQ2_XS row (`vx`, `n/256` blocks) against one q8_K row (`vy`, `n/256` blocks).
///
/// # Safety
/// As ggml's: `vx` and `vy` hold `n/256` blocks each, `s` is writable.
#[no_mangle]
pub unsafe extern "C" fn ggml_vec_dot_iq2_xs_q8_K(
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
    unsafe { interpose::vec_dot(&interpose::VEC_DOT_IQ2_XS, args) }
}

/// Dequantizes `k` weights (whole blocks of 256) of an IQ2_XS row.
///
/// # Safety
/// As ggml's: `vx` holds `k/256` blocks, `y` has room for `k` floats.
#[no_mangle]
pub unsafe extern "C" fn dequantize_row_iq2_xs(vx: *const c_void, y: *mut f32, k: i64) {
    // SAFETY: ggml's contract for this symbol, passed on.
    guard("dequantize_row_iq2_xs", || unsafe {
        interpose::dequantize_row_iq::<BlockIQ2XS>(vx, y, k)
    })
}

/// `*s = Σ` of one IQ2_S row (`vx`, `n/256` blocks) against one q8_K row (`vy`, `n/256` blocks).
///
/// # Safety
/// As ggml's: `vx` and `vy` hold `n/256` blocks each, `s` is writable.
#[no_mangle]
pub unsafe extern "C" fn ggml_vec_dot_iq2_s_q8_K(
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
    unsafe { interpose::vec_dot(&interpose::VEC_DOT_IQ2_S, args) }
}

/// Dequantizes `k` weights (whole blocks of 256) of an IQ2_S row.
///
/// # Safety
/// As ggml's: `vx` holds `k/256` blocks, `y` has room for `k` floats.
#[no_mangle]
pub unsafe extern "C" fn dequantize_row_iq2_s(vx: *const c_void, y: *mut f32, k: i64) {
    // SAFETY: ggml's contract for this symbol, passed on.
    guard("dequantize_row_iq2_s", || unsafe {
        interpose::dequantize_row_iq::<BlockIQ2S>(vx, y, k)
    })
}

/// `*s = Σ` of one IQ3_XXS row (`vx`, `n/256` blocks) against one q8_K row (`vy`, `n/256` blocks).
///
/// # Safety
/// As ggml's: `vx` and `vy` hold `n/256` blocks each, `s` is writable.
#[no_mangle]
pub unsafe extern "C" fn ggml_vec_dot_iq3_xxs_q8_K(
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
    unsafe { interpose::vec_dot(&interpose::VEC_DOT_IQ3_XXS, args) }
}

/// Dequantizes `k` weights (whole blocks of 256) of an IQ3_XXS row.
///
/// # Safety
/// As ggml's: `vx` holds `k/256` blocks, `y` has room for `k` floats.
#[no_mangle]
pub unsafe extern "C" fn dequantize_row_iq3_xxs(vx: *const c_void, y: *mut f32, k: i64) {
    // SAFETY: ggml's contract for this symbol, passed on.
    guard("dequantize_row_iq3_xxs", || unsafe {
        interpose::dequantize_row_iq::<BlockIQ3XXS>(vx, y, k)
    })
}

/// `*s = Σ` of one IQ3_S row (`vx`, `n/256` blocks) against one q8_K row (`vy`, `n/256` blocks).
///
/// # Safety
/// As ggml's: `vx` and `vy` hold `n/256` blocks each, `s` is writable.
#[no_mangle]
pub unsafe extern "C" fn ggml_vec_dot_iq3_s_q8_K(
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
    unsafe { interpose::vec_dot(&interpose::VEC_DOT_IQ3_S, args) }
}

/// Dequantizes `k` weights (whole blocks of 256) of an IQ3_S row.
///
/// # Safety
/// As ggml's: `vx` holds `k/256` blocks, `y` has room for `k` floats.
#[no_mangle]
pub unsafe extern "C" fn dequantize_row_iq3_s(vx: *const c_void, y: *mut f32, k: i64) {
    // SAFETY: ggml's contract for this symbol, passed on.
    guard("dequantize_row_iq3_s", || unsafe {
        interpose::dequantize_row_iq::<BlockIQ3S>(vx, y, k)
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
    unsafe { interpose::vec_dot(&interpose::VEC_DOT_PQ2_0, args) }
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
    unsafe { interpose::vec_dot(&interpose::VEC_DOT_PTQ1_0, args) }
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

/// Whole products: `s[c·bs + r] = Σ` of Q2_0 row `r` (at `vx + r·bx`, `n/64` blocks) against q8_0 column `c`
/// (at `vy + c·by`, `n/32` blocks), for `r < nrows`, `c < ncols`, every element with the bits of
/// `ggml_vec_dot_q2_0_q8_0` on that pair (same float order, chosen the same way). Strides as ggml's: `bs` in
/// floats, `bx` and `by` in bytes. Always our kernels (there is no stock symbol to pass to).
///
/// `n` not a multiple of 64 ignores the tail, `n ≤ 0` writes zeros, `nrows` or `ncols ≤ 0` writes nothing.
/// A stride that is not a whole number of blocks, or shorter than a row (`bs < nrows` with several columns),
/// aborts with a message.
///
/// # Safety
/// Rows, columns and the output hold what the arguments describe.
#[no_mangle]
pub unsafe extern "C" fn ggml_lowbit_mul_mat_q2_0_q8_0(
    n: c_int,
    s: *mut f32,
    bs: usize,
    vx: *const c_void,
    bx: usize,
    vy: *const c_void,
    by: usize,
    nrows: c_int,
    ncols: c_int,
) {
    let args = interpose::MulMatArgs::new(n, s, bs, vx, bx, vy, by, nrows, ncols);
    // SAFETY: the contract above, passed on.
    guard("ggml_lowbit_mul_mat_q2_0_q8_0", || unsafe {
        interpose::mul_mat_q2_0_q8_0(args)
    })
}

/// Whole Q1_0 products: as `ggml_lowbit_mul_mat_q2_0_q8_0` with Q1_0 rows (`n/128` blocks of 18 bytes) and the
/// bits of `ggml_vec_dot_q1_0_q8_0` on every pair. `n` not a multiple of 128 ignores the tail; the other edge
/// cases are as there.
///
/// # Safety
/// Rows, columns and the output hold what the arguments describe.
#[no_mangle]
pub unsafe extern "C" fn ggml_lowbit_mul_mat_q1_0_q8_0(
    n: c_int,
    s: *mut f32,
    bs: usize,
    vx: *const c_void,
    bx: usize,
    vy: *const c_void,
    by: usize,
    nrows: c_int,
    ncols: c_int,
) {
    let args = interpose::MulMatArgs::new(n, s, bs, vx, bx, vy, by, nrows, ncols);
    // SAFETY: the contract above, passed on.
    guard("ggml_lowbit_mul_mat_q1_0_q8_0", || unsafe {
        interpose::mul_mat_q1_0_q8_0(args)
    })
}

/// Whole TQ2_0 products: as `ggml_lowbit_mul_mat_q2_0_q8_0` with TQ2_0 rows (`n/256` blocks of 66 bytes) against
/// q8_K columns (`n/256` blocks of 292 bytes: `by` a multiple of 292) and the bits of `ggml_vec_dot_tq2_0_q8_K`
/// on every pair, in the float order the library matches. `n` not a multiple of 256 ignores the tail; the other
/// edge cases are as there.
///
/// # Safety
/// Rows, columns and the output hold what the arguments describe.
#[no_mangle]
pub unsafe extern "C" fn ggml_lowbit_mul_mat_tq2_0_q8_K(
    n: c_int,
    s: *mut f32,
    bs: usize,
    vx: *const c_void,
    bx: usize,
    vy: *const c_void,
    by: usize,
    nrows: c_int,
    ncols: c_int,
) {
    let args = interpose::MulMatArgs::new(n, s, bs, vx, bx, vy, by, nrows, ncols);
    // SAFETY: the contract above, passed on.
    guard("ggml_lowbit_mul_mat_tq2_0_q8_K", || unsafe {
        interpose::mul_mat_tq2_0_q8_k(args)
    })
}

/// Whole TQ1_0 products: as `ggml_lowbit_mul_mat_tq2_0_q8_K` with TQ1_0 rows (`n/256` blocks of 54 bytes) and
/// the bits of `ggml_vec_dot_tq1_0_q8_K` on every pair.
///
/// # Safety
/// Rows, columns and the output hold what the arguments describe.
#[no_mangle]
pub unsafe extern "C" fn ggml_lowbit_mul_mat_tq1_0_q8_K(
    n: c_int,
    s: *mut f32,
    bs: usize,
    vx: *const c_void,
    bx: usize,
    vy: *const c_void,
    by: usize,
    nrows: c_int,
    ncols: c_int,
) {
    let args = interpose::MulMatArgs::new(n, s, bs, vx, bx, vy, by, nrows, ncols);
    // SAFETY: the contract above, passed on.
    guard("ggml_lowbit_mul_mat_tq1_0_q8_K", || unsafe {
        interpose::mul_mat_tq1_0_q8_k(args)
    })
}

/// Whole PQ2_0 products (PrismML fork): as `ggml_lowbit_mul_mat_q2_0_q8_0` with PQ2_0 rows (`n/128` blocks of
/// 34 bytes) and the bits of the library's `ggml_vec_dot_pq2_0_q8_0` on every pair, in the float order it serves.
/// `n` not a multiple of 128 ignores the tail; the other edge cases are as there.
///
/// # Safety
/// Rows, columns and the output hold what the arguments describe.
#[no_mangle]
pub unsafe extern "C" fn ggml_lowbit_mul_mat_pq2_0_q8_0(
    n: c_int,
    s: *mut f32,
    bs: usize,
    vx: *const c_void,
    bx: usize,
    vy: *const c_void,
    by: usize,
    nrows: c_int,
    ncols: c_int,
) {
    let args = interpose::MulMatArgs::new(n, s, bs, vx, bx, vy, by, nrows, ncols);
    // SAFETY: the contract above, passed on.
    guard("ggml_lowbit_mul_mat_pq2_0_q8_0", || unsafe {
        interpose::mul_mat_pq2_0_q8_0(args)
    })
}

/// Whole PTQ1_0 products (PrismML fork): as `ggml_lowbit_mul_mat_q2_0_q8_0` with PTQ1_0 rows (`n/128` blocks of
/// 28 bytes) and the bits of the library's `ggml_vec_dot_ptq1_0_q8_0` on every pair, in the float order it serves.
/// `n` not a multiple of 128 ignores the tail; the other edge cases are as there.
///
/// # Safety
/// Rows, columns and the output hold what the arguments describe.
#[no_mangle]
pub unsafe extern "C" fn ggml_lowbit_mul_mat_ptq1_0_q8_0(
    n: c_int,
    s: *mut f32,
    bs: usize,
    vx: *const c_void,
    bx: usize,
    vy: *const c_void,
    by: usize,
    nrows: c_int,
    ncols: c_int,
) {
    let args = interpose::MulMatArgs::new(n, s, bs, vx, bx, vy, by, nrows, ncols);
    // SAFETY: the contract above, passed on.
    guard("ggml_lowbit_mul_mat_ptq1_0_q8_0", || unsafe {
        interpose::mul_mat_ptq1_0_q8_0(args)
    })
}

/// The patched ggml-cpu's entry at the start of every MUL_MAT (`ggml-patch/cpu.patch`): computes whole Q2_0
/// products like the preloaded hook below and returns `true`, or returns `false` and leaves the op to ggml.
///
/// # Safety
/// ggml's contract: `params` is ggml-cpu's `struct ggml_compute_params`, `dst` a MUL_MAT tensor.
#[no_mangle]
pub unsafe extern "C" fn ggml_lowbit_compute_forward_mul_mat(
    params: *const c_void,
    dst: *mut c_void,
) -> bool {
    // SAFETY: ggml's contract, passed on.
    guard("ggml_lowbit_compute_forward_mul_mat", || unsafe {
        crate::hook::compute_forward_mul_mat(params as *const _, dst as *mut _)
    })
}

/// `ggml_vec_dot_q2_0_q8_0` under a name of our own, for a ggml linked against the library (`ggml-patch/`),
/// where ggml-cpu's own definition of the ggml name would win.
///
/// # Safety
/// As `ggml_vec_dot_q2_0_q8_0`.
#[no_mangle]
pub unsafe extern "C" fn ggml_lowbit_vec_dot_q2_0_q8_0(
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
    unsafe { interpose::vec_dot(&interpose::VEC_DOT_Q2_0, args) }
}

/// `ggml_vec_dot_q1_0_q8_0` under a name of our own (see `ggml_lowbit_vec_dot_q2_0_q8_0`).
///
/// # Safety
/// As `ggml_vec_dot_q1_0_q8_0`.
#[no_mangle]
pub unsafe extern "C" fn ggml_lowbit_vec_dot_q1_0_q8_0(
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
    unsafe { interpose::vec_dot(&interpose::VEC_DOT_Q1_0, args) }
}

/// `ggml_vec_dot_pq2_0_q8_0` under a name of our own (see `ggml_lowbit_vec_dot_q2_0_q8_0`), for the stand-in
/// fork linked against the library (`ggml-patch/fork-types.patch` with `cpu.patch`).
///
/// # Safety
/// As `ggml_vec_dot_pq2_0_q8_0`.
#[no_mangle]
pub unsafe extern "C" fn ggml_lowbit_vec_dot_pq2_0_q8_0(
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
    unsafe { interpose::vec_dot(&interpose::VEC_DOT_PQ2_0, args) }
}

/// `ggml_vec_dot_ptq1_0_q8_0` under a name of our own (see `ggml_lowbit_vec_dot_q2_0_q8_0`), for the stand-in
/// fork linked against the library (`ggml-patch/fork-types.patch` with `cpu.patch`).
///
/// # Safety
/// As `ggml_vec_dot_ptq1_0_q8_0`.
#[no_mangle]
pub unsafe extern "C" fn ggml_lowbit_vec_dot_ptq1_0_q8_0(
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
    unsafe { interpose::vec_dot(&interpose::VEC_DOT_PTQ1_0, args) }
}

/// `quantize_row_q8_0` under a name of our own (see `ggml_lowbit_vec_dot_q2_0_q8_0`).
///
/// # Safety
/// As `quantize_row_q8_0`.
#[no_mangle]
pub unsafe extern "C" fn ggml_lowbit_quantize_row_q8_0(x: *const f32, vy: *mut c_void, k: i64) {
    // SAFETY: ggml's contract for this symbol, passed on.
    guard("ggml_lowbit_quantize_row_q8_0", || unsafe {
        interpose::quantize_row_q8_0(x, vy, k)
    })
}

/// `ggml_vec_dot_iq2_xxs_q8_K` under a name of our own (see `ggml_lowbit_vec_dot_q2_0_q8_0`).
///
/// # Safety
/// As `ggml_vec_dot_iq2_xxs_q8_K`.
#[no_mangle]
pub unsafe extern "C" fn ggml_lowbit_vec_dot_iq2_xxs_q8_K(
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
    unsafe { interpose::vec_dot(&interpose::VEC_DOT_IQ2_XXS, args) }
}

/// `ggml_vec_dot_iq2_xs_q8_K` under a name of our own (see `ggml_lowbit_vec_dot_q2_0_q8_0`).
///
/// # Safety
/// As `ggml_vec_dot_iq2_xs_q8_K`.
#[no_mangle]
pub unsafe extern "C" fn ggml_lowbit_vec_dot_iq2_xs_q8_K(
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
    unsafe { interpose::vec_dot(&interpose::VEC_DOT_IQ2_XS, args) }
}

/// `ggml_vec_dot_iq2_s_q8_K` under a name of our own (see `ggml_lowbit_vec_dot_q2_0_q8_0`).
///
/// # Safety
/// As `ggml_vec_dot_iq2_s_q8_K`.
#[no_mangle]
pub unsafe extern "C" fn ggml_lowbit_vec_dot_iq2_s_q8_K(
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
    unsafe { interpose::vec_dot(&interpose::VEC_DOT_IQ2_S, args) }
}

/// `ggml_vec_dot_iq3_xxs_q8_K` under a name of our own (see `ggml_lowbit_vec_dot_q2_0_q8_0`).
///
/// # Safety
/// As `ggml_vec_dot_iq3_xxs_q8_K`.
#[no_mangle]
pub unsafe extern "C" fn ggml_lowbit_vec_dot_iq3_xxs_q8_K(
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
    unsafe { interpose::vec_dot(&interpose::VEC_DOT_IQ3_XXS, args) }
}

/// `ggml_vec_dot_iq3_s_q8_K` under a name of our own (see `ggml_lowbit_vec_dot_q2_0_q8_0`).
///
/// # Safety
/// As `ggml_vec_dot_iq3_s_q8_K`.
#[no_mangle]
pub unsafe extern "C" fn ggml_lowbit_vec_dot_iq3_s_q8_K(
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
    unsafe { interpose::vec_dot(&interpose::VEC_DOT_IQ3_S, args) }
}

/// `ggml_vec_dot_tq1_0_q8_K` under a name of our own (see `ggml_lowbit_vec_dot_q2_0_q8_0`).
///
/// # Safety
/// As `ggml_vec_dot_tq1_0_q8_K`.
#[no_mangle]
pub unsafe extern "C" fn ggml_lowbit_vec_dot_tq1_0_q8_K(
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
    unsafe { interpose::vec_dot(&interpose::VEC_DOT_TQ1_0, args) }
}

/// `quantize_row_q8_K` under a name of our own (see `ggml_lowbit_vec_dot_q2_0_q8_0`).
///
/// # Safety
/// As `quantize_row_q8_K`.
#[no_mangle]
pub unsafe extern "C" fn ggml_lowbit_quantize_row_q8_K(x: *const f32, vy: *mut c_void, k: i64) {
    // SAFETY: ggml's contract for this symbol, passed on.
    guard("ggml_lowbit_quantize_row_q8_K", || unsafe {
        interpose::quantize_row_q8_k(x, vy, k)
    })
}

/// ggml-cpu's hook before every node (`hook.rs`): takes over whole products of our formats with the tile
/// kernels when preloaded over a ggml whose layout it recognises, and passes every other node to the real
/// function. Not for direct calls.
///
/// # Safety
/// ggml's contract: `params` is ggml-cpu's `struct ggml_compute_params`, `node` a node of the graph it computes.
#[no_mangle]
pub unsafe extern "C" fn ggml_cpu_extra_compute_forward(
    params: *const c_void,
    node: *mut c_void,
) -> bool {
    // SAFETY: ggml's contract, passed on.
    guard("ggml_cpu_extra_compute_forward", || unsafe {
        crate::hook::extra_compute_forward(params as *const _, node as *mut _)
    })
}

/// ggml-cpu's per-expert hook inside every MUL_MAT_ID (`hook.rs`): takes over Q2_0 expert products with the tile
/// kernels when preloaded over a ggml it knows, and passes everything else to the real function. Not for direct
/// calls.
///
/// # Safety
/// ggml's contract: `params` is ggml-cpu's `struct ggml_compute_params`, `dst` a MUL_MAT_ID tensor whose src1
/// is quantized in `params->wdata`, `expert_rows` the expert's `cne1` (slot, token) pairs.
#[no_mangle]
pub unsafe extern "C" fn ggml_compute_forward_mul_mat_id_tiled(
    params: *const c_void,
    dst: *mut c_void,
    cur_a: i64,
    cne1: i64,
    expert_rows: *const i32,
    scratch: *mut c_char,
) -> bool {
    // SAFETY: ggml's contract, passed on.
    guard("ggml_compute_forward_mul_mat_id_tiled", || unsafe {
        crate::hook::mul_mat_id_tiled(
            params as *const _,
            dst as *mut _,
            cur_a,
            cne1,
            expert_rows,
            scratch,
        )
    })
}

/// The patched ggml-cpu's per-expert entry inside every MUL_MAT_ID (`ggml-patch/cpu.patch`): computes the
/// expert's Q2_0 product like the preloaded hook above and returns `true`, or returns `false`.
///
/// # Safety
/// As `ggml_compute_forward_mul_mat_id_tiled`.
#[no_mangle]
pub unsafe extern "C" fn ggml_lowbit_compute_forward_mul_mat_id(
    params: *const c_void,
    dst: *mut c_void,
    cur_a: i64,
    cne1: i64,
    expert_rows: *const i32,
) -> bool {
    // SAFETY: ggml's contract, passed on.
    guard("ggml_lowbit_compute_forward_mul_mat_id", || unsafe {
        crate::hook::compute_forward_mul_mat_id(
            params as *const _,
            dst as *mut _,
            cur_a,
            cne1,
            expert_rows,
        )
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

/// The kernel forms the library runs (`dispatch::FORMS_BY_CPU` with `GGML_LOWBIT_FORMS` applied), in words: a
/// static NUL-terminated string, `"none"` below AVX-512.
#[no_mangle]
pub extern "C" fn ggml_lowbit_kernel_forms() -> *const c_char {
    guard("ggml_lowbit_kernel_forms", || {
        crate::interpose::active_forms().as_ptr()
    })
}

/// A hash of the sources the library was built from: lets a harness or test refuse a stale build.
#[no_mangle]
pub extern "C" fn ggml_lowbit_source_hash() -> *const c_char {
    concat!(env!("GGML_LOWBIT_SOURCE_HASH"), "\0").as_ptr() as *const c_char
}
