//! The one dispatcher: which instruction set and which stock float order every export uses, decided once.
//!
//! - Instruction set: the best this CPU has (`Avx512` needs F/BW/VL/VNNI/VBMI and GFNI plus AVX2/FMA/F16C, `Avx2` needs
//!   AVX2/FMA/F16C), capped by `GGML_LOWBIT_ISA=scalar|avx2|avx512` (a cap never raises it past the CPU).
//! - Float order: `GGML_LOWBIT_MATCH=haswell|x64` if set; else, in front of a stock ggml, what a probe of the
//!   stock symbols shows (`interpose.rs`); else the build a release llama.cpp would load on this CPU
//!   (AVX2+FMA+F16C → haswell, else x64).
//! - Kernel forms (AVX-512 only): where a format has two kernels of the same bits, which one runs is chosen per
//!   kind of CPU by one table, `FORMS_BY_CPU` (grid gathers or lookups, masked loads or moves, scale gathers or
//!   permutes, nibble tables or tiles); `GGML_LOWBIT_FORMS=name=0|1,…` forces entries for measurement.
//!
//! An unknown value in any of these variables is a configuration error: the library says so on stderr and aborts
//! rather than return bits from a build the user did not ask for.

use std::sync::OnceLock;

use crate::formats::iq::{self, IqBlock};
use crate::formats::iq2_s::BlockIQ2S;
use crate::formats::iq2_xs::BlockIQ2XS;
use crate::formats::iq2_xxs::BlockIQ2XXS;
use crate::formats::iq3_s::BlockIQ3S;
use crate::formats::iq3_xxs::BlockIQ3XXS;
use crate::formats::pq2_0::{self, BlockPQ2_0};
use crate::formats::ptq1_0::{self, BlockPTQ1_0};
use crate::formats::q1_0::{self, BlockQ1_0};
use crate::formats::q2_0::{self, BlockQ2_0};
use crate::formats::q8_0::{self, BlockQ8_0};
use crate::formats::q8_k::{self, BlockQ8K};
use crate::formats::tq1_0::{self, BlockTQ1_0};
use crate::formats::tq2_0::{self, BlockTQ2_0};
use crate::formats::{RandomActivation, RawBlock};
use crate::tiles::{mul_mat_by_pairs, Emit, Rows};
use crate::FloatOrder;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    Scalar,
    Avx2,
    Avx512,
}

impl Isa {
    pub const ALL: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Avx512];

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    pub fn parse(s: &str) -> Option<Isa> {
        Isa::ALL.into_iter().find(|i| i.name() == s)
    }
}

/// The best instruction set this CPU supports, detected once.
pub fn detected_isa() -> Isa {
    static DETECTED: OnceLock<Isa> = OnceLock::new();
    *DETECTED.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let avx2 = has!("avx2") && has!("fma") && has!("f16c");
            let avx512 = avx2
                && has!("avx512f")
                && has!("avx512bw")
                && has!("avx512vl")
                && has!("avx512vnni")
                && has!("avx512vbmi")
                && has!("gfni")
                && has!("bmi2");
            if avx512 {
                return Isa::Avx512;
            }
            if avx2 {
                return Isa::Avx2;
            }
        }
        Isa::Scalar
    })
}

/// The stock build a release llama.cpp loads on this CPU.
pub fn default_order() -> FloatOrder {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx2") && has!("fma") && has!("f16c") {
            return FloatOrder::Haswell;
        }
    }
    FloatOrder::X64
}

/// Which stock Q2_0 kernel a table's Q2_0 kernels reproduce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Q2Chain {
    /// The generic C of the table's float order (every ggml before 0.27.0, and every x64 build).
    GenericC,
    /// ggml ≥ 0.27.0's own AVX2 kernel (`q2_0::vec_dot_q2_0_q8_0_avx2_model`).
    GgmlAvx2,
    /// The generic C compiled without contraction (the x64 order's Q2_0) in a table of the haswell order: a
    /// ggml whose CPU backend was built for AVX2 while its Q2_0 loop was not contracted into FMAs
    /// (libggml-python 0.20.2, llama-cpp-py-sync up to b11548).
    GenericCUnfused,
}

/// How a stock `quantize_row_q8_0` narrows its scale to f16: the two give the same half for every number and
/// differ for a NaN (`q8_0::f16c_nan_scale`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Q8Scale {
    /// ggml's software routine: a NaN becomes `sign | 0x7E00` (every ggml before 0.27.0, every x64 build).
    Software,
    /// F16C's `vcvtps2ph`, which keeps the NaN's top payload bits (ggml ≥ 0.27.0's AVX path).
    F16c,
}

