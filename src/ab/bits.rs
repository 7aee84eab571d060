//! The bit comparison: our symbols and the stock library's on the same inputs, compared with `to_bits()`.
//!
//! A "subject" is one implementation of the exported symbols: the rlib's kernels at one instruction set, or
//! the built `libggml_lowbit.so` loaded with libloading. Every case runs stock once and every subject on the
//! same inputs. Results must be bit-identical, NaN results included: a NaN whose bits differ from stock's is a
//! mismatch like any other (the report also counts those apart, and how many NaN results matched). Output buffers carry a sentinel past the last whole block, compared too, so writing past
//! what stock writes is a mismatch.
//!
//! In two cases of three our subjects read those inputs from copies placed against an inaccessible page
//! (`InputGuards`, `guard.rs`), so a read outside the buffers ggml would pass faults and names the case.

use std::ffi::{c_int, c_void};

use rand::Rng;

use super::cases::{
    Gen, Unaligned, Q1_0_BYTES, Q2_0_BYTES, Q8_0_BYTES, Q8_K_BYTES, TQ1_0_BYTES, TQ2_0_BYTES,
};
use super::guard::{as_floats, float_bytes, install_fault_handler, set_case, GuardedRegion, Side};
use crate::dispatch::{Isa, Kernels};
use crate::formats::iq2_s::BlockIQ2S;
use crate::formats::iq2_xs::BlockIQ2XS;
use crate::formats::iq2_xxs::BlockIQ2XXS;
use crate::formats::iq3_s::BlockIQ3S;
use crate::formats::iq3_xxs::BlockIQ3XXS;
use crate::formats::{blocks, blocks_mut, RawBlock};
use crate::interpose::{BlockCount, IQ_SYMBOLS};
use crate::stock::{DequantizeRowFn, QuantizeRowFn, StockLib, VecDotFn};
use crate::tiles::Rows;
use crate::FloatOrder;

pub const SYMBOLS: [&str; 24] = [
    "ggml_vec_dot_q2_0_q8_0",
    "quantize_row_q8_0",
    "dequantize_row_q2_0",
    "ggml_lowbit_mul_mat_q2_0_q8_0",
    "ggml_vec_dot_q1_0_q8_0",
    "dequantize_row_q1_0",
    "ggml_lowbit_mul_mat_q1_0_q8_0",
    "ggml_vec_dot_tq2_0_q8_K",
    "dequantize_row_tq2_0",
    "ggml_vec_dot_tq1_0_q8_K",
    "dequantize_row_tq1_0",
    "ggml_vec_dot_iq2_xxs_q8_K",
    "dequantize_row_iq2_xxs",
    "ggml_vec_dot_iq2_xs_q8_K",
    "dequantize_row_iq2_xs",
    "ggml_vec_dot_iq2_s_q8_K",
    "dequantize_row_iq2_s",
    "ggml_vec_dot_iq3_xxs_q8_K",
    "dequantize_row_iq3_xxs",
    "ggml_vec_dot_iq3_s_q8_K",
    "dequantize_row_iq3_s",
    "quantize_row_q8_K",
    "ggml_lowbit_mul_mat_tq2_0_q8_K",
    "ggml_lowbit_mul_mat_tq1_0_q8_K",
];

/// Position of `name` in `SYMBOLS` (its reports follow that order).
fn symbol_index(name: &str) -> usize {
    SYMBOLS.iter().position(|s| *s == name).expect("listed")
}

/// The formats of 256-weight blocks against q8_K, compared by one loop: their block size, their two symbols and
/// where their reports sit in `SYMBOLS`. `Iq(i)` is the IQ format `i` of `interpose::IQ_SYMBOLS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KFormat {
    Tq2_0,
    Tq1_0,
    Iq(usize),
}

/// Block bytes of the IQ formats, in the order of `interpose::IQ_SYMBOLS`.
const IQ_BLOCK_BYTES: [usize; 5] = [66, 74, 82, 98, 110];

impl KFormat {
    pub const ALL: [KFormat; 7] = [
        KFormat::Tq2_0,
        KFormat::Tq1_0,
        KFormat::Iq(0),
        KFormat::Iq(1),
        KFormat::Iq(2),
        KFormat::Iq(3),
        KFormat::Iq(4),
    ];

    pub fn block_bytes(self) -> usize {
        match self {
            KFormat::Tq2_0 => TQ2_0_BYTES,
            KFormat::Tq1_0 => TQ1_0_BYTES,
            KFormat::Iq(i) => IQ_BLOCK_BYTES[i],
        }
    }

    pub fn vec_dot_symbol(self) -> &'static str {
        match self {
            KFormat::Tq2_0 => "ggml_vec_dot_tq2_0_q8_K",
            KFormat::Tq1_0 => "ggml_vec_dot_tq1_0_q8_K",
            KFormat::Iq(i) => IQ_SYMBOLS[i].0.to_str().expect("ASCII"),
        }
    }

    pub fn dequantize_symbol(self) -> &'static str {
        match self {
            KFormat::Tq2_0 => "dequantize_row_tq2_0",
            KFormat::Tq1_0 => "dequantize_row_tq1_0",
            KFormat::Iq(i) => IQ_SYMBOLS[i].1.to_str().expect("ASCII"),
        }
    }

    /// Index of the vec_dot symbol in `SYMBOLS` (the dequantizer follows it).
    fn symbol_index(self) -> usize {
        symbol_index(self.vec_dot_symbol())
    }

    fn fill(self, gen: &mut Gen, nb: usize, out: &mut [u8]) {
        match self {
            KFormat::Tq2_0 => gen.tq2_0_row(nb, out),
            KFormat::Tq1_0 => gen.tq1_0_row(nb, out),
            KFormat::Iq(i) => gen.iq_row(i, IQ_BLOCK_BYTES[i], nb, out),
        }
    }
}

/// `ggml_lowbit_mul_mat_q2_0_q8_0` / `_q1_0_q8_0`: our tile exports (stock has none: their reference is one
/// stock vec_dot per element).
pub type MulMatFn = unsafe extern "C" fn(
    c_int,
    *mut f32,
    usize,
    *const c_void,
    usize,
    *const c_void,
    usize,
    c_int,
    c_int,
);

/// `get(name)` for the vec_dot (`dequantize` false) or dequantize symbol of every IQ format, in the order of
/// `interpose::IQ_SYMBOLS`.
fn iq_symbols<T: Copy>(
    dequantize: bool,
    get: impl Fn(&str) -> Result<T, String>,
) -> Result<[T; 5], String> {
    let mut out = Vec::with_capacity(5);
    for (dot, deq) in IQ_SYMBOLS {
        let name = if dequantize { deq } else { dot };
        out.push(get(name.to_str().map_err(|e| e.to_string())?)?);
    }
    out.try_into().map_err(|_| "five IQ symbols".to_string())
}

