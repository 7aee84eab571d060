//! ggml-lowbit: bit-exact, faster drop-ins for ggml's low-bit quantized CPU kernels.
//!
//! The library exports ggml's own C symbols (`ggml_vec_dot_q2_0_q8_0`, `quantize_row_q8_0`, …) with the bits of
//! the stock build they replace; see `docs/` for each module, and `formats` for each format's whole story.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod ab;
pub mod arch;
pub mod dispatch;
pub mod ffi;
pub mod formats;
pub mod fp16;
pub mod gguf;
pub mod hook;
pub mod interpose;
pub mod metal;
pub mod model;
pub mod process;
pub mod stock;
pub mod tiles;
pub mod x86_float;

/// Hash of the sources this library was built from (see `build.rs`).
pub const SOURCE_HASH: &str = env!("GGML_LOWBIT_SOURCE_HASH");

/// Which stock build's float order a result must reproduce. Builds differ in FMA contraction and in the q8_0
/// quantizer (`formats.md` §4), so "the same bits" is always relative to one of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FloatOrder {
    /// The AVX2+FMA+F16C build every modern x86 release install loads ("haswell" and above).
    Haswell,
    /// The baseline x86-64 build: no FMA, generic C everywhere.
    X64,
}

impl FloatOrder {
    pub const ALL: [FloatOrder; 2] = [FloatOrder::Haswell, FloatOrder::X64];

    pub fn name(self) -> &'static str {
        match self {
            FloatOrder::Haswell => "haswell",
            FloatOrder::X64 => "x64",
        }
    }

    pub fn parse(s: &str) -> Option<FloatOrder> {
        match s {
            "haswell" => Some(FloatOrder::Haswell),
            "x64" => Some(FloatOrder::X64),
            _ => None,
        }
    }
}