/// The kernels for one (instruction set, float order) pair. The function pointers are safe to call: a table is
/// only built for an instruction set the CPU has, and each entry checks slice lengths.
#[derive(Clone, Copy)]
pub struct Kernels {
    pub isa: Isa,
    pub order: FloatOrder,
    /// The per-CPU forms of the AVX-512 kernels in this table (the default, every choice off, on other
    /// instruction sets).
    pub choices: KernelChoices,
    /// The order of this table's Q2_0 kernels (the build's generic C, or ggml ≥ 0.27.0's own AVX2 kernel).
    pub q2_0_chain: Q2Chain,
    /// How this table's `quantize_row_q8_0` narrows a NaN scale.
    pub q8_0_scale: Q8Scale,
    vec_dot_q2_0_q8_0: unsafe fn(&[BlockQ2_0], &[BlockQ8_0]) -> f32,
    quantize_row_q8_0: unsafe fn(&[f32], &mut [BlockQ8_0]),
    dequantize_row_q2_0: unsafe fn(&[BlockQ2_0], &mut [f32]),
    vec_dot_pq2_0_q8_0: unsafe fn(&[BlockPQ2_0], &[BlockQ8_0]) -> f32,
    vec_dot_ptq1_0_q8_0: unsafe fn(&[BlockPTQ1_0], &[BlockQ8_0]) -> f32,
    /// Tile kernels for the fork formats where the instruction set has them; `None`: one vec_dot per pair.
    mul_mat_pq2_0_q8_0: Option<ForkMulMat<BlockPQ2_0>>,
    mul_mat_ptq1_0_q8_0: Option<ForkMulMat<BlockPTQ1_0>>,
    mul_mat_q2_0_q8_0: unsafe fn(Rows<'_, BlockQ2_0>, Rows<'_, BlockQ8_0>, Emit<'_>),
    vec_dot_q1_0_q8_0: unsafe fn(&[BlockQ1_0], &[BlockQ8_0]) -> f32,
    mul_mat_q1_0_q8_0: unsafe fn(Rows<'_, BlockQ1_0>, Rows<'_, BlockQ8_0>, Emit<'_>),
    vec_dot_tq2_0_q8_k: unsafe fn(&[BlockTQ2_0], &[BlockQ8K]) -> f32,
    /// The TQ2_0 tile kernel where the instruction set has one; `None`: one vec_dot per pair.
    mul_mat_tq2_0_q8_k: Option<TileMulMat<BlockTQ2_0, BlockQ8K>>,
    vec_dot_tq1_0_q8_k: unsafe fn(&[BlockTQ1_0], &[BlockQ8K]) -> f32,
    /// The TQ1_0 tile kernel where the instruction set has one; `None`: one vec_dot per pair.
    mul_mat_tq1_0_q8_k: Option<TileMulMat<BlockTQ1_0, BlockQ8K>>,
    vec_dot_iq2_xxs_q8_k: IqDot<BlockIQ2XXS>,
    vec_dot_iq2_xs_q8_k: IqDot<BlockIQ2XS>,
    vec_dot_iq2_s_q8_k: IqDot<BlockIQ2S>,
    vec_dot_iq3_xxs_q8_k: IqDot<BlockIQ3XXS>,
    vec_dot_iq3_s_q8_k: IqDot<BlockIQ3S>,
    quantize_row_q8_k: unsafe fn(&[f32], &mut [BlockQ8K]),
}

/// A tile kernel (`tiles.rs`): weight rows of `W` against activation columns of `A`.
pub type TileMulMat<W, A> = unsafe fn(Rows<'_, W>, Rows<'_, A>, Emit<'_>);

/// A vec_dot kernel on whole rows, as a `Kernels` table holds it; unsafe only for its length contract (`y`
/// holds `Y_PER_BLOCK` activation blocks per weight block of `x`).
pub type RowDot<B, Y> = unsafe fn(&[B], &[Y]) -> f32;

/// A weight format with a vec_dot entry in `Kernels`: its activation blocks, its shapes and the entry.
pub trait VecDotEntry: RawBlock {
    /// The activation block (q8_0 or q8_K).
    type Y: RandomActivation;
    /// Weights per block.
    const QK: usize;
    /// Activation blocks per weight block.
    const Y_PER_BLOCK: usize;
    /// Where the block's f16 scale `d` sits, in bytes from its start.
    const SCALE_AT: usize;
    fn vec_dot_entry(k: &Kernels) -> RowDot<Self, Self::Y>;
}

macro_rules! vec_dot_entry {
    (@impl $block:ty, $qk:expr, $y:ty, $y_qk:expr, $field:ident) => {
        impl VecDotEntry for $block {
            type Y = $y;
            const QK: usize = $qk;
            const Y_PER_BLOCK: usize = $qk / $y_qk;
            const SCALE_AT: usize = std::mem::offset_of!($block, d);
            fn vec_dot_entry(k: &Kernels) -> RowDot<Self, $y> {
                k.$field
            }
        }
    };
    (q8_0: $block:ty, $qk:expr, $field:ident) => {
        vec_dot_entry!(@impl $block, $qk, BlockQ8_0, q8_0::QK8_0, $field);
    };
    (q8_K: $block:ty, $field:ident) => {
        vec_dot_entry!(@impl $block, q8_k::QK_K, BlockQ8K, q8_k::QK_K, $field);
    };
}

vec_dot_entry!(q8_0: BlockQ2_0, q2_0::QK2_0, vec_dot_q2_0_q8_0);
vec_dot_entry!(q8_0: BlockQ1_0, q1_0::QK1_0, vec_dot_q1_0_q8_0);
vec_dot_entry!(q8_0: BlockPQ2_0, pq2_0::QK_PQ2_0, vec_dot_pq2_0_q8_0);
vec_dot_entry!(q8_0: BlockPTQ1_0, ptq1_0::QK_PTQ1_0, vec_dot_ptq1_0_q8_0);
vec_dot_entry!(q8_K: BlockTQ2_0, vec_dot_tq2_0_q8_k);
vec_dot_entry!(q8_K: BlockTQ1_0, vec_dot_tq1_0_q8_k);
vec_dot_entry!(q8_K: BlockIQ2XXS, vec_dot_iq2_xxs_q8_k);
vec_dot_entry!(q8_K: BlockIQ2XS, vec_dot_iq2_xs_q8_k);
vec_dot_entry!(q8_K: BlockIQ2S, vec_dot_iq2_s_q8_k);
vec_dot_entry!(q8_K: BlockIQ3XXS, vec_dot_iq3_xxs_q8_k);
vec_dot_entry!(q8_K: BlockIQ3S, vec_dot_iq3_s_q8_k);

/// Whether the AVX-512 TQ1_0 kernel measured faster than stock haswell's AVX2 one (1.10–1.13×,
/// `docs/tq1_0.md`).
const TQ1_0_AVX512_BEATS_HASWELL: bool = true;

/// The SIMD decoders an IQ block type needs for its kernels: `avx512::IqDecode` and `avx2::IqChunkDecode` on
/// x86-64, nothing elsewhere (only the scalar models exist there).
#[cfg(target_arch = "x86_64")]
pub trait IqKernelDecode:
    crate::arch::x86::avx512::IqDecode + crate::arch::x86::avx2::IqChunkDecode
{
}
#[cfg(target_arch = "x86_64")]
impl<T: crate::arch::x86::avx512::IqDecode + crate::arch::x86::avx2::IqChunkDecode> IqKernelDecode
    for T
{
}
#[cfg(not(target_arch = "x86_64"))]
pub trait IqKernelDecode {}
#[cfg(not(target_arch = "x86_64"))]
impl<T> IqKernelDecode for T {}

/// A fork format's tile kernel in a `Kernels` table.
type ForkMulMat<B> = unsafe fn(Rows<'_, B>, Rows<'_, BlockQ8_0>, Emit<'_>);

/// One IQ format's vec_dot entry in a `Kernels` table.
type IqDot<B> = unsafe fn(&[B], &[BlockQ8K]) -> f32;

/// The IQ block types, each with its entry in a `Kernels` table and whether its AVX-512 kernel measured faster
/// than stock's haswell kernel (`docs/PERFORMANCE.md`); the library passes a format to stock where not.
pub trait IqFormat: IqBlock + IqKernelDecode + VecDotEntry<Y = BlockQ8K> {
    const AVX512_BEATS_STOCK: bool;
    fn entry(k: &Kernels) -> IqDot<Self>;
}

macro_rules! iq_format {
    ($block:ty, $field:ident, $beats:expr) => {
        impl IqFormat for $block {
            const AVX512_BEATS_STOCK: bool = $beats;
            fn entry(k: &Kernels) -> IqDot<Self> {
                k.$field
            }
        }
    };
}
iq_format!(BlockIQ2XXS, vec_dot_iq2_xxs_q8_k, true);
iq_format!(BlockIQ2XS, vec_dot_iq2_xs_q8_k, true);
// 0.96–1.05× of stock on Zen 4 without the x prefetch; 1.10–1.55× (most runs 1.47–1.55×) on the Intel Xeon
// with it (2026-12-01, `docs/PERFORMANCE.md`).
iq_format!(BlockIQ2S, vec_dot_iq2_s_q8_k, true);
iq_format!(BlockIQ3XXS, vec_dot_iq3_xxs_q8_k, true);
iq_format!(BlockIQ3S, vec_dot_iq3_s_q8_k, true);

/// The kinds of CPU the kernel forms are chosen for (`FORMS_BY_CPU`). Every form of every choice gives the same
/// bits; the table only says which is fastest where it was measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuClass {
    /// Intel with fast gathers: any model outside `gathers_slowed_by_gds` (Sapphire and Emerald Rapids, every
    /// CPU with AVX-512 FP16). A gather of eight 8-byte entries costs a few cycles of load ports, while the
    /// permute alternatives run out of Intel's one shuffle port.
    IntelFastGathers,
    /// Intel models whose Gather Data Sampling microcode makes every gather several times slower (Ice Lake, Tiger
    /// Lake, Rocket Lake without AVX-512 FP16; 24 cycles per eight-entry gather on an Ice Lake Xeon).
    IntelSlowGathers,
    /// AMD and every other vendor: Zen 4 microcodes gathers, Zen 5 took 7.6 cycles per eight-entry gather, and
    /// their vector loops are bound by loads rather than by a shuffle port.
    Other,
}

impl CpuClass {
    /// The class of a CPU from its vendor, family, model and whether it has AVX-512 FP16.
    pub fn of(intel: bool, family: u32, model: u32, avx512_fp16: bool) -> CpuClass {
        match (intel, gathers_slowed_by_gds(family, model, avx512_fp16)) {
            (true, false) => CpuClass::IntelFastGathers,
            (true, true) => CpuClass::IntelSlowGathers,
            (false, _) => CpuClass::Other,
        }
    }

    /// This CPU's class; read once.
    pub fn this_cpu() -> CpuClass {
        static CLASS: OnceLock<CpuClass> = OnceLock::new();
        *CLASS.get_or_init(|| {
            CpuClass::of(cpu_is_intel(), cpu_family(), cpu_model(), has_avx512_fp16())
        })
    }
}

/// The AVX-512 kernel forms per kind of CPU, each measured against the other form on that kind (one thread,
/// 4096×4096 and 12288×4096 unless said, alternating rounds; the figures are in the format pages of `docs/`):
///
/// | choice | Intel, fast gathers | Intel, slow gathers | AMD, other |
/// |---|---|---|---|
/// | IQ2_XS/IQ2_S grid entries (`iq_gather`) | gathers | lookups | lookups |
/// | IQ2_S lookups without gathers (`iq2_s_permutes`) | permutes | permutes | permutes |
/// | Q1_0 tile quants (`q1_masked_loads`) | masked loads | masked loads | masked moves |
/// | q8_0 scales of Q2_0/PQ2_0/PTQ1_0 `vec_dot` (`q8_scale_gather`) | gathers | permutes | permutes |
/// | Q1_0 decode, one column (`q1_lookups`) | nibble tables | tiles | tiles |
///
/// - Grid gathers: IQ2_XS 1.63–1.81× → 1.94–2.04× stock haswell, IQ2_S 1.49–1.65× → 1.80–2.02× on a Xeon with
///   fast gathers (2026-12-04); 0.62–0.91× against 1.19–1.60× for the permutes on the Ice Lake Xeon, 0.89–1.17×
///   against 1.28–2.76× on Zen 5 (2026-12-02). IQ2_XXS never gathers (its two-block lookups ran 1.84–2.10× stock
///   against 1.59–1.85× gathered).
/// - IQ2_S permutes, two blocks at a time: 1.03–1.28× faster than the per-entry loads on the Ice Lake Xeon,
///   1.74–1.87× stock against 1.13–1.38× on Zen 4 (2026-12-03).
/// - Q1_0 masked loads: a masked load needs only a load port, the zero-masking move one of the two 512-bit
///   vector ports the tile loop is short of (Ice Lake Xeon decode tiles 1.28–1.86× → 1.37–2.01× stock,
///   2026-12-02); Zen 4 ran both alike and Zen 5's loop is bound by loads.
/// - q8_0 scale gathers: Q2_0 8.73–8.92× → 10.14–11.14× stock haswell, PQ2_0 9.07–9.70× → 10.30–10.82×, PTQ1_0
///   9.41–9.68× → 10.43–11.10× on a Xeon with AVX-512 FP16 (2026-12-04).
/// - Q1_0 nibble tables: sixteen rows a step, their sign bits gathered (`avx512/q1_0.rs`,
///   `mul_mat_q1_0_lookups`); where gathers are fast.
///
/// `GGML_LOWBIT_FORMS` overrides any entry for measurement (`FormOverrides`).
pub const FORMS_BY_CPU: [(CpuClass, KernelChoices); 3] = [
    (
        CpuClass::IntelFastGathers,
        KernelChoices {
            iq_gather: true,
            q1_masked_loads: true,
            iq2_s_permutes: true,
            q8_scale_gather: true,
            q1_lookups: true,
        },
    ),
    (
        CpuClass::IntelSlowGathers,
        KernelChoices {
            iq_gather: false,
            q1_masked_loads: true,
            iq2_s_permutes: true,
            q8_scale_gather: false,
            q1_lookups: false,
        },
    ),
    (
        CpuClass::Other,
        KernelChoices {
            iq_gather: false,
            q1_masked_loads: false,
            iq2_s_permutes: true,
            q8_scale_gather: false,
            q1_lookups: false,
        },
    ),
];

/// The names `GGML_LOWBIT_FORMS` takes: the five `KernelChoices`, `chunks`, the whole-product hook's
/// dynamic row chunks (`hook.rs`; `chunks=0` gives each thread a fixed share), and `q2-vnni-tiles`, the AVX-512
/// VNNI tiles for Q2_0 in ggml ≥ 0.27.0's own order (off until they have run on a CPU with AVX-512 VNNI).
pub const FORM_NAMES: [&str; 7] = [
    "iq-gather",
    "iq2s-permutes",
    "q1-masked-loads",
    "scale-gather",
    "q1-lookups",
    "chunks",
    "q2-vnni-tiles",
];

/// Variables that once chose single forms; setting one aborts with a pointer to `GGML_LOWBIT_FORMS`, so that a
/// measurement never runs a form the user did not ask for.
const SINGLE_FORM_VARIABLES: [(&str, &str); 6] = [
    ("GGML_LOWBIT_IQ_GATHER", "iq-gather"),
    ("GGML_LOWBIT_IQ2S_PERMUTES", "iq2s-permutes"),
    ("GGML_LOWBIT_Q1_MASKED_LOADS", "q1-masked-loads"),
    ("GGML_LOWBIT_SCALE_GATHER", "scale-gather"),
    ("GGML_LOWBIT_Q1_LOOKUPS", "q1-lookups"),
    ("GGML_LOWBIT_CHUNKS", "chunks"),
];

/// Forms forced by `GGML_LOWBIT_FORMS`, a comma-separated list of `name=0|1` (names from `FORM_NAMES`), for
/// measuring one form against another; unset or empty forces nothing. Anything else (an unknown name, a value
/// other than 0 or 1, a name given twice, an entry without `=`) is a configuration error and aborts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FormOverrides {
    values: [Option<bool>; FORM_NAMES.len()],
}

impl FormOverrides {
    /// The overrides a `GGML_LOWBIT_FORMS` value asks for, or the message that says what is wrong with it.
    pub fn parse(spec: &str) -> Result<FormOverrides, String> {
        let mut out = FormOverrides::default();
        if spec.is_empty() {
            return Ok(out);
        }
        for entry in spec.split(',') {
            let Some((name, value)) = entry.split_once('=') else {
                return Err(format!("{entry:?} is not name=0|1"));
            };
            let Some(slot) = FORM_NAMES.iter().position(|&n| n == name) else {
                return Err(format!("{name:?} is not one of {}", FORM_NAMES.join(", ")));
            };
            let v = match value {
                "0" => false,
                "1" => true,
                _ => return Err(format!("{name}={value:?} is not one of 0, 1")),
            };
            if out.values[slot].replace(v).is_some() {
                return Err(format!("{name} is given twice"));
            }
        }
        Ok(out)
    }

    /// The overrides of this process's environment, read once; a bad value, or one of the single-form
    /// variables, aborts with a message.
    pub fn from_env() -> &'static FormOverrides {
        static OVERRIDES: OnceLock<FormOverrides> = OnceLock::new();
        OVERRIDES.get_or_init(|| {
            for (var, name) in SINGLE_FORM_VARIABLES {
                if std::env::var_os(var).is_some() {
                    crate::process::fatal(&format!(
                        "{var} is not a setting: kernel forms are forced by GGML_LOWBIT_FORMS={name}=0|1"
                    ));
                }
            }
            let spec = std::env::var("GGML_LOWBIT_FORMS").unwrap_or_default();
            FormOverrides::parse(&spec)
                .unwrap_or_else(|e| crate::process::fatal(&format!("GGML_LOWBIT_FORMS={spec:?}: {e}")))
        })
    }

    /// The value forced for `name` (one of `FORM_NAMES`), if any.
    pub fn get(&self, name: &str) -> Option<bool> {
        let slot = FORM_NAMES.iter().position(|&n| n == name)?;
        self.values[slot]
    }

    /// `choices` with the forced entries replaced.
    pub fn apply(&self, choices: KernelChoices) -> KernelChoices {
        let pick = |name: &str, default: bool| self.get(name).unwrap_or(default);
        KernelChoices {
            iq_gather: pick("iq-gather", choices.iq_gather),
            iq2_s_permutes: pick("iq2s-permutes", choices.iq2_s_permutes),
            q1_masked_loads: pick("q1-masked-loads", choices.q1_masked_loads),
            q8_scale_gather: pick("scale-gather", choices.q8_scale_gather),
            q1_lookups: pick("q1-lookups", choices.q1_lookups),
        }
    }
}

/// The kernel forms chosen per CPU, each giving the same bits (`Kernels::with_choices`). The default, every
/// choice off, is what the tables without AVX-512 hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelChoices {
    /// IQ2_XS and IQ2_S grid entries by gathers.
    pub iq_gather: bool,
    /// Q1_0 tile quants by zero-masked loads (the row's sign bits as the mask) instead of a zero-masking move.
    pub q1_masked_loads: bool,
    /// IQ2_S grid codes by permutes, two blocks at a time, where there are no gathers (else one load per entry).
    pub iq2_s_permutes: bool,
    /// The q8_0 scales of the Q2_0, PQ2_0 and PTQ1_0 `vec_dot` kernels by one gather instead of four word
    /// permutes.
    pub q8_scale_gather: bool,
    /// Q1_0 products with one activation column by nibble tables instead of the tiles.
    pub q1_lookups: bool,
}