/// C-ABI entry points of one implementation.
#[derive(Clone, Copy)]
pub struct CSymbols {
    pub vec_dot_q2_0_q8_0: VecDotFn,
    pub quantize_row_q8_0: QuantizeRowFn,
    pub dequantize_row_q2_0: DequantizeRowFn,
    /// Ours only.
    pub mul_mat_q2_0_q8_0: Option<MulMatFn>,
    pub vec_dot_q1_0_q8_0: VecDotFn,
    pub dequantize_row_q1_0: DequantizeRowFn,
    /// Ours only.
    pub mul_mat_q1_0_q8_0: Option<MulMatFn>,
    pub vec_dot_tq2_0_q8_k: VecDotFn,
    pub dequantize_row_tq2_0: DequantizeRowFn,
    /// Ours only.
    pub mul_mat_tq2_0_q8_k: Option<MulMatFn>,
    /// Ours only.
    pub mul_mat_tq1_0_q8_k: Option<MulMatFn>,
    pub vec_dot_tq1_0_q8_k: VecDotFn,
    pub dequantize_row_tq1_0: DequantizeRowFn,
    /// The IQ formats, in the order of `interpose::IQ_SYMBOLS`.
    pub vec_dot_iq: [VecDotFn; 5],
    pub dequantize_row_iq: [DequantizeRowFn; 5],
    /// Stock's also makes the realistic q8_K inputs of the q8_K formats' cases.
    pub quantize_row_q8_k: QuantizeRowFn,
}

impl CSymbols {
    pub fn from_stock(stock: &StockLib) -> Result<CSymbols, String> {
        Ok(CSymbols {
            vec_dot_q2_0_q8_0: stock.vec_dot("ggml_vec_dot_q2_0_q8_0")?,
            quantize_row_q8_0: stock.quantize_row("quantize_row_q8_0")?,
            dequantize_row_q2_0: stock.dequantize_row("dequantize_row_q2_0")?,
            mul_mat_q2_0_q8_0: None,
            vec_dot_q1_0_q8_0: stock.vec_dot("ggml_vec_dot_q1_0_q8_0")?,
            dequantize_row_q1_0: stock.dequantize_row("dequantize_row_q1_0")?,
            mul_mat_q1_0_q8_0: None,
            vec_dot_tq2_0_q8_k: stock.vec_dot("ggml_vec_dot_tq2_0_q8_K")?,
            dequantize_row_tq2_0: stock.dequantize_row("dequantize_row_tq2_0")?,
            mul_mat_tq2_0_q8_k: None,
            mul_mat_tq1_0_q8_k: None,
            vec_dot_tq1_0_q8_k: stock.vec_dot("ggml_vec_dot_tq1_0_q8_K")?,
            dequantize_row_tq1_0: stock.dequantize_row("dequantize_row_tq1_0")?,
            vec_dot_iq: iq_symbols(false, |name| stock.vec_dot(name))?,
            dequantize_row_iq: iq_symbols(true, |name| stock.dequantize_row(name))?,
            quantize_row_q8_k: stock.quantize_row("quantize_row_q8_K")?,
        })
    }

    /// Our exports from a loaded `libggml_lowbit.so`.
    pub fn from_library(lib: &libloading::Library) -> Result<CSymbols, String> {
        // SAFETY: the names are looked up with the signatures `ffi.rs` exports them with.
        unsafe {
            Ok(CSymbols {
                vec_dot_q2_0_q8_0: *lib
                    .get::<VecDotFn>(b"ggml_vec_dot_q2_0_q8_0\0")
                    .map_err(|e| e.to_string())?,
                quantize_row_q8_0: *lib
                    .get::<QuantizeRowFn>(b"quantize_row_q8_0\0")
                    .map_err(|e| e.to_string())?,
                dequantize_row_q2_0: *lib
                    .get::<DequantizeRowFn>(b"dequantize_row_q2_0\0")
                    .map_err(|e| e.to_string())?,
                mul_mat_q2_0_q8_0: Some(
                    *lib.get::<MulMatFn>(b"ggml_lowbit_mul_mat_q2_0_q8_0\0")
                        .map_err(|e| e.to_string())?,
                ),
                vec_dot_q1_0_q8_0: *lib
                    .get::<VecDotFn>(b"ggml_vec_dot_q1_0_q8_0\0")
                    .map_err(|e| e.to_string())?,
                dequantize_row_q1_0: *lib
                    .get::<DequantizeRowFn>(b"dequantize_row_q1_0\0")
                    .map_err(|e| e.to_string())?,
                mul_mat_q1_0_q8_0: Some(
                    *lib.get::<MulMatFn>(b"ggml_lowbit_mul_mat_q1_0_q8_0\0")
                        .map_err(|e| e.to_string())?,
                ),
                vec_dot_tq2_0_q8_k: *lib
                    .get::<VecDotFn>(b"ggml_vec_dot_tq2_0_q8_K\0")
                    .map_err(|e| e.to_string())?,
                dequantize_row_tq2_0: *lib
                    .get::<DequantizeRowFn>(b"dequantize_row_tq2_0\0")
                    .map_err(|e| e.to_string())?,
                mul_mat_tq2_0_q8_k: Some(
                    *lib.get::<MulMatFn>(b"ggml_lowbit_mul_mat_tq2_0_q8_K\0")
                        .map_err(|e| e.to_string())?,
                ),
                mul_mat_tq1_0_q8_k: Some(
                    *lib.get::<MulMatFn>(b"ggml_lowbit_mul_mat_tq1_0_q8_K\0")
                        .map_err(|e| e.to_string())?,
                ),
                vec_dot_tq1_0_q8_k: *lib
                    .get::<VecDotFn>(b"ggml_vec_dot_tq1_0_q8_K\0")
                    .map_err(|e| e.to_string())?,
                dequantize_row_tq1_0: *lib
                    .get::<DequantizeRowFn>(b"dequantize_row_tq1_0\0")
                    .map_err(|e| e.to_string())?,
                vec_dot_iq: iq_symbols(false, |name| {
                    lib.get::<VecDotFn>(name.as_bytes())
                        .map(|f| *f)
                        .map_err(|e| e.to_string())
                })?,
                dequantize_row_iq: iq_symbols(true, |name| {
                    lib.get::<DequantizeRowFn>(name.as_bytes())
                        .map(|f| *f)
                        .map_err(|e| e.to_string())
                })?,
                quantize_row_q8_k: *lib
                    .get::<QuantizeRowFn>(b"quantize_row_q8_K\0")
                    .map_err(|e| e.to_string())?,
            })
        }
    }