impl KernelChoices {
    /// The forms `FORMS_BY_CPU` gives a CPU of `class`.
    pub fn for_cpu(class: CpuClass) -> KernelChoices {
        FORMS_BY_CPU
            .iter()
            .find(|(c, _)| *c == class)
            .map(|&(_, choices)| choices)
            .unwrap_or_default()
    }

    /// What this CPU gets, with `GGML_LOWBIT_FORMS` applied.
    pub fn for_this_cpu() -> KernelChoices {
        FormOverrides::from_env().apply(KernelChoices::for_cpu(CpuClass::this_cpu()))
    }

    /// The forms in words, for the log and the speed report.
    pub fn describe(&self) -> String {
        format!(
            "IQ2_XS and IQ2_S grid entries by {}, Q1_0 tile quants by {}, q8_0 scales by {}, Q1_0 decode by {}",
            match (self.iq_gather, self.iq2_s_permutes) {
                (true, _) => "gathers",
                (false, true) => "lookups (IQ2_S's by permutes)",
                (false, false) => "lookups (IQ2_S's by loads)",
            },
            if self.q1_masked_loads {
                "masked loads"
            } else {
                "masked moves"
            },
            if self.q8_scale_gather {
                "gathers"
            } else {
                "permutes"
            },
            if self.q1_lookups {
                "nibble tables"
            } else {
                "tiles"
            }
        )
    }
}

/// Whether the AVX-512 TQ2_0 kernel measured faster than stock haswell's on this kind of CPU: Intel, or AMD
/// family 26 (Zen 5) and later (`Kernels::serves_tq2_0_over_stock`).
fn tq2_0_avx512_beats_haswell() -> bool {
    cpu_is_intel() || cpu_family() >= 26
}

/// Whether an Intel CPU of this family and model is one that Gather Data Sampling ("Downfall", CVE-2022-40982)
/// affects: Intel's microcode mitigation for it makes every gather instruction several times slower (24 cycles
/// per eight-entry `vpgatherdq` measured on an Ice Lake Xeon, model 0x6A, 2026-12-02). Only the affected models
/// with the AVX-512 VBMI and VNNI these kernels need are listed (Ice Lake, Tiger Lake, Rocket Lake); the older
/// affected ones (Skylake through Comet Lake) never reach them. The model is the test, not the kernel's report
/// (`/sys/.../gather_data_sampling` read "Not affected" inside the Ice Lake VM whose gathers were slow), unless
/// the CPU has AVX-512 FP16: no affected model has it (Sapphire Rapids, the first with it, is not affected), so
/// such a CPU's model number is a hypervisor's choice (a 2-core VM of 2026-12-04 reported Rocket Lake's 0xA7
/// with AVX-512 FP16 and AMX, and one eight-entry gather took 4.7 cycles).
fn gathers_slowed_by_gds(family: u32, model: u32, avx512_fp16: bool) -> bool {
    const GDS_MODELS: [u32; 6] = [
        0x6A, 0x6C, 0x7E, // Ice Lake server (SP, D) and client
        0x8C, 0x8D, // Tiger Lake
        0xA7, // Rocket Lake
    ];
    family == 6 && GDS_MODELS.contains(&model) && !avx512_fp16
}

/// Whether the CPU has AVX-512 FP16 (Sapphire Rapids and later Intel server cores).
fn has_avx512_fp16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512fp16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// CPUID leaf 1's `eax` (family, model, stepping); read once.
fn cpuid_signature() -> u32 {
    static SIGNATURE: OnceLock<u32> = OnceLock::new();
    *SIGNATURE.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: CPUID leaf 1 exists on every x86-64 CPU.
            #[allow(unused_unsafe)]
            unsafe { std::arch::x86_64::__cpuid(1) }.eax
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            0
        }
    })
}

/// The CPU's family as CPUID reports it (base family, plus the extended family where the base is 15).
pub fn cpu_family() -> u32 {
    family_from_cpuid_eax(cpuid_signature())
}

/// The CPU's model as CPUID reports it (base model, plus the extended model above it in families 6 and 15).
fn cpu_model() -> u32 {
    model_from_cpuid_eax(cpuid_signature())
}

/// The family in CPUID leaf 1's `eax`: bits 8..12, plus bits 20..28 when those are 15.
fn family_from_cpuid_eax(eax: u32) -> u32 {
    let base = (eax >> 8) & 0xf;
    if base == 0xf {
        base + ((eax >> 20) & 0xff)
    } else {
        base
    }
}

/// The model in CPUID leaf 1's `eax`: bits 4..8, with bits 16..20 above them when the base family is 6 or 15.
fn model_from_cpuid_eax(eax: u32) -> u32 {
    let base = (eax >> 4) & 0xf;
    match (eax >> 8) & 0xf {
        6 | 0xf => base | ((eax >> 16) & 0xf) << 4,
        _ => base,
    }
}

/// Whether the CPU's vendor string is `GenuineIntel`; read once (CPUID traps to the hypervisor in a VM).
pub fn cpu_is_intel() -> bool {
    static INTEL: OnceLock<bool> = OnceLock::new();
    *INTEL.get_or_init(read_cpu_is_intel)
}

fn read_cpu_is_intel() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: CPUID leaf 0 exists on every x86-64 CPU.
        #[allow(unused_unsafe)]
        let id = unsafe { std::arch::x86_64::__cpuid(0) };
        let mut vendor = [0u8; 12];
        vendor[..4].copy_from_slice(&id.ebx.to_le_bytes());
        vendor[4..8].copy_from_slice(&id.edx.to_le_bytes());
        vendor[8..].copy_from_slice(&id.ecx.to_le_bytes());
        &vendor == b"GenuineIntel"
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The AVX-512 IQ kernel of the order `haswell` says, with grid gathers or permute lookups.
#[cfg(target_arch = "x86_64")]
fn avx512_iq<B: IqFormat>(haswell: bool, gather: bool) -> IqDot<B> {
    use crate::arch::x86::avx512;
    match (haswell, gather) {
        (true, true) => avx512::vec_dot_iq_q8_k::<B, true, true>,
        (true, false) => avx512::vec_dot_iq_q8_k::<B, true, false>,
        (false, true) => avx512::vec_dot_iq_q8_k::<B, false, true>,
        (false, false) => avx512::vec_dot_iq_q8_k::<B, false, false>,
    }
}

/// The AVX-512 kernel of an IQ2 format that decodes two blocks at once (IQ2_XXS, IQ2_XS, IQ2_S): with gathers as
/// `avx512_iq`, else its lookups two blocks at a time (`vec_dot_iq_pairs_q8_k`).
#[cfg(target_arch = "x86_64")]
fn avx512_iq_pairs<B: IqFormat + crate::arch::x86::avx512::IqPairDecode>(
    haswell: bool,
    gather: bool,
) -> IqDot<B> {
    use crate::arch::x86::avx512;
    match (haswell, gather) {
        (_, true) => avx512_iq(haswell, true),
        (true, false) => avx512::vec_dot_iq_pairs_q8_k::<B, true>,
        (false, false) => avx512::vec_dot_iq_pairs_q8_k::<B, false>,
    }
}

/// The AVX2 IQ kernel of the order `haswell` says.
#[cfg(target_arch = "x86_64")]
fn avx2_iq<B: IqFormat>(haswell: bool) -> IqDot<B> {
    use crate::arch::x86::avx2;
    if haswell {
        avx2::vec_dot_iq_q8_k::<B, true>
    } else {
        avx2::vec_dot_iq_q8_k::<B, false>
    }
}

/// The scalar IQ model of the order `haswell` says.
fn iq_model<B: IqBlock>(haswell: bool) -> IqDot<B> {
    if haswell {
        iq::vec_dot_iq_q8_k_haswell_model::<B>
    } else {
        iq::vec_dot_iq_q8_k_x64_model::<B>
    }
}

/// Stock's NaN bits. A SIMD kernel keeps stock's float chain, so its result is a NaN exactly where stock's is;
/// but which NaN comes out depends on the operand order of every instruction on the way (`x86_float`), which a
/// SIMD kernel does not follow (its lanes run another association, and the compiler may swap operands). The
/// scalar models follow the stock binaries' operand order, so a NaN result is computed again by the model: one
/// compare per result, and the model only on NaN inputs.
impl Kernels {
    /// The table of the scalar models in this table's stock order (its Q2_0 chain too).
    fn models(&self) -> Kernels {
        Kernels::with_choices(Isa::Scalar, self.order, self.choices)
            .with_q2_0_chain(self.q2_0_chain)
    }

    /// `v`, a kernel's result on the row pair `(x, y)`, or stock's NaN where `v` is a NaN.
    #[inline(always)]
    pub fn stock_nan<B: VecDotEntry>(&self, v: f32, x: &[B], y: &[B::Y]) -> f32 {
        if v.is_nan() {
            self.model_row(x, y)
        } else {
            v
        }
    }

    /// The scalar model's result on `(x, y)` in this table's stock order.
    #[cold]
    #[inline(never)]
    pub fn model_row<B: VecDotEntry>(&self, x: &[B], y: &[B::Y]) -> f32 {
        let y = &y[..x.len() * B::Y_PER_BLOCK];
        // SAFETY: a scalar model runs on every CPU, and `y` was just cut to the length it reads (a panic if the
        // caller's row was shorter).
        unsafe { (B::vec_dot_entry(&self.models()))(x, y) }
    }

    /// `emit` for a whole product of `x` by `y`, each NaN element replaced by stock's (`stock_nan`).
    fn stock_nan_emit<'e, W: VecDotEntry>(
        &'e self,
        x: Rows<'e, W>,
        y: Rows<'e, W::Y>,
        emit: Emit<'e>,
    ) -> impl FnMut(usize, usize, f32) + 'e {
        move |r, c, v| emit(r, c, self.stock_nan(v, x.row(r), y.row(c)))
    }
}

impl Kernels {
    /// `" (…)"` naming this table's per-CPU forms (`KernelChoices::describe`), for the log line and the speed
    /// report; empty below AVX-512, where there are none.
    pub fn forms_note(&self) -> String {
        if self.isa == Isa::Avx512 {
            format!(" ({})", self.choices.describe())
        } else {
            String::new()
        }
    }

    /// The table for `order` on the best of `isa` and what the CPU has.
    pub fn new(isa: Isa, order: FloatOrder) -> Kernels {
        Kernels::with_choices(isa, order, KernelChoices::for_this_cpu())
    }

    /// Every table the library may pick at `isa` on some CPU: at AVX-512 one with the gathers (IQ2 grids, q8_0
    /// scales, the Q1_0 decode's nibble tables) and the Q1_0 tiles' masked loads, one with every CPU-dependent
    /// choice off and one with only IQ2_S's permutes (which the gathers would bypass), so each form of each
    /// choice runs; elsewhere the one table. Tests and `bits` run all of them, since each must give stock's bits on every CPU.
    pub fn every_variant(isa: Isa, order: FloatOrder) -> Vec<Kernels> {
        let choices = |gathers, q1_masked_loads, iq2_s_permutes| KernelChoices {
            iq_gather: gathers,
            q1_masked_loads,
            iq2_s_permutes,
            q8_scale_gather: gathers,
            q1_lookups: gathers,
        };
        let all: &[KernelChoices] = if isa.min(detected_isa()) == Isa::Avx512 {
            &[
                choices(true, true, false),
                choices(false, false, false),
                choices(false, false, true),
            ]
        } else {
            &[choices(false, false, false)]
        };
        all.iter()
            .map(|&c| Kernels::with_choices(isa, order, c))
            .collect()
    }