    /// This crate's own exports (`crate::ffi`), served by this process's configuration
    /// (`interpose::configure_in_front_of` puts it in front of a stock library loaded here).
    pub fn from_rlib() -> CSymbols {
        use crate::ffi as f;
        CSymbols {
            vec_dot_q2_0_q8_0: f::ggml_vec_dot_q2_0_q8_0,
            quantize_row_q8_0: f::quantize_row_q8_0,
            dequantize_row_q2_0: f::dequantize_row_q2_0,
            mul_mat_q2_0_q8_0: Some(f::ggml_lowbit_mul_mat_q2_0_q8_0),
            vec_dot_q1_0_q8_0: f::ggml_vec_dot_q1_0_q8_0,
            dequantize_row_q1_0: f::dequantize_row_q1_0,
            mul_mat_q1_0_q8_0: Some(f::ggml_lowbit_mul_mat_q1_0_q8_0),
            vec_dot_tq2_0_q8_k: f::ggml_vec_dot_tq2_0_q8_K,
            dequantize_row_tq2_0: f::dequantize_row_tq2_0,
            mul_mat_tq2_0_q8_k: Some(f::ggml_lowbit_mul_mat_tq2_0_q8_K),
            mul_mat_tq1_0_q8_k: Some(f::ggml_lowbit_mul_mat_tq1_0_q8_K),
            vec_dot_tq1_0_q8_k: f::ggml_vec_dot_tq1_0_q8_K,
            dequantize_row_tq1_0: f::dequantize_row_tq1_0,
            // The order of `interpose::IQ_SYMBOLS`.
            vec_dot_iq: [
                f::ggml_vec_dot_iq2_xxs_q8_K,
                f::ggml_vec_dot_iq2_xs_q8_K,
                f::ggml_vec_dot_iq2_s_q8_K,
                f::ggml_vec_dot_iq3_xxs_q8_K,
                f::ggml_vec_dot_iq3_s_q8_K,
            ],
            dequantize_row_iq: [
                f::dequantize_row_iq2_xxs,
                f::dequantize_row_iq2_xs,
                f::dequantize_row_iq2_s,
                f::dequantize_row_iq3_xxs,
                f::dequantize_row_iq3_s,
            ],
            quantize_row_q8_k: f::quantize_row_q8_K,
        }
    }

    /// The vec_dot and dequantize entries of a q8_K format.
    pub fn k_format(&self, f: KFormat) -> (VecDotFn, DequantizeRowFn) {
        match f {
            KFormat::Tq2_0 => (self.vec_dot_tq2_0_q8_k, self.dequantize_row_tq2_0),
            KFormat::Tq1_0 => (self.vec_dot_tq1_0_q8_k, self.dequantize_row_tq1_0),
            KFormat::Iq(i) => (self.vec_dot_iq[i], self.dequantize_row_iq[i]),
        }
    }
}

/// One implementation under test.
pub enum Subject {
    /// The rlib's kernels for one (instruction set, float order).
    Kernels(Kernels),
    /// C symbols (the cdylib), which use whatever order they were configured for.
    C { name: String, symbols: CSymbols },
}

impl Subject {
    pub fn name(&self) -> String {
        match self {
            Subject::Kernels(k) => format!(
                "rlib/{}{}{}{}{}{}",
                k.isa.name(),
                if k.choices.iq_gather { "+gather" } else { "" },
                if k.choices.q8_scale_gather {
                    "+scale-gather"
                } else {
                    ""
                },
                if k.choices.iq2_s_permutes {
                    "+iq2s-permutes"
                } else {
                    ""
                },
                if k.choices.q1_masked_loads {
                    "+masked"
                } else {
                    ""
                },
                if k.choices.q1_lookups {
                    "+q1-tables"
                } else {
                    ""
                }
            ),
            Subject::C { name, .. } => name.clone(),
        }
    }

    fn vec_dot(&self, n: i32, x: &[u8], y: &[u8], nrc: i32) -> f32 {
        match self {
            Subject::Kernels(k) => {
                let nb = if n > 0 { n as usize / 64 } else { 0 };
                k.vec_dot_q2_0_q8_0(
                    blocks(&x[..nb * Q2_0_BYTES]),
                    blocks(&y[..2 * nb * Q8_0_BYTES]),
                )
            }
            Subject::C { symbols, .. } => call_vec_dot(symbols.vec_dot_q2_0_q8_0, n, x, y, nrc),
        }
    }

    fn vec_dot_q1_0(&self, n: i32, x: &[u8], y: &[u8], nrc: i32) -> f32 {
        match self {
            Subject::Kernels(k) => {
                let nb = if n > 0 { n as usize / 128 } else { 0 };
                k.vec_dot_q1_0_q8_0(
                    blocks(&x[..nb * Q1_0_BYTES]),
                    blocks(&y[..4 * nb * Q8_0_BYTES]),
                )
            }
            Subject::C { symbols, .. } => call_vec_dot(symbols.vec_dot_q1_0_q8_0, n, x, y, nrc),
        }
    }

    fn vec_dot_k(&self, f: KFormat, n: i32, x: &[u8], y: &[u8], nrc: i32) -> f32 {
        match self {
            Subject::Kernels(k) => {
                let nb = if n > 0 { n as usize / 256 } else { 0 };
                let (x, y) = (&x[..nb * f.block_bytes()], blocks(&y[..nb * Q8_K_BYTES]));
                match f {
                    KFormat::Tq2_0 => k.vec_dot_tq2_0_q8_k(blocks(x), y),
                    KFormat::Tq1_0 => k.vec_dot_tq1_0_q8_k(blocks(x), y),
                    KFormat::Iq(0) => k.vec_dot_iq_q8_k::<BlockIQ2XXS>(blocks(x), y),
                    KFormat::Iq(1) => k.vec_dot_iq_q8_k::<BlockIQ2XS>(blocks(x), y),
                    KFormat::Iq(2) => k.vec_dot_iq_q8_k::<BlockIQ2S>(blocks(x), y),
                    KFormat::Iq(3) => k.vec_dot_iq_q8_k::<BlockIQ3XXS>(blocks(x), y),
                    KFormat::Iq(_) => k.vec_dot_iq_q8_k::<BlockIQ3S>(blocks(x), y),
                }
            }
            Subject::C { symbols, .. } => call_vec_dot(symbols.k_format(f).0, n, x, y, nrc),
        }
    }

    fn dequantize_k(&self, f: KFormat, x: &[u8], y: &mut [f32], k: i64) {
        match self {
            Subject::Kernels(kern) => {
                let nb = (k.max(0) / 256) as usize;
                let (x, y) = (&x[..nb * f.block_bytes()], &mut y[..nb * 256]);
                match f {
                    KFormat::Tq2_0 => kern.dequantize_row_tq2_0(blocks(x), y),
                    KFormat::Tq1_0 => kern.dequantize_row_tq1_0(blocks(x), y),
                    KFormat::Iq(0) => kern.dequantize_row_iq::<BlockIQ2XXS>(blocks(x), y),
                    KFormat::Iq(1) => kern.dequantize_row_iq::<BlockIQ2XS>(blocks(x), y),
                    KFormat::Iq(2) => kern.dequantize_row_iq::<BlockIQ2S>(blocks(x), y),
                    KFormat::Iq(3) => kern.dequantize_row_iq::<BlockIQ3XXS>(blocks(x), y),
                    KFormat::Iq(_) => kern.dequantize_row_iq::<BlockIQ3S>(blocks(x), y),
                }
            }
            // SAFETY: `x` holds `k/256` blocks and `y` room for `k` floats (the case builder's sizes).
            Subject::C { symbols, .. } => unsafe {
                (symbols.k_format(f).1)(x.as_ptr() as *const c_void, y.as_mut_ptr(), k)
            },
        }
    }