    /// `new` with the CPU-dependent kernel forms given by `choices` instead of by the CPU (every form gives the
    /// same bits; the tests run them all).
    pub fn with_choices(isa: Isa, order: FloatOrder, choices: KernelChoices) -> Kernels {
        let isa = isa.min(detected_isa());
        #[cfg(target_arch = "x86_64")]
        {
            use crate::arch::x86::{avx2, avx512};
            let haswell = order == FloatOrder::Haswell;
            match isa {
                Isa::Avx512 => {
                    return Kernels {
                        isa,
                        order,
                        choices,
                        q2_0_chain: Q2Chain::GenericC,
                        q8_0_scale: Q8Scale::Software,
                        vec_dot_q2_0_q8_0: match (haswell, choices.q8_scale_gather) {
                            (true, true) => avx512::vec_dot_q2_0_q8_0::<true, true>,
                            (true, false) => avx512::vec_dot_q2_0_q8_0::<true, false>,
                            (false, true) => avx512::vec_dot_q2_0_q8_0::<false, true>,
                            (false, false) => avx512::vec_dot_q2_0_q8_0::<false, false>,
                        },
                        quantize_row_q8_0: if haswell {
                            avx512::quantize_row_q8_0::<true>
                        } else {
                            avx512::quantize_row_q8_0::<false>
                        },
                        dequantize_row_q2_0: avx512::dequantize_row_q2_0,
                        vec_dot_pq2_0_q8_0: match (haswell, choices.q8_scale_gather) {
                            (true, true) => avx512::vec_dot_pq2_0_q8_0::<true, true>,
                            (true, false) => avx512::vec_dot_pq2_0_q8_0::<true, false>,
                            (false, true) => avx512::vec_dot_pq2_0_q8_0::<false, true>,
                            (false, false) => avx512::vec_dot_pq2_0_q8_0::<false, false>,
                        },
                        vec_dot_ptq1_0_q8_0: match (haswell, choices.q8_scale_gather) {
                            (true, true) => avx512::vec_dot_ptq1_0_q8_0::<true, true>,
                            (true, false) => avx512::vec_dot_ptq1_0_q8_0::<true, false>,
                            (false, true) => avx512::vec_dot_ptq1_0_q8_0::<false, true>,
                            (false, false) => avx512::vec_dot_ptq1_0_q8_0::<false, false>,
                        },
                        mul_mat_pq2_0_q8_0: Some(if haswell {
                            avx512::mul_mat_pq2_0_q8_0::<true>
                        } else {
                            avx512::mul_mat_pq2_0_q8_0::<false>
                        }),
                        mul_mat_ptq1_0_q8_0: Some(if haswell {
                            avx512::mul_mat_ptq1_0_q8_0::<true>
                        } else {
                            avx512::mul_mat_ptq1_0_q8_0::<false>
                        }),
                        mul_mat_q2_0_q8_0: if haswell {
                            avx512::mul_mat_q2_0_q8_0::<true>
                        } else {
                            avx512::mul_mat_q2_0_q8_0::<false>
                        },
                        vec_dot_q1_0_q8_0: if haswell {
                            avx512::vec_dot_q1_0_q8_0::<true>
                        } else {
                            avx512::vec_dot_q1_0_q8_0::<false>
                        },
                        mul_mat_q1_0_q8_0: match (
                            haswell,
                            choices.q1_masked_loads,
                            choices.q1_lookups,
                        ) {
                            (true, true, true) => avx512::mul_mat_q1_0_q8_0::<true, true, true>,
                            (true, true, false) => avx512::mul_mat_q1_0_q8_0::<true, true, false>,
                            (true, false, true) => avx512::mul_mat_q1_0_q8_0::<true, false, true>,
                            (true, false, false) => avx512::mul_mat_q1_0_q8_0::<true, false, false>,
                            (false, _, _) => avx512::mul_mat_q1_0_q8_0::<false, false, false>,
                        },
                        vec_dot_tq2_0_q8_k: if haswell {
                            avx512::vec_dot_tq2_0_q8_k::<true>
                        } else {
                            avx512::vec_dot_tq2_0_q8_k::<false>
                        },
                        mul_mat_tq2_0_q8_k: Some(if haswell {
                            avx512::mul_mat_tq2_0_q8_k::<true>
                        } else {
                            avx512::mul_mat_tq2_0_q8_k::<false>
                        }),
                        mul_mat_tq1_0_q8_k: Some(if haswell {
                            avx512::mul_mat_tq1_0_q8_k::<true>
                        } else {
                            avx512::mul_mat_tq1_0_q8_k::<false>
                        }),
                        vec_dot_tq1_0_q8_k: if haswell {
                            avx512::vec_dot_tq1_0_q8_k::<true>
                        } else {
                            avx512::vec_dot_tq1_0_q8_k::<false>
                        },
                        // IQ2_XXS looks its grid up two blocks at a time on every CPU: where gathers are
                        // fast it measured 1.84–2.10× stock haswell against 1.59–1.85× gathered (`iq.md`).
                        vec_dot_iq2_xxs_q8_k: avx512_iq_pairs(haswell, false),
                        vec_dot_iq2_xs_q8_k: avx512_iq_pairs(haswell, choices.iq_gather),
                        vec_dot_iq2_s_q8_k: if choices.iq2_s_permutes {
                            avx512_iq_pairs(haswell, choices.iq_gather)
                        } else {
                            avx512_iq(haswell, choices.iq_gather)
                        },
                        vec_dot_iq3_xxs_q8_k: avx512_iq(haswell, choices.iq_gather),
                        vec_dot_iq3_s_q8_k: avx512_iq(haswell, choices.iq_gather),
                        quantize_row_q8_k: avx512::quantize_row_q8_k,
                    };
                }
                Isa::Avx2 => {
                    return Kernels {
                        isa,
                        order,
                        choices: KernelChoices::default(),
                        q2_0_chain: Q2Chain::GenericC,
                        q8_0_scale: Q8Scale::Software,
                        vec_dot_q2_0_q8_0: if haswell {
                            avx2::vec_dot_q2_0_q8_0::<true>
                        } else {
                            avx2::vec_dot_q2_0_q8_0::<false>
                        },
                        quantize_row_q8_0: if haswell {
                            avx2::quantize_row_q8_0::<true>
                        } else {
                            avx2::quantize_row_q8_0::<false>
                        },
                        dequantize_row_q2_0: avx2::dequantize_row_q2_0,
                        vec_dot_pq2_0_q8_0: if haswell {
                            avx2::vec_dot_pq2_0_q8_0::<true>
                        } else {
                            avx2::vec_dot_pq2_0_q8_0::<false>
                        },
                        vec_dot_ptq1_0_q8_0: if haswell {
                            avx2::vec_dot_ptq1_0_q8_0::<true>
                        } else {
                            avx2::vec_dot_ptq1_0_q8_0::<false>
                        },
                        mul_mat_pq2_0_q8_0: None,
                        mul_mat_ptq1_0_q8_0: None,
                        mul_mat_q2_0_q8_0: if haswell {
                            avx2::mul_mat_q2_0_q8_0::<true>
                        } else {
                            avx2::mul_mat_q2_0_q8_0::<false>
                        },
                        vec_dot_q1_0_q8_0: if haswell {
                            avx2::vec_dot_q1_0_q8_0::<true>
                        } else {
                            avx2::vec_dot_q1_0_q8_0::<false>
                        },
                        mul_mat_q1_0_q8_0: if haswell {
                            avx2_mul_mat_q1_0::<true>
                        } else {
                            avx2_mul_mat_q1_0::<false>
                        },
                        // Against q8_K: stock's haswell kernels are AVX2 already, so these serve the x64
                        // build only (`serves_*_over_stock`); the q8_K quantizer is scalar C in both builds.
                        vec_dot_tq2_0_q8_k: if haswell {
                            avx2::vec_dot_tq2_0_q8_k::<true>
                        } else {
                            avx2::vec_dot_tq2_0_q8_k::<false>
                        },
                        mul_mat_tq2_0_q8_k: None,
                        mul_mat_tq1_0_q8_k: None,
                        vec_dot_tq1_0_q8_k: if haswell {
                            avx2::vec_dot_tq1_0_q8_k::<true>
                        } else {
                            avx2::vec_dot_tq1_0_q8_k::<false>
                        },
                        vec_dot_iq2_xxs_q8_k: avx2_iq(haswell),
                        vec_dot_iq2_xs_q8_k: avx2_iq(haswell),
                        vec_dot_iq2_s_q8_k: avx2_iq(haswell),
                        vec_dot_iq3_xxs_q8_k: avx2_iq(haswell),
                        vec_dot_iq3_s_q8_k: avx2_iq(haswell),
                        quantize_row_q8_k: avx2::quantize_row_q8_k,
                    };
                }
                Isa::Scalar => {}
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = choices;
        Kernels::scalar(order)
    }

    /// The scalar models of `order` (the table without SIMD).
    fn scalar(order: FloatOrder) -> Kernels {
        let haswell = order == FloatOrder::Haswell;
        Kernels {
            isa: Isa::Scalar,
            order,
            choices: KernelChoices::default(),
            q2_0_chain: Q2Chain::GenericC,
            q8_0_scale: Q8Scale::Software,
            vec_dot_q2_0_q8_0: if haswell {
                q2_0::vec_dot_q2_0_q8_0_fma_model
            } else {
                q2_0::vec_dot_q2_0_q8_0_nofma_model
            },
            quantize_row_q8_0: if haswell {
                scalar_quantize_haswell
            } else {
                scalar_quantize_x64
            },
            dequantize_row_q2_0: q2_0::dequantize_row_q2_0_model,
            vec_dot_pq2_0_q8_0: if haswell {
                pq2_0::vec_dot_pq2_0_q8_0_fma_model
            } else {
                pq2_0::vec_dot_pq2_0_q8_0_nofma_model
            },
            vec_dot_ptq1_0_q8_0: if haswell {
                ptq1_0::vec_dot_ptq1_0_q8_0_fma_model
            } else {
                ptq1_0::vec_dot_ptq1_0_q8_0_nofma_model
            },
            mul_mat_pq2_0_q8_0: None,
            mul_mat_ptq1_0_q8_0: None,
            mul_mat_q2_0_q8_0: if haswell {
                scalar_mul_mat_q2_0::<true>
            } else {
                scalar_mul_mat_q2_0::<false>
            },
            vec_dot_q1_0_q8_0: if haswell {
                q1_0::vec_dot_q1_0_q8_0_haswell_model
            } else {
                q1_0::vec_dot_q1_0_q8_0_x64_model
            },
            mul_mat_q1_0_q8_0: if haswell {
                scalar_mul_mat_q1_0::<true>
            } else {
                scalar_mul_mat_q1_0::<false>
            },
            vec_dot_tq2_0_q8_k: if haswell {
                tq2_0::vec_dot_tq2_0_q8_k_haswell_model
            } else {
                tq2_0::vec_dot_tq2_0_q8_k_x64_model
            },
            mul_mat_tq2_0_q8_k: None,
            mul_mat_tq1_0_q8_k: None,
            vec_dot_tq1_0_q8_k: if haswell {
                tq1_0::vec_dot_tq1_0_q8_k_haswell_model
            } else {
                tq1_0::vec_dot_tq1_0_q8_k_x64_model
            },
            vec_dot_iq2_xxs_q8_k: iq_model(haswell),
            vec_dot_iq2_xs_q8_k: iq_model(haswell),
            vec_dot_iq2_s_q8_k: iq_model(haswell),
            vec_dot_iq3_xxs_q8_k: iq_model(haswell),
            vec_dot_iq3_s_q8_k: iq_model(haswell),
            quantize_row_q8_k: q8_k::quantize_row_q8_k_model,
        }
    }

    /// `Σ` over `x.len()` Q2_0 blocks against `2·x.len()` q8_0 blocks.
    pub fn vec_dot_q2_0_q8_0(&self, x: &[BlockQ2_0], y: &[BlockQ8_0]) -> f32 {
        assert!(y.len() >= 2 * x.len(), "q8_0 row shorter than the Q2_0 row");
        // SAFETY: the table only holds kernels for instruction sets this CPU has (`Kernels::new` caps `isa`), and
        // the length contract was just checked.
        self.stock_nan(unsafe { (self.vec_dot_q2_0_q8_0)(x, y) }, x, y)
    }

    /// This table with its Q2_0 kernels (the vec_dot and the tiles) in ggml ≥ 0.27.0's own AVX2 order, for a stock
    /// library whose Q2_0 kernel the probe found in it; the scalar model where the table has no AVX2. The AVX-512
    /// VNNI tiles in that order have not run on a CPU with AVX-512 yet: only `GGML_LOWBIT_FORMS=q2-vnni-tiles=1`
    /// picks them.
    pub fn with_q2_0_in_ggml_avx2_order(self) -> Kernels {
        let vnni_tiles = FormOverrides::from_env()
            .get("q2-vnni-tiles")
            .unwrap_or(false);
        self.with_q2_0_in_ggml_avx2_order_tiles(vnni_tiles)
    }

    /// `with_q2_0_in_ggml_avx2_order` with the AVX-512 VNNI tiles chosen or not (they need an AVX-512 table).
    pub fn with_q2_0_in_ggml_avx2_order_tiles(mut self, vnni_tiles: bool) -> Kernels {
        self.q2_0_chain = Q2Chain::GgmlAvx2;
        #[cfg(target_arch = "x86_64")]
        if self.isa >= Isa::Avx2 {
            use crate::arch::x86::{avx2, avx512};
            self.vec_dot_q2_0_q8_0 = avx2::vec_dot_q2_0_q8_0_avx2_order;
            self.mul_mat_q2_0_q8_0 = if vnni_tiles && self.isa == Isa::Avx512 {
                avx512::mul_mat_q2_0_q8_0_avx2_order
            } else {
                avx2::mul_mat_q2_0_q8_0_avx2_order
            };
            return self;
        }
        let _ = vnni_tiles;
        self.vec_dot_q2_0_q8_0 = q2_0::vec_dot_q2_0_q8_0_avx2_model;
        self.mul_mat_q2_0_q8_0 =
            |x, y, emit| mul_mat_by_pairs(q2_0::vec_dot_q2_0_q8_0_avx2_model, x, y, emit);
        self
    }

    /// This table with its Q2_0 kernels for a stock Q2_0 kernel of `chain` (the probe's finding).
    pub fn with_q2_0_chain(self, chain: Q2Chain) -> Kernels {
        match chain {
            Q2Chain::GenericC => self,
            Q2Chain::GgmlAvx2 => self.with_q2_0_in_ggml_avx2_order(),
            Q2Chain::GenericCUnfused => self.with_q2_0_unfused(),
        }
    }

    /// This table with its Q2_0 kernels (the vec_dot and the tiles) from the x64 order's table at the same
    /// instruction set, for a stock library whose Q2_0 is the generic C without contraction while its quantizer
    /// and other kernels follow the haswell order.
    pub fn with_q2_0_unfused(mut self) -> Kernels {
        let x64 = Kernels::with_choices(self.isa, FloatOrder::X64, self.choices);
        self.vec_dot_q2_0_q8_0 = x64.vec_dot_q2_0_q8_0;
        self.mul_mat_q2_0_q8_0 = x64.mul_mat_q2_0_q8_0;
        self.q2_0_chain = Q2Chain::GenericCUnfused;
        self
    }

    /// Whether this table's Q2_0 vec_dot beats the stock one it would replace: the generic C always; ggml
    /// ≥ 0.27.0's own AVX2 kernel is SIMD already, and ours in its order does the same work per row, so those
    /// rows stay with stock (`docs/q2_0.md`).
    pub fn serves_q2_0_rows_over_stock(&self) -> bool {
        self.q2_0_chain != Q2Chain::GgmlAvx2
    }

    /// Whether this table's Q2_0 tiles beat the stock kernel's product (one vec_dot per pair): always against
    /// the generic C. Against ggml ≥ 0.27.0's own AVX2 kernel the AVX2 tiles in its order (which share each
    /// row's code expansion between columns) measured 0.91–1.03× its product in medians over 8 to 128 columns,
    /// one and two threads (Zen 3: `docs/q2_0.md`), so those products stay with stock; `GGML_LOWBIT_SERVE_ALL=1`
    /// still runs the tiles (measurement and the end-to-end bit checks).
    pub fn serves_q2_0_tiles_over_stock(&self) -> bool {
        self.q2_0_chain != Q2Chain::GgmlAvx2
    }

    /// Quantizes `x.len() / 32` whole blocks (a tail shorter than a block is ignored, as in stock).
    pub fn quantize_row_q8_0(&self, x: &[f32], y: &mut [BlockQ8_0]) {
        assert!(y.len() >= x.len() / q8_0::QK8_0, "q8_0 output too short");
        // SAFETY: as above.
        unsafe { (self.quantize_row_q8_0)(x, y) }
        if self.q8_0_scale == Q8Scale::F16c {
            // Only a NaN scale differs, and only blocks holding a NaN have one: fixed after the fact, block by
            // block, so the kernels stay one per order.
            for (block, out) in x.chunks_exact(q8_0::QK8_0).zip(y.iter_mut()) {
                if out.d.to_bits() & 0x7c00 == 0x7c00 && out.d.to_bits() & 0x3ff != 0 {
                    let block: &[f32; q8_0::QK8_0] = block.try_into().expect("whole blocks");
                    if let Some(d) = q8_0::f16c_nan_scale(block) {
                        out.d = crate::fp16::GgmlHalf::from_bits(d);
                    }
                }
            }
        }
    }

    /// Whether this table's `quantize_row_q8_0` beats the stock one: not in front of ggml ≥ 0.27.0's AVX
    /// quantizer (the one that narrows NaN scales with F16C): ours ran 0.76–0.99× it on an AVX2 Zen CPU over
    /// three builds (`docs/PERFORMANCE.md`); it is passed to stock at every instruction set.
    pub fn serves_q8_0_quantizer_over_stock(&self) -> bool {
        self.q8_0_scale != Q8Scale::F16c
    }

    /// This table with its `quantize_row_q8_0` narrowing a NaN scale as `scale` says (the probe's finding).
    pub fn with_q8_0_scale(mut self, scale: Q8Scale) -> Kernels {
        self.q8_0_scale = scale;
        self
    }

    /// `W · Y`: `emit(r, c, v)` for every row `r` of `x` and column `c` of `y`, `v` with the bits of
    /// `vec_dot_q2_0_q8_0(x.row(r), y.row(c))` (`tiles.rs`).
    pub fn mul_mat_q2_0_q8_0(
        &self,
        x: Rows<'_, BlockQ2_0>,
        y: Rows<'_, BlockQ8_0>,
        emit: Emit<'_>,
    ) {
        assert!(
            y.nb() >= 2 * x.nb(),
            "q8_0 columns shorter than the Q2_0 rows"
        );
        // SAFETY: as `vec_dot_q2_0_q8_0`.
        unsafe { (self.mul_mat_q2_0_q8_0)(x, y, &mut self.stock_nan_emit(x, y, emit)) }
    }

    pub fn dequantize_row_q2_0(&self, x: &[BlockQ2_0], y: &mut [f32]) {
        assert!(y.len() >= q2_0::QK2_0 * x.len(), "f32 output too short");
        // SAFETY: as above.
        unsafe { (self.dequantize_row_q2_0)(x, y) }
    }
}

impl Kernels {
    /// Q1_0 against `4·x.len()` q8_0 blocks, in the haswell build's eight-lane order or the x64 build's chain.
    pub fn vec_dot_q1_0_q8_0(&self, x: &[BlockQ1_0], y: &[BlockQ8_0]) -> f32 {
        assert!(y.len() >= 4 * x.len(), "q8_0 row shorter than the Q1_0 row");
        // SAFETY: as `vec_dot_q2_0_q8_0`.
        self.stock_nan(unsafe { (self.vec_dot_q1_0_q8_0)(x, y) }, x, y)
    }

    /// Whether this table's Q1_0 kernel beats the stock one it would replace. The haswell build's own AVX2
    /// kernel is already SIMD; our AVX2 kernel in its order measured 0.91–0.92× of it (`docs/PERFORMANCE.md`),
    /// so without AVX-512 a preloaded library passes Q1_0 to stock haswell. Against the x64 build's generic C
    /// the AVX2 kernel serves (4.9×); the scalar model is that C again.
    pub fn serves_q1_0_over_stock(&self) -> bool {
        self.simd_over_generic_c() || self.isa >= Isa::Avx512
    }

    /// TQ2_0 against `x.len()` q8_K blocks, in the haswell build's eight-lane order or the x64 build's chain.
    pub fn vec_dot_tq2_0_q8_k(&self, x: &[BlockTQ2_0], y: &[BlockQ8K]) -> f32 {
        assert!(y.len() >= x.len(), "q8_K row shorter than the TQ2_0 row");
        // SAFETY: as `vec_dot_q2_0_q8_0`.
        self.stock_nan(unsafe { (self.vec_dot_tq2_0_q8_k)(x, y) }, x, y)
    }

    /// `W · Y` for TQ2_0: `emit(r, c, v)` with the bits of `vec_dot_tq2_0_q8_k(x.row(r), y.row(c))`: the tile
    /// kernel with AVX-512 in the haswell order, one `vec_dot` per pair otherwise (`tiles.rs`).
    pub fn mul_mat_tq2_0_q8_k(
        &self,
        x: Rows<'_, BlockTQ2_0>,
        y: Rows<'_, BlockQ8K>,
        emit: Emit<'_>,
    ) {
        assert!(y.nb() >= x.nb(), "q8_K columns shorter than the TQ2_0 rows");
        match self.mul_mat_tq2_0_q8_k {
            // SAFETY: as `vec_dot_q2_0_q8_0`; the lengths are checked above.
            Some(tiles) => unsafe { tiles(x, y, &mut self.stock_nan_emit(x, y, emit)) },
            None => mul_mat_by_pairs(|x, y| self.vec_dot_tq2_0_q8_k(x, y), x, y, emit),
        }
    }

    /// Whether this table's kernels for the q8_K side (`quantize_row_q8_K`) beat stock's: the AVX2 and AVX-512
    /// ones (stock's is scalar C in both builds; our scalar model is that C again).
    pub fn serves_q8_k_over_stock(&self) -> bool {
        self.isa >= Isa::Avx2
    }

    /// Whether this table's dot products are SIMD kernels in front of the x64 build's generic C, which every
    /// one of them beats (`docs/PERFORMANCE.md`).
    fn simd_over_generic_c(&self) -> bool {
        self.isa >= Isa::Avx2 && self.order == FloatOrder::X64
    }

    /// Whether this table's kernel for IQ format `B` beats the stock one it would replace: against the x64
    /// build's generic C the AVX2 and AVX-512 kernels always (the scalar models are that C again), against the
    /// haswell build's AVX2 kernels only the AVX-512 ones that measured faster (`IqFormat::AVX512_BEATS_STOCK`,
    /// `docs/iq.md`). Elsewhere a preloaded library passes the format to stock.
    pub fn serves_iq_over_stock<B: IqFormat>(&self) -> bool {
        self.simd_over_generic_c() || (self.isa >= Isa::Avx512 && B::AVX512_BEATS_STOCK)
    }

    /// Whether this table's TQ1_0 kernel beats stock's: the AVX2 and AVX-512 ones against the x64 build's
    /// generic C, the AVX-512 one against the haswell build's AVX2 kernel (`TQ1_0_AVX512_BEATS_HASWELL`,
    /// `docs/tq1_0.md`).
    pub fn serves_tq1_0_over_stock(&self) -> bool {
        self.simd_over_generic_c() || (self.isa >= Isa::Avx512 && TQ1_0_AVX512_BEATS_HASWELL)
    }

    /// Whether this table's TQ2_0 kernel beats stock's: the AVX2 and AVX-512 ones against the x64 build's
    /// generic C; against the haswell build's AVX2 kernel the AVX-512 one on Intel CPUs (1.01–1.15× on the
    /// Emerald Rapids Xeon, 2026-12-02) and on AMD's Zen 5 and later (family 26 on: 0.96–1.24× over five runs
    /// before the vec_dot exports' direct path, 1.09–1.24× in every run since); not on Zen 4, which splits
    /// 512-bit operations in two, where no variant passed 1.07× and most were slower (`docs/tq2_0.md`).
    pub fn serves_tq2_0_over_stock(&self) -> bool {
        self.simd_over_generic_c() || (self.isa >= Isa::Avx512 && tq2_0_avx512_beats_haswell())
    }

    /// Whether whole TQ2_0 products (the mul_mat hook and the patched build, `tiles::mul_mat_tq_tiles`) beat
    /// stock's: in front of the x64 build as `vec_dot` does, and with AVX-512 on every CPU. On Zen 4, where the
    /// `vec_dot` kernel only matches stock's, the tiles measured 1.13–1.21× stock on every Bonsai-8B shape
    /// (`scripts/ab.sh`, one thread, 2026-12-03) and a Bonsai-8B-shaped TQ2_0 model decodes 1.20–1.41× stock
    /// through them on two threads (`docs/tq2_0.md`).
    pub fn serves_tq2_0_tiles_over_stock(&self) -> bool {
        self.simd_over_generic_c() || self.isa >= Isa::Avx512
    }

    /// An IQ format against `x.len()` q8_K blocks, in the haswell build's eight-lane order or the x64 build's
    /// chain (`formats/iq.rs`).
    pub fn vec_dot_iq_q8_k<B: IqFormat>(&self, x: &[B], y: &[BlockQ8K]) -> f32 {
        assert!(y.len() >= x.len(), "q8_K row shorter than the IQ row");
        // SAFETY: as `vec_dot_q2_0_q8_0`.
        self.stock_nan(unsafe { (B::entry(self))(x, y) }, x, y)
    }

    /// `dequantize_row_*` of an IQ format (the scalar model; the same bits in both builds).
    pub fn dequantize_row_iq<B: IqBlock>(&self, x: &[B], y: &mut [f32]) {
        assert!(y.len() >= 256 * x.len(), "f32 output too short");
        iq::dequantize_row_iq_model(x, y)
    }

    /// Quantizes `x.len() / 256` whole q8_K blocks (a tail is ignored, as in stock); the same bits in both builds.
    pub fn quantize_row_q8_k(&self, x: &[f32], y: &mut [BlockQ8K]) {
        assert!(y.len() >= x.len() / 256, "q8_K output too short");
        // SAFETY: as `vec_dot_q2_0_q8_0`.
        unsafe { (self.quantize_row_q8_k)(x, y) }
    }

    /// TQ1_0 against `x.len()` q8_K blocks, in the haswell build's eight-lane order or the x64 build's chain.
    pub fn vec_dot_tq1_0_q8_k(&self, x: &[BlockTQ1_0], y: &[BlockQ8K]) -> f32 {
        assert!(y.len() >= x.len(), "q8_K row shorter than the TQ1_0 row");
        // SAFETY: as `vec_dot_q2_0_q8_0`.
        self.stock_nan(unsafe { (self.vec_dot_tq1_0_q8_k)(x, y) }, x, y)
    }

    /// `W · Y` for TQ1_0: `emit(r, c, v)` with the bits of `vec_dot_tq1_0_q8_k(x.row(r), y.row(c))`: the tile
    /// kernel with AVX-512 in the haswell order, one `vec_dot` per pair otherwise (`tiles.rs`).
    pub fn mul_mat_tq1_0_q8_k(
        &self,
        x: Rows<'_, BlockTQ1_0>,
        y: Rows<'_, BlockQ8K>,
        emit: Emit<'_>,
    ) {
        assert!(y.nb() >= x.nb(), "q8_K columns shorter than the TQ1_0 rows");
        match self.mul_mat_tq1_0_q8_k {
            // SAFETY: as `vec_dot_q2_0_q8_0`; the lengths are checked above.
            Some(tiles) => unsafe { tiles(x, y, &mut self.stock_nan_emit(x, y, emit)) },
            None => mul_mat_by_pairs(|x, y| self.vec_dot_tq1_0_q8_k(x, y), x, y, emit),
        }
    }

    /// `dequantize_row_tq1_0` (the scalar model; the same bits in both builds).
    pub fn dequantize_row_tq1_0(&self, x: &[BlockTQ1_0], y: &mut [f32]) {
        assert!(y.len() >= 256 * x.len(), "f32 output too short");
        tq1_0::dequantize_row_tq1_0_model(x, y)
    }

    /// `dequantize_row_tq2_0` (the scalar model on every instruction set; same bits in both builds).
    pub fn dequantize_row_tq2_0(&self, x: &[BlockTQ2_0], y: &mut [f32]) {
        assert!(y.len() >= 256 * x.len(), "f32 output too short");
        tq2_0::dequantize_row_tq2_0_model(x, y)
    }

    /// `W · Y` for Q1_0: `emit(r, c, v)` with the bits of `vec_dot_q1_0_q8_0(x.row(r), y.row(c))`: the tile
    /// kernel with AVX-512 in the haswell order, one `vec_dot` per pair otherwise (`tiles.rs`).
    pub fn mul_mat_q1_0_q8_0(
        &self,
        x: Rows<'_, BlockQ1_0>,
        y: Rows<'_, BlockQ8_0>,
        emit: Emit<'_>,
    ) {
        assert!(
            y.nb() >= 4 * x.nb(),
            "q8_0 columns shorter than the Q1_0 rows"
        );
        // SAFETY: as `vec_dot_q2_0_q8_0`.
        unsafe { (self.mul_mat_q1_0_q8_0)(x, y, &mut self.stock_nan_emit(x, y, emit)) }
    }

    /// `dequantize_row_q1_0` (not a hot path: the scalar model on every instruction set; same bits in both
    /// builds).
    pub fn dequantize_row_q1_0(&self, x: &[BlockQ1_0], y: &mut [f32]) {
        assert!(y.len() >= q1_0::QK1_0 * x.len(), "f32 output too short");
        q1_0::dequantize_row_q1_0_model(x, y)
    }
}

impl Kernels {
    /// PrismML's PQ2_0 against `4·x.len()` q8_0 blocks, in the FMA (haswell) or unfused (x64) chain.
    pub fn vec_dot_pq2_0_q8_0(&self, x: &[BlockPQ2_0], y: &[BlockQ8_0]) -> f32 {
        assert!(
            y.len() >= 4 * x.len(),
            "q8_0 row shorter than the PQ2_0 row"
        );
        // SAFETY: as `vec_dot_q2_0_q8_0`.
        self.stock_nan(unsafe { (self.vec_dot_pq2_0_q8_0)(x, y) }, x, y)
    }

    /// `dequantize_row_pq2_0` (not a hot path: the scalar model on every instruction set).
    pub fn dequantize_row_pq2_0(&self, x: &[BlockPQ2_0], y: &mut [f32]) {
        assert!(y.len() >= pq2_0::QK_PQ2_0 * x.len(), "f32 output too short");
        pq2_0::dequantize_row_pq2_0_model(x, y)
    }

    /// PrismML's PTQ1_0 against `4·x.len()` q8_0 blocks, in the FMA (haswell) or unfused (x64) chain.
    pub fn vec_dot_ptq1_0_q8_0(&self, x: &[BlockPTQ1_0], y: &[BlockQ8_0]) -> f32 {
        assert!(
            y.len() >= 4 * x.len(),
            "q8_0 row shorter than the PTQ1_0 row"
        );
        // SAFETY: as `vec_dot_q2_0_q8_0`.
        self.stock_nan(unsafe { (self.vec_dot_ptq1_0_q8_0)(x, y) }, x, y)
    }

    /// `W · Y` for PQ2_0 (PrismML fork): `emit(r, c, v)` with the bits of
    /// `vec_dot_pq2_0_q8_0(x.row(r), y.row(c))`: the tile kernel with AVX-512, one `vec_dot` per pair otherwise
    /// (`tiles.rs`).
    pub fn mul_mat_pq2_0_q8_0(
        &self,
        x: Rows<'_, BlockPQ2_0>,
        y: Rows<'_, BlockQ8_0>,
        emit: Emit<'_>,
    ) {
        let pair = |a: &[BlockPQ2_0], b: &[BlockQ8_0]| self.vec_dot_pq2_0_q8_0(a, b);
        let emit = &mut self.stock_nan_emit(x, y, emit);
        fork_mul_mat(self.mul_mat_pq2_0_q8_0, pair, x, y, emit)
    }

    /// `W · Y` for PTQ1_0 (PrismML fork), as `mul_mat_pq2_0_q8_0`.
    pub fn mul_mat_ptq1_0_q8_0(
        &self,
        x: Rows<'_, BlockPTQ1_0>,
        y: Rows<'_, BlockQ8_0>,
        emit: Emit<'_>,
    ) {
        let pair = |a: &[BlockPTQ1_0], b: &[BlockQ8_0]| self.vec_dot_ptq1_0_q8_0(a, b);
        let emit = &mut self.stock_nan_emit(x, y, emit);
        fork_mul_mat(self.mul_mat_ptq1_0_q8_0, pair, x, y, emit)
    }

    /// `dequantize_row_ptq1_0` (not a hot path: the scalar model on every instruction set).
    pub fn dequantize_row_ptq1_0(&self, x: &[BlockPTQ1_0], y: &mut [f32]) {
        assert!(
            y.len() >= ptq1_0::QK_PTQ1_0 * x.len(),
            "f32 output too short"
        );
        ptq1_0::dequantize_row_ptq1_0_model(x, y)
    }
}

/// A fork format's whole product: its tile kernel where the table has one, else `vec_dot` (checked
/// lengths) per pair.
fn fork_mul_mat<B>(
    tiles: Option<ForkMulMat<B>>,
    vec_dot: impl Fn(&[B], &[BlockQ8_0]) -> f32,
    x: Rows<'_, B>,
    y: Rows<'_, BlockQ8_0>,
    emit: Emit<'_>,
) {
    assert!(
        y.nb() >= 4 * x.nb(),
        "q8_0 columns shorter than the fork format's rows"
    );
    match tiles {
        // SAFETY: the table only holds kernels for instruction sets this CPU has; the lengths are checked above.
        Some(tiles) => unsafe { tiles(x, y, emit) },
        None => mul_mat_by_pairs(|a, b| vec_dot(a, &b[..4 * a.len()]), x, y, emit),
    }
}

fn scalar_mul_mat_q2_0<const FMA: bool>(
    x: Rows<'_, BlockQ2_0>,
    y: Rows<'_, BlockQ8_0>,
    emit: Emit<'_>,
) {
    mul_mat_by_pairs(
        |x, y| q2_0::vec_dot_q2_0_q8_0_from::<FMA>(0.0, x, y),
        x,
        y,
        emit,
    )
}

fn scalar_mul_mat_q1_0<const HASWELL: bool>(
    x: Rows<'_, BlockQ1_0>,
    y: Rows<'_, BlockQ8_0>,
    emit: Emit<'_>,
) {
    let order = if HASWELL {
        FloatOrder::Haswell
    } else {
        FloatOrder::X64
    };
    mul_mat_by_pairs(
        |x, y| q1_0::vec_dot_q1_0_q8_0_model(order, x, &y[..4 * x.len()]),
        x,
        y,
        emit,
    )
}

/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn avx2_mul_mat_q1_0<const HASWELL: bool>(
    x: Rows<'_, BlockQ1_0>,
    y: Rows<'_, BlockQ8_0>,
    emit: Emit<'_>,
) {
    mul_mat_by_pairs(
        // SAFETY: this function's features are the kernel's; the pair's lengths match.
        |x, y| unsafe {
            crate::arch::x86::avx2::vec_dot_q1_0_q8_0::<HASWELL>(x, &y[..4 * x.len()])
        },
        x,
        y,
        emit,
    )
}

fn scalar_quantize_haswell(x: &[f32], y: &mut [BlockQ8_0]) {
    q8_0::quantize_row_q8_0_model(FloatOrder::Haswell, x, y)
}

fn scalar_quantize_x64(x: &[f32], y: &mut [BlockQ8_0]) {
    q8_0::quantize_row_q8_0_model(FloatOrder::X64, x, y)
}

pub(crate) fn env_choice<T>(
    name: &str,
    parse: impl Fn(&str) -> Option<T>,
    allowed: &str,
) -> Option<T> {
    let value = std::env::var(name).ok()?;
    if value.is_empty() {
        return None;
    }
    match parse(&value) {
        Some(v) => Some(v),
        None => crate::process::fatal(&format!("{name}={value:?} is not one of {allowed}")),
    }
}

/// A `0`/`1` switch from the environment (`None` when unset or empty; anything else aborts with a message, as
/// `env_choice`).
pub(crate) fn env_flag(name: &str) -> Option<bool> {
    env_choice(
        name,
        |v| match v {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        },
        "0, 1",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::{iq2_s::BlockIQ2S, iq3_s::BlockIQ3S};

    /// CPUID leaf 1 `eax` of the five machines measured: Zen 5 EPYC (family 26), Zen 4 EPYC (25), Emerald
    /// Rapids Xeon (6, model 207), Ice Lake Xeon (6, model 106, stepping 6 as lscpu shows), and a Xeon VM that
    /// reports model 167.
    #[test]
    fn cpu_families_decode_as_lscpu_shows_them() {
        assert_eq!(family_from_cpuid_eax(0x00B0_0F21), 26);
        assert_eq!(family_from_cpuid_eax(0x00A1_0F11), 25);
        assert_eq!(family_from_cpuid_eax(0x000C_06F2), 6);
        assert_eq!(model_from_cpuid_eax(0x000C_06F2), 207);
        assert_eq!(family_from_cpuid_eax(0x0006_06A6), 6);
        assert_eq!(model_from_cpuid_eax(0x0006_06A6), 106);
        assert_eq!(family_from_cpuid_eax(0x000A_0671), 6);
        assert_eq!(model_from_cpuid_eax(0x000A_0671), 0xA7);
    }

    /// Gathers are kept off on the Ice Lake Xeon (slow under the GDS microcode) and on on the Emerald Rapids one
    /// (Intel lists Sapphire and Emerald Rapids as not affected), and on the VM that reports Rocket Lake's model
    /// with AVX-512 FP16 (fast gathers); the AMD families never reach the model test.
    #[test]
    fn gds_models_are_the_ones_measured_slow() {
        assert!(gathers_slowed_by_gds(6, 106, false));
        assert!(gathers_slowed_by_gds(6, 0xA7, false));
        assert!(!gathers_slowed_by_gds(6, 0xA7, true));
        assert!(!gathers_slowed_by_gds(6, 207, true));
        assert!(!gathers_slowed_by_gds(6, 143, true));
        assert!(!gathers_slowed_by_gds(26, 0x6A, false));
    }

    /// `FORMS_BY_CPU` has one row per kind of CPU, and the classes follow vendor and the GDS models: fast
    /// gathers on Intel outside them, slow inside, AMD never gathering.
    #[test]
    fn every_cpu_class_has_one_row_of_forms() {
        for class in [
            CpuClass::IntelFastGathers,
            CpuClass::IntelSlowGathers,
            CpuClass::Other,
        ] {
            assert_eq!(FORMS_BY_CPU.iter().filter(|(c, _)| *c == class).count(), 1);
        }
        assert_eq!(CpuClass::of(true, 6, 207, true), CpuClass::IntelFastGathers);
        assert_eq!(
            CpuClass::of(true, 6, 106, false),
            CpuClass::IntelSlowGathers
        );
        assert_eq!(CpuClass::of(false, 25, 0x11, false), CpuClass::Other);
        assert_eq!(CpuClass::of(false, 26, 0x6A, false), CpuClass::Other);
        let fast = KernelChoices::for_cpu(CpuClass::IntelFastGathers);
        let slow = KernelChoices::for_cpu(CpuClass::IntelSlowGathers);
        let other = KernelChoices::for_cpu(CpuClass::Other);
        assert!(fast.iq_gather && fast.q8_scale_gather && fast.q1_lookups && fast.q1_masked_loads);
        assert!(
            !slow.iq_gather && !slow.q8_scale_gather && !slow.q1_lookups && slow.q1_masked_loads
        );
        assert!(
            !other.iq_gather
                && !other.q8_scale_gather
                && !other.q1_lookups
                && !other.q1_masked_loads
        );
        assert!(fast.iq2_s_permutes && slow.iq2_s_permutes && other.iq2_s_permutes);
    }

    /// `GGML_LOWBIT_FORMS` lists: each name forces its own choice and nothing else; faults are named.
    #[test]
    fn form_overrides_parse_strictly_and_apply_only_what_they_name() {
        assert_eq!(FormOverrides::parse(""), Ok(FormOverrides::default()));
        let base = KernelChoices::for_cpu(CpuClass::IntelFastGathers);
        let o = FormOverrides::parse("iq-gather=0,chunks=0").unwrap();
        assert_eq!(o.get("chunks"), Some(false));
        assert_eq!(o.get("scale-gather"), None);
        assert_eq!(
            o.apply(base),
            KernelChoices {
                iq_gather: false,
                ..base
            }
        );
        let names = [
            (
                "iq-gather",
                KernelChoices {
                    iq_gather: true,
                    ..Default::default()
                },
            ),
            (
                "iq2s-permutes",
                KernelChoices {
                    iq2_s_permutes: true,
                    ..Default::default()
                },
            ),
            (
                "q1-masked-loads",
                KernelChoices {
                    q1_masked_loads: true,
                    ..Default::default()
                },
            ),
            (
                "scale-gather",
                KernelChoices {
                    q8_scale_gather: true,
                    ..Default::default()
                },
            ),
            (
                "q1-lookups",
                KernelChoices {
                    q1_lookups: true,
                    ..Default::default()
                },
            ),
        ];
        for (name, want) in names {
            let o = FormOverrides::parse(&format!("{name}=1")).unwrap();
            assert_eq!(o.apply(KernelChoices::default()), want, "{name}");
        }
        assert_eq!(FormOverrides::parse("chunks=1").unwrap().apply(base), base);
        let vnni = FormOverrides::parse("q2-vnni-tiles=1").unwrap();
        assert_eq!(vnni.apply(base), base);
        assert_eq!(vnni.get("q2-vnni-tiles"), Some(true));
        for bad in [
            "iq-gather=2",
            "gather=1",
            "iq-gather",
            "chunks=0,chunks=0",
            ",",
            "iq-gather=1,",
        ] {
            assert!(FormOverrides::parse(bad).is_err(), "{bad}");
        }
    }

    /// The serve decisions per table, as `docs/PERFORMANCE.md` measured them: every Q1_0 and q8_K dot product
    /// over the x64 build's generic C from AVX2 up; over stock haswell only the AVX-512 kernels that beat its
    /// AVX2 ones (TQ2_0 on Intel and Zen 5 only); the q8_K quantizer (scalar C in both builds) from AVX2 up;
    /// nothing from the scalar table. Each table is checked at the instruction set it really got on this CPU.
    #[test]
    fn serve_decisions_follow_the_measurements() {
        for isa in Isa::ALL {
            for order in FloatOrder::ALL {
                let k = Kernels::new(isa, order);
                let simd = k.isa >= Isa::Avx2;
                let x64 = order == FloatOrder::X64;
                let avx512 = k.isa >= Isa::Avx512;
                let what = format!("{:?} {}", k.isa, order.name());
                assert_eq!(k.serves_q8_k_over_stock(), simd, "{what}");
                assert_eq!(
                    k.serves_tq2_0_over_stock(),
                    simd && (x64 || (avx512 && (cpu_is_intel() || cpu_family() >= 26))),
                    "{what}"
                );
                assert_eq!(
                    k.serves_tq2_0_tiles_over_stock(),
                    simd && (x64 || avx512),
                    "{what}"
                );
                assert_eq!(
                    k.serves_tq1_0_over_stock(),
                    simd && (x64 || avx512),
                    "{what}"
                );
                assert_eq!(
                    k.serves_iq_over_stock::<BlockIQ3S>(),
                    simd && (x64 || avx512),
                    "{what}"
                );
                assert_eq!(
                    k.serves_iq_over_stock::<BlockIQ2S>(),
                    simd && (x64 || avx512),
                    "{what}"
                );
                assert_eq!(
                    k.serves_q1_0_over_stock(),
                    simd && (x64 || avx512),
                    "{what}"
                );
            }
        }
    }
}