    fn dequantize_q1_0(&self, x: &[u8], y: &mut [f32], k: i64) {
        match self {
            Subject::Kernels(kern) => {
                let nb = BlockCount::Int.of(k, 128);
                kern.dequantize_row_q1_0(blocks(&x[..nb * Q1_0_BYTES]), &mut y[..nb * 128])
            }
            // SAFETY: `x` holds `k/128` blocks and `y` room for `k` floats (the case builder's sizes).
            Subject::C { symbols, .. } => unsafe {
                (symbols.dequantize_row_q1_0)(x.as_ptr() as *const c_void, y.as_mut_ptr(), k)
            },
        }
    }

    fn quantize(&self, x: &[f32], y: &mut [u8], k: i64) {
        match self {
            Subject::Kernels(kern) => {
                let nb = BlockCount::Int.of(k, 32);
                kern.quantize_row_q8_0(&x[..nb * 32], blocks_mut(&mut y[..nb * Q8_0_BYTES]))
            }
            // SAFETY: `x` holds at least `k` floats and `y` room for `k/32` blocks (the case builder's sizes).
            Subject::C { symbols, .. } => unsafe {
                (symbols.quantize_row_q8_0)(x.as_ptr(), y.as_mut_ptr() as *mut c_void, k)
            },
        }
    }

    fn quantize_k(&self, x: &[f32], y: &mut [u8], k: i64) {
        match self {
            Subject::Kernels(kern) => {
                let nb = (k.max(0) / 256) as usize;
                kern.quantize_row_q8_k(&x[..nb * 256], blocks_mut(&mut y[..nb * Q8_K_BYTES]))
            }
            // SAFETY: `x` holds at least `k` floats and `y` room for `k/256` blocks (the case builder's sizes).
            Subject::C { symbols, .. } => unsafe {
                (symbols.quantize_row_q8_k)(x.as_ptr(), y.as_mut_ptr() as *mut c_void, k)
            },
        }
    }

    fn dequantize(&self, x: &[u8], y: &mut [f32], k: i64) {
        match self {
            Subject::Kernels(kern) => {
                let nb = BlockCount::Int.of(k, 64);
                kern.dequantize_row_q2_0(blocks(&x[..nb * Q2_0_BYTES]), &mut y[..nb * 64])
            }
            // SAFETY: `x` holds `k/64` blocks and `y` room for `k` floats (the case builder's sizes).
            Subject::C { symbols, .. } => unsafe {
                (symbols.dequantize_row_q2_0)(x.as_ptr() as *const c_void, y.as_mut_ptr(), k)
            },
        }
    }
}

/// A format with a tile export: Q2_0 (64 weights, two q8_0 blocks per block), Q1_0 (128, four; both have
/// 18-byte blocks), TQ2_0 or TQ1_0 (256 weights in 66 or 54 bytes, one q8_K block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TileFormat {
    Q2_0,
    Q1_0,
    Tq2_0,
    Tq1_0,
}

impl TileFormat {
    fn weights(self) -> usize {
        match self {
            TileFormat::Q2_0 => 64,
            TileFormat::Q1_0 => 128,
            TileFormat::Tq2_0 | TileFormat::Tq1_0 => 256,
        }
    }
    fn block_bytes(self) -> usize {
        match self {
            TileFormat::Q2_0 => Q2_0_BYTES,
            TileFormat::Q1_0 => Q1_0_BYTES,
            TileFormat::Tq2_0 => TQ2_0_BYTES,
            TileFormat::Tq1_0 => TQ1_0_BYTES,
        }
    }
    /// Activation blocks per weight block, and their bytes.
    fn act_per_block(self) -> (usize, usize) {
        match self {
            TileFormat::Tq2_0 | TileFormat::Tq1_0 => (1, Q8_K_BYTES),
            _ => (self.weights() / 32, Q8_0_BYTES),
        }
    }
    fn symbol(self) -> &'static str {
        match self {
            TileFormat::Q2_0 => "ggml_lowbit_mul_mat_q2_0_q8_0",
            TileFormat::Q1_0 => "ggml_lowbit_mul_mat_q1_0_q8_0",
            TileFormat::Tq2_0 => "ggml_lowbit_mul_mat_tq2_0_q8_K",
            TileFormat::Tq1_0 => "ggml_lowbit_mul_mat_tq1_0_q8_K",
        }
    }
}

/// The shape of one mul_mat case: `rows` weight rows of `nb` blocks `xs` blocks apart, `cols` q8_0 columns
/// `ys` blocks apart, outputs `bs` floats apart.
#[derive(Clone, Copy, Debug)]
struct MulMatShape {
    format: TileFormat,
    nb: usize,
    rows: usize,
    cols: usize,
    xs: usize,
    ys: usize,
    bs: usize,
}

impl Subject {
    /// The tile export of `sh.format` on `x` and `y` laid out as `sh`; the output with its sentinel gaps.
    fn mul_mat(&self, sh: MulMatShape, x: &[u8], y: &[u8]) -> Vec<f32> {
        let mut out = vec![SENTINEL; sh.cols * sh.bs];
        let (per, act_bytes) = sh.format.act_per_block();
        match self {
            Subject::Kernels(k) => {
                let mut emit = |r: usize, c: usize, v: f32| out[c * sh.bs + r] = v;
                fn view<B: RawBlock>(
                    bytes: &[u8],
                    (nb, stride, n): (usize, usize, usize),
                ) -> Rows<'_, B> {
                    Rows::new(blocks(bytes), nb, stride, n).expect("case sizes")
                }
                let (xv, yv) = ((sh.nb, sh.xs, sh.rows), (per * sh.nb, sh.ys, sh.cols));
                match sh.format {
                    TileFormat::Q2_0 => k.mul_mat_q2_0_q8_0(view(x, xv), view(y, yv), &mut emit),
                    TileFormat::Q1_0 => k.mul_mat_q1_0_q8_0(view(x, xv), view(y, yv), &mut emit),
                    TileFormat::Tq2_0 => k.mul_mat_tq2_0_q8_k(view(x, xv), view(y, yv), &mut emit),
                    TileFormat::Tq1_0 => k.mul_mat_tq1_0_q8_k(view(x, xv), view(y, yv), &mut emit),
                }
            }
            Subject::C { symbols, .. } => {
                let f = match sh.format {
                    TileFormat::Q2_0 => symbols.mul_mat_q2_0_q8_0,
                    TileFormat::Q1_0 => symbols.mul_mat_q1_0_q8_0,
                    TileFormat::Tq2_0 => symbols.mul_mat_tq2_0_q8_k,
                    TileFormat::Tq1_0 => symbols.mul_mat_tq1_0_q8_k,
                }
                .expect("our library exports the tile API");
                // SAFETY: the buffers hold the rows, columns and outputs the shape describes.
                unsafe {
                    f(
                        (sh.format.weights() * sh.nb) as c_int,
                        out.as_mut_ptr(),
                        sh.bs,
                        x.as_ptr() as *const c_void,
                        sh.xs * sh.format.block_bytes(),
                        y.as_ptr() as *const c_void,
                        sh.ys * act_bytes,
                        sh.rows as c_int,
                        sh.cols as c_int,
                    )
                };
            }
        }
        out
    }
}

/// One tile-export case of `format`: a whole product with row tails (1..=9 rows), several columns, strides with
/// gaps and gaps between output columns (for Q1_0 also single columns of 16..=40 rows); every element against
/// stock's vec_dot (`st`) on its pair.
fn mul_mat_case(
    gen: &mut Gen,
    format: TileFormat,
    st: &CSymbols,
    subjects: &[Subject],
    guards: &mut InputGuards,
    names: &SubjectNames,
    mut record: impl FnMut(usize, Outcome, String),
) {
    let case = gen.case;
    let (per, act_bytes) = format.act_per_block();
    let bytes = format.block_bytes();
    let mut nb = gen
        .row_blocks(format.weights())
        .min(3072 / format.weights());
    let mut rows = gen.rng.gen_range(1..=9);
    let mut cols = gen.rng.gen_range(1..=3);
    // A quarter of the Q1_0 cases are decode-shaped: one column, 16..=40 rows (several steps per tile stream,
    // so the streams start apart), rows of up to 70 blocks.
    if format == TileFormat::Q1_0 && gen.rng.gen_ratio(1, 4) {
        (nb, rows, cols) = (gen.rng.gen_range(1..=70), gen.rng.gen_range(16..=40), 1);
    }
    let sh = MulMatShape {
        format,
        nb,
        rows,
        cols,
        xs: nb + gen.rng.gen_range(0..2),
        ys: per * nb + gen.rng.gen_range(0..2),
        bs: rows + gen.rng.gen_range(0..3),
    };
    let mut x = vec![0u8; ((rows - 1) * sh.xs + nb) * bytes];
    let mut y = vec![0u8; ((cols - 1) * sh.ys + per * nb) * act_bytes];
    for r in 0..rows {
        let row = &mut x[r * sh.xs * bytes..][..nb * bytes];
        match format {
            TileFormat::Q2_0 => gen.q2_0_row(nb, row),
            TileFormat::Q1_0 => gen.q1_0_row(nb, row),
            TileFormat::Tq2_0 => gen.tq2_0_row(nb, row),
            TileFormat::Tq1_0 => gen.tq1_0_row(nb, row),
        }
    }
    for c in 0..cols {
        let col = &mut y[c * sh.ys * act_bytes..][..per * nb * act_bytes];
        match format {
            TileFormat::Tq2_0 | TileFormat::Tq1_0 => gen.q8_k_row(nb, col, st.quantize_row_q8_k),
            _ => gen.q8_0_row(per * nb, col),
        }
    }
    let stock_dot = match format {
        TileFormat::Q2_0 => st.vec_dot_q2_0_q8_0,
        TileFormat::Q1_0 => st.vec_dot_q1_0_q8_0,
        TileFormat::Tq2_0 => st.vec_dot_tq2_0_q8_k,
        TileFormat::Tq1_0 => st.vec_dot_tq1_0_q8_k,
    };
    let mut want = vec![SENTINEL; cols * sh.bs];
    for c in 0..cols {
        for r in 0..rows {
            let (xa, ya) = (r * sh.xs * bytes, c * sh.ys * act_bytes);
            want[c * sh.bs + r] = call_vec_dot(
                stock_dot,
                (format.weights() * nb) as i32,
                &x[xa..],
                &y[ya..],
                1,
            );
        }
    }
    let side = guards.side;
    let (gx, gy) = guards.inputs(&x, &y);
    for (j, s) in subjects.iter().enumerate() {
        names.label(format.symbol(), case, side, j);
        let got = s.mul_mat(sh, gx, gy);
        let (o, at) = compare_f32(&got, &want);
        let describe = if matches!(o, Outcome::Differ | Outcome::DifferNan) {
            format!(
                "case {case}: {sh:?}: element {at} (row {}, column {}): ours {:e} stock {:e}",
                at % sh.bs,
                at / sh.bs,
                got[at],
                want[at]
            )
        } else {
            String::new()
        };
        record(j, o, describe);
    }
}

/// Our subjects' inputs in two cases of three: copied against an inaccessible page (`guard.rs`), after the
/// last byte or before the first by turns, so that a read outside them faults; the third case as generated, at
/// its random misalignment. Stock always reads the generated buffers.
/// Placed once per case and symbol, read by every subject.
struct InputGuards {
    x: GuardedRegion,
    y: GuardedRegion,
    side: Option<Side>,
}

impl InputGuards {
    fn new() -> InputGuards {
        install_fault_handler();
        InputGuards {
            x: GuardedRegion::new(1 << 20),
            y: GuardedRegion::new(1 << 20),
            side: None,
        }
    }

    fn start_case(&mut self, case: u64) {
        self.side = match case % 3 {
            0 => Some(Side::After),
            1 => Some(Side::Before),
            _ => None,
        };
    }

    /// `x` and `y` as our subjects read them this case.
    fn inputs<'a>(&'a mut self, x: &'a [u8], y: &'a [u8]) -> (&'a [u8], &'a [u8]) {
        match self.side {
            Some(side) => (&*self.x.place(x, side), &*self.y.place(y, side)),
            None => (x, y),
        }
    }

    /// Floats as our subjects read them this case (both placements keep them 4-byte aligned).
    fn floats<'a>(&'a mut self, x: &'a [f32]) -> &'a [f32] {
        match self.side {
            Some(side) => as_floats(self.x.place(float_bytes(x), side)),
            None => x,
        }
    }
}

/// The subjects' names, for the fault handler's message.
struct SubjectNames(Vec<String>);

impl SubjectNames {
    /// Names the call about to run (no allocation per call).
    fn label(&self, symbol: &str, case: u64, side: Option<Side>, subject: usize) {
        set_case(format_args!(
            "bits {symbol} case {case} guard {side:?} subject {}",
            self.0[subject]
        ));
    }
}

fn call_vec_dot(f: VecDotFn, n: i32, x: &[u8], y: &[u8], nrc: i32) -> f32 {
    let mut s = SENTINEL;
    // SAFETY: `x` and `y` hold the blocks of `n` weights and `n/32` q8_0 blocks the symbol reads; `s` is a
    // valid output.
    unsafe {
        f(
            n,
            &mut s,
            1,
            x.as_ptr() as *const c_void,
            18,
            y.as_ptr() as *const c_void,
            34,
            nrc,
        )
    };
    s
}

/// The rlib subjects for every instruction set this CPU has, for one float order.
pub fn rlib_subjects(order: FloatOrder) -> Vec<Subject> {
    let best = crate::dispatch::detected_isa();
    Isa::ALL
        .into_iter()
        .filter(|&i| i <= best)
        // AVX-512 twice: with the IQ2 grid gathers and the Q1_0 tiles' masked loads, and without
        // (`Kernels::every_variant`).
        .flat_map(|i| Kernels::every_variant(i, order))
        .map(Subject::Kernels)
        .collect()
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SymbolReport {
    pub symbol: String,
    pub build: String,
    pub subject: String,
    pub cases: u64,
    pub mismatches: u64,
    /// Mismatches where both results are NaNs (with different bits); counted in `mismatches` too.
    pub nan_mismatches: u64,
    /// NaN results whose bits matched stock's.
    pub nan_equal: u64,
    pub first_mismatch: Option<String>,
}

impl SymbolReport {
    fn record(&mut self, outcome: Outcome, describe: impl FnOnce() -> String) {
        self.cases += 1;
        match outcome {
            Outcome::Equal => {}
            Outcome::EqualNan => self.nan_equal += 1,
            Outcome::Differ | Outcome::DifferNan => {
                self.mismatches += 1;
                self.nan_mismatches += u64::from(outcome == Outcome::DifferNan);
                if self.first_mismatch.is_none() {
                    self.first_mismatch = Some(describe());
                }
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Equal,
    /// Equal bits, and a NaN among the results.
    EqualNan,
    Differ,
    /// Different bits, where every differing pair is two NaNs.
    DifferNan,
}

/// What output slots hold before a call: a NaN no kernel computes, so a slot left unwritten (or written past
/// what stock writes) shows; not counted as a NaN result.
const SENTINEL: f32 = f32::from_bits(0x7fa5_a5a5);

/// A result as a mismatch line shows it: the value and its bits (which tell two NaNs apart).
fn show(v: f32) -> String {
    format!("{v:e} ({:#010x})", v.to_bits())
}

fn compare_f32(ours: &[f32], stock: &[f32]) -> (Outcome, usize) {
    let mut first_differing = None;
    let mut numbers_differ = false;
    for (i, (a, b)) in ours.iter().zip(stock).enumerate() {
        if a.to_bits() != b.to_bits() {
            first_differing.get_or_insert(i);
            numbers_differ |= !(a.is_nan() && b.is_nan());
        }
    }
    match first_differing {
        Some(i) if numbers_differ => (Outcome::Differ, i),
        Some(i) => (Outcome::DifferNan, i),
        None if stock
            .iter()
            .any(|v| v.is_nan() && v.to_bits() != SENTINEL.to_bits()) =>
        {
            (Outcome::EqualNan, 0)
        }
        None => (Outcome::Equal, 0),
    }
}

/// Runs `cases` cases of every symbol against `stock` for each subject. `tick` is called once per case.
pub fn run(
    stock: &StockLib,
    subjects: &[Subject],
    cases: u64,
    seed: u64,
    mut tick: impl FnMut(),
) -> Result<Vec<SymbolReport>, String> {
    let st = CSymbols::from_stock(stock)?;
    let build = stock.build.clone();
    let mut reports: Vec<SymbolReport> = SYMBOLS
        .iter()
        .flat_map(|sym| {
            subjects.iter().map(|s| SymbolReport {
                symbol: sym.to_string(),
                build: build.clone(),
                subject: s.name(),
                ..Default::default()
            })
        })
        .collect();
    let per_symbol = subjects.len();
    let mut gen = Gen::new(seed);
    let mut guards = InputGuards::new();
    let names = SubjectNames(subjects.iter().map(Subject::name).collect());
    for case in 0..cases {
        gen.case = case;
        guards.start_case(case);
        // ggml_vec_dot_q2_0_q8_0
        {
            let nb = gen.row_blocks(64);
            let tail = if gen.rng.gen_ratio(1, 8) {
                gen.rng.gen_range(1..64)
            } else {
                0
            };
            let n = (nb * 64 + tail) as i32;
            let nrc = if gen.rng.gen_ratio(1, 16) { 2 } else { 1 };
            let mut x = Unaligned::new(nb * Q2_0_BYTES, gen.rng.gen_range(0..64));
            let mut y = Unaligned::new(2 * nb * Q8_0_BYTES, gen.rng.gen_range(0..64));
            gen.q2_0_row(nb, x.bytes_mut());
            gen.q8_0_row(2 * nb, y.bytes_mut());
            let want = call_vec_dot(st.vec_dot_q2_0_q8_0, n, x.bytes(), y.bytes(), nrc);
            let side = guards.side;
            let (gx, gy) = guards.inputs(x.bytes(), y.bytes());
            for (k, s) in subjects.iter().enumerate() {
                names.label("ggml_vec_dot_q2_0_q8_0", case, side, k);
                let got = s.vec_dot(n, gx, gy, nrc);
                let (o, _) = compare_f32(&[got], &[want]);
                reports[k].record(o, || {
                    format!(
                        "case {case}: n={n}: ours {} stock {}",
                        show(got),
                        show(want)
                    )
                });
            }
        }
        // The tile exports (ggml_lowbit_mul_mat_q2_0_q8_0, _q1_0_q8_0, _tq2_0_q8_K, _tq1_0_q8_K), each every
        // fourth case: every element against stock's vec_dot on its pair.
        for (turn, format) in [
            (0, TileFormat::Q2_0),
            (2, TileFormat::Q1_0),
            (1, TileFormat::Tq2_0),
            (3, TileFormat::Tq1_0),
        ] {
            if case % 4 == turn {
                let slot = symbol_index(format.symbol());
                mul_mat_case(
                    &mut gen,
                    format,
                    &st,
                    subjects,
                    &mut guards,
                    &names,
                    |j, o, d| reports[slot * per_symbol + j].record(o, || d),
                );
            }
        }
        // quantize_row_q8_0 and quantize_row_q8_K: the same float inputs and output checks (a sentinel block
        // past the last whole one).
        for (qk, bytes, symbol) in [
            (32, Q8_0_BYTES, "quantize_row_q8_0"),
            (256, Q8_K_BYTES, "quantize_row_q8_K"),
        ] {
            let slot = symbol_index(symbol);
            let nb = gen.row_blocks(qk).min(5120 / qk);
            let tail = if gen.rng.gen_ratio(1, 8) {
                gen.rng.gen_range(1..qk)
            } else {
                0
            };
            let k = nb * qk + tail;
            let shift = gen.rng.gen_range(0..8);
            let mut xs = vec![0f32; k + shift];
            gen.activations(k, &mut xs[shift..]);
            let x = &xs[shift..];
            let out_len = (nb + 1) * bytes;
            let mut want = Unaligned::new(out_len, gen.rng.gen_range(0..64));
            want.bytes_mut().fill(0xaa);
            let stock_quantize = if qk == 32 {
                st.quantize_row_q8_0
            } else {
                st.quantize_row_q8_k
            };
            // SAFETY: `x` has `k` floats, `want` room for `k/qk` blocks plus the sentinel block.
            unsafe {
                (stock_quantize)(
                    x.as_ptr(),
                    want.bytes_mut().as_mut_ptr() as *mut c_void,
                    k as i64,
                )
            };
            let side = guards.side;
            let gx = guards.floats(x);
            for (j, s) in subjects.iter().enumerate() {
                let mut got = Unaligned::new(out_len, gen.rng.gen_range(0..64));
                got.bytes_mut().fill(0xaa);
                names.label(symbol, case, side, j);
                if qk == 32 {
                    s.quantize(gx, got.bytes_mut(), k as i64);
                } else {
                    s.quantize_k(gx, got.bytes_mut(), k as i64);
                }
                let o = if got.bytes() == want.bytes() {
                    Outcome::Equal
                } else {
                    Outcome::Differ
                };
                reports[slot * per_symbol + j].record(o, || {
                    let at = got.bytes().iter().zip(want.bytes()).position(|(a, b)| a != b).unwrap_or(0);
                    let blk = at / bytes;
                    format!(
                        "case {case}: k={k}: first differing byte {at} (block {blk}); input block {:?}",
                        &x[(blk * qk).min(k)..((blk + 1) * qk).min(k)]
                    )
                });
            }
        }
        // dequantize_row_q2_0
        {
            let nb = gen.row_blocks(64).min(64);
            let tail = if gen.rng.gen_ratio(1, 8) {
                gen.rng.gen_range(1..64)
            } else {
                0
            };
            let k = nb * 64 + tail;
            let mut x = Unaligned::new(nb * Q2_0_BYTES, gen.rng.gen_range(0..64));
            gen.q2_0_row(nb, x.bytes_mut());
            let sentinel = SENTINEL;
            let mut want = vec![sentinel; nb * 64 + 64];
            // SAFETY: `x` has `k/64` blocks, `want` room for them plus a sentinel block.
            unsafe {
                (st.dequantize_row_q2_0)(
                    x.bytes().as_ptr() as *const c_void,
                    want.as_mut_ptr(),
                    k as i64,
                )
            };
            let side = guards.side;
            let gx = guards.inputs(x.bytes(), &[]).0;
            for (j, s) in subjects.iter().enumerate() {
                let mut got = vec![sentinel; nb * 64 + 64];
                names.label("dequantize_row_q2_0", case, side, j);
                s.dequantize(gx, &mut got, k as i64);
                let (o, at) = compare_f32(&got, &want);
                reports[2 * per_symbol + j].record(o, || {
                    format!(
                        "case {case}: k={k}: value {at}: ours {} stock {}",
                        show(got[at]),
                        show(want[at])
                    )
                });
            }
        }
        // ggml_vec_dot_q1_0_q8_0
        {
            let nb = gen.row_blocks(128);
            let tail = if gen.rng.gen_ratio(1, 8) {
                gen.rng.gen_range(1..128)
            } else {
                0
            };
            let n = (nb * 128 + tail) as i32;
            let nrc = if gen.rng.gen_ratio(1, 16) { 2 } else { 1 };
            let mut x = Unaligned::new(nb * Q1_0_BYTES, gen.rng.gen_range(0..64));
            let mut y = Unaligned::new(4 * nb * Q8_0_BYTES, gen.rng.gen_range(0..64));
            gen.q1_0_row(nb, x.bytes_mut());
            gen.q8_0_row(4 * nb, y.bytes_mut());
            let want = call_vec_dot(st.vec_dot_q1_0_q8_0, n, x.bytes(), y.bytes(), nrc);
            let side = guards.side;
            let (gx, gy) = guards.inputs(x.bytes(), y.bytes());
            for (j, s) in subjects.iter().enumerate() {
                names.label("ggml_vec_dot_q1_0_q8_0", case, side, j);
                let got = s.vec_dot_q1_0(n, gx, gy, nrc);
                let (o, _) = compare_f32(&[got], &[want]);
                reports[4 * per_symbol + j].record(o, || {
                    format!(
                        "case {case}: n={n}: ours {} stock {}",
                        show(got),
                        show(want)
                    )
                });
            }
        }
        // dequantize_row_q1_0
        {
            let nb = gen.row_blocks(128).min(32);
            let tail = if gen.rng.gen_ratio(1, 8) {
                gen.rng.gen_range(1..128)
            } else {
                0
            };
            let k = nb * 128 + tail;
            let mut x = Unaligned::new(nb * Q1_0_BYTES, gen.rng.gen_range(0..64));
            gen.q1_0_row(nb, x.bytes_mut());
            let sentinel = SENTINEL;
            let mut want = vec![sentinel; nb * 128 + 128];
            // SAFETY: `x` has `k/128` blocks, `want` room for them plus a sentinel block.
            unsafe {
                (st.dequantize_row_q1_0)(
                    x.bytes().as_ptr() as *const c_void,
                    want.as_mut_ptr(),
                    k as i64,
                )
            };
            let side = guards.side;
            let gx = guards.inputs(x.bytes(), &[]).0;
            for (j, s) in subjects.iter().enumerate() {
                let mut got = vec![sentinel; nb * 128 + 128];
                names.label("dequantize_row_q1_0", case, side, j);
                s.dequantize_q1_0(gx, &mut got, k as i64);
                let (o, at) = compare_f32(&got, &want);
                reports[5 * per_symbol + j].record(o, || {
                    format!(
                        "case {case}: k={k}: value {at}: ours {} stock {}",
                        show(got[at]),
                        show(want[at])
                    )
                });
            }
        }
        // The q8_K formats: activations quantized by stock's own quantize_row_q8_K (realistic and edge floats), or
        // q8_K bytes built directly (−128 runs, arbitrary bsums that make stock's TQ2_0 i16 lanes wrap).
        for f in KFormat::ALL {
            let at = f.symbol_index() * per_symbol;
            let (stock_dot, stock_dequantize) = st.k_format(f);
            let nb = gen.row_blocks(256).min(48);
            let tail = if gen.rng.gen_ratio(1, 8) {
                gen.rng.gen_range(1..256)
            } else {
                0
            };
            let n = (nb * 256 + tail) as i32;
            let nrc = if gen.rng.gen_ratio(1, 16) { 2 } else { 1 };
            let mut x = Unaligned::new(nb * f.block_bytes(), gen.rng.gen_range(0..64));
            let mut y = Unaligned::new(nb * Q8_K_BYTES, gen.rng.gen_range(0..64));
            f.fill(&mut gen, nb, x.bytes_mut());
            gen.q8_k_row(nb, y.bytes_mut(), st.quantize_row_q8_k);
            let want = call_vec_dot(stock_dot, n, x.bytes(), y.bytes(), nrc);
            let side = guards.side;
            let (gx, gy) = guards.inputs(x.bytes(), y.bytes());
            for (j, s) in subjects.iter().enumerate() {
                names.label(f.vec_dot_symbol(), case, side, j);
                let got = s.vec_dot_k(f, n, gx, gy, nrc);
                let (o, _) = compare_f32(&[got], &[want]);
                reports[at + j].record(o, || {
                    format!(
                        "case {case}: n={n}: ours {} stock {}",
                        show(got),
                        show(want)
                    )
                });
            }

            // dequantize_row_*
            let nb = nb.min(16);
            let k = nb * 256 + tail;
            let sentinel = SENTINEL;
            let mut want = vec![sentinel; nb * 256 + 256];
            // SAFETY: `x` has at least `k/256` blocks, `want` room for them plus a sentinel block.
            unsafe {
                stock_dequantize(
                    x.bytes().as_ptr() as *const c_void,
                    want.as_mut_ptr(),
                    k as i64,
                )
            };
            let gx = guards.inputs(x.bytes(), &[]).0;
            for (j, s) in subjects.iter().enumerate() {
                let mut got = vec![sentinel; nb * 256 + 256];
                names.label(f.dequantize_symbol(), case, side, j);
                s.dequantize_k(f, gx, &mut got, k as i64);
                let (o, at_value) = compare_f32(&got, &want);
                reports[at + per_symbol + j].record(o, || {
                    format!(
                        "case {case}: k={k}: value {at_value}: ours {} stock {}",
                        show(got[at_value]),
                        show(want[at_value])
                    )
                });
            }
        }
        tick();
    }
    lengths_ggml_never_passes(&st, subjects, |symbol, j, o, d| {
        reports[symbol_index(symbol) * per_symbol + j].record(o, || d)
    });
    Ok(reports)
}

/// The `n` of every vec_dot in `lengths_ggml_never_passes`: each one more case of the symbol.
pub const ODD_N: [i32; 7] = [0, -1, -64, -65, -(1 << 20), i32::MIN + 1, i32::MIN];
/// The `k` of every quantizer and dequantizer there.
pub const ODD_K: [i64; 8] = [0, -1, -32, -256, -(1 << 40), i64::MIN + 1, i64::MIN, 31];

/// An output compared by `lengths_ggml_never_passes`: its symbol, what a subject writes, what stock wrote.
type OddLengthOutput<'a> = (&'a str, Box<dyn Fn(&Subject) -> Vec<u8> + 'a>, Vec<u8>);

/// A dequantizer's entry there: stock's output on `x` at `k`, and ours as `dequantize` writes it, both into a
/// buffer of sentinels.
fn dequantizer_output<'a>(
    symbol: &'a str,
    stock: DequantizeRowFn,
    x: &'a [u8],
    k: i64,
    dequantize: impl Fn(&Subject, &mut [f32]) + 'a,
) -> OddLengthOutput<'a> {
    let mut want = vec![SENTINEL; 4096];
    // SAFETY: `x` holds one block or more of every format, `want` room for a whole block (the most a `k` there
    // asks for: one, where the symbol counts in an `int`).
    unsafe { stock(x.as_ptr().cast(), want.as_mut_ptr(), k) };
    let ours = move |s: &Subject| {
        let mut got = vec![SENTINEL; 4096];
        dequantize(s, &mut got);
        float_bytes(&got).to_vec()
    };
    (symbol, Box::new(ours), float_bytes(&want).to_vec())
}

/// Row lengths ggml never passes, once per run through every subject and every vec_dot, dequantizer and
/// quantizer: zero, negative (down to the type's minimum) and shorter than one block. Stock reads nothing and
/// writes `0.0` (a dot product) or nothing (the others); ours must do the same: the same float bits, the output
/// buffer's sentinels untouched.
fn lengths_ggml_never_passes(
    st: &CSymbols,
    subjects: &[Subject],
    mut record: impl FnMut(&str, usize, Outcome, String),
) {
    // Stock reads whole blocks of real bytes should it read; ours reads empty slices that end at an inaccessible
    // page (`guard.rs`), so a read faults and names the case. (k = −2⁶³ + 1 is one block for the symbols that
    // count in an `int`, `BlockCount`: those read real bytes.)
    let (x, y) = (&vec![0x55u8; 512][..], &vec![0x11u8; 2048][..]);
    let floats = &vec![1.5f32; 512][..];
    let mut guards = [(); 3].map(|_| GuardedRegion::new(4096));
    let [guard_x, guard_y, guard_f] = &mut guards;
    let (gx, gy) = (
        &*guard_x.place(&[], Side::After),
        &*guard_y.place(&[], Side::After),
    );
    let g_floats = &*as_floats(guard_f.place(&[], Side::After));
    let mut check_dot = |symbol: &str, want: f32, got: &dyn Fn(&Subject) -> f32, n: i32| {
        for (j, s) in subjects.iter().enumerate() {
            let got = got(s);
            let (o, _) = compare_f32(&[got], &[want]);
            record(
                symbol,
                j,
                o,
                format!("n={n}: ours {} stock {}", show(got), show(want)),
            );
        }
    };
    for n in ODD_N {
        let want = call_vec_dot(st.vec_dot_q2_0_q8_0, n, x, y, 1);
        check_dot(
            "ggml_vec_dot_q2_0_q8_0",
            want,
            &|s| s.vec_dot(n, gx, gy, 1),
            n,
        );
        let want = call_vec_dot(st.vec_dot_q1_0_q8_0, n, x, y, 1);
        check_dot(
            "ggml_vec_dot_q1_0_q8_0",
            want,
            &|s| s.vec_dot_q1_0(n, gx, gy, 1),
            n,
        );
        for f in KFormat::ALL {
            let want = call_vec_dot(st.k_format(f).0, n, x, y, 1);
            check_dot(
                f.vec_dot_symbol(),
                want,
                &|s| s.vec_dot_k(f, n, gx, gy, 1),
                n,
            );
        }
    }
    // The outputs as bytes, sentinels where nothing may be written.
    for k in ODD_K {
        let one_block = BlockCount::Int.of(k, 32) > 0;
        let (x, floats) = if one_block {
            (x, floats)
        } else {
            (gx, g_floats)
        };
        let mut outputs: Vec<OddLengthOutput> = vec![
            dequantizer_output(
                "dequantize_row_q2_0",
                st.dequantize_row_q2_0,
                x,
                k,
                |s: &Subject, got: &mut [f32]| s.dequantize(x, got, k),
            ),
            dequantizer_output(
                "dequantize_row_q1_0",
                st.dequantize_row_q1_0,
                x,
                k,
                |s: &Subject, got: &mut [f32]| s.dequantize_q1_0(x, got, k),
            ),
        ];
        for f in KFormat::ALL {
            outputs.push(dequantizer_output(
                f.dequantize_symbol(),
                st.k_format(f).1,
                x,
                k,
                move |s: &Subject, got: &mut [f32]| s.dequantize_k(f, x, got, k),
            ));
        }
        let mut want = vec![0xaau8; 8192];
        // SAFETY (both quantizers): `floats` holds a whole block of either, `want` room for its output.
        unsafe { (st.quantize_row_q8_0)(floats.as_ptr(), want.as_mut_ptr().cast(), k) };
        outputs.push((
            "quantize_row_q8_0",
            Box::new(|s: &Subject| {
                let mut got = vec![0xaau8; 8192];
                s.quantize(floats, &mut got, k);
                got
            }),
            want,
        ));
        let mut want = vec![0xaau8; 8192];
        unsafe { (st.quantize_row_q8_k)(floats.as_ptr(), want.as_mut_ptr().cast(), k) };
        outputs.push((
            "quantize_row_q8_K",
            Box::new(|s: &Subject| {
                let mut got = vec![0xaau8; 8192];
                s.quantize_k(floats, &mut got, k);
                got
            }),
            want,
        ));
        for (symbol, ours, want) in &outputs {
            for (j, s) in subjects.iter().enumerate() {
                let o = if ours(s) == *want {
                    Outcome::Equal
                } else {
                    Outcome::Differ
                };
                record(
                    symbol,
                    j,
                    o,
                    format!("k={k}: the output differs from stock's"),
                );
            }
        }
    }
}
