//! How each export is served when the library sits in front of a stock ggml (`LD_PRELOAD`): by our kernels, by
//! the stock symbol it shadows, or by both with a comparison.
//!
//! - The stock symbols are found once with `dlsym(RTLD_NEXT, name)`, or, for a `GGML_BACKEND_DL` build whose
//!   CPU backend was `dlopen`ed with `RTLD_LOCAL`, in the loaded ggml libraries themselves; when there are none
//!   (the library linked on its own) our kernels serve every call.
//! - Float order: `GGML_LOWBIT_MATCH` if set; otherwise, with the stock symbols present, a probe on the first
//!   call runs inputs on which the two orders give different bits through stock and follows what it reproduces;
//!   otherwise the order a release build would use on this CPU. A stock library that matches neither order
//!   (a build this library does not model) gets every call passed through, with a warning.
//! - `GGML_LOWBIT_DISABLE=1`: every call goes to stock. `GGML_LOWBIT_VERIFY=1`: stock runs beside ours on every
//!   call, our result is returned, and a summary line is printed at exit; `GGML_LOWBIT_VERIFY=abort` aborts with
//!   a message on the first difference. `GGML_LOWBIT_LOG=1` prints the choices once and call counts at exit.
//!
//! Counters are only touched when logging or verifying, so the normal path adds no shared writes.

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

use crate::dispatch::IqFormat;
use crate::dispatch::{
    default_order, env_choice, env_flag, Isa, Kernels, Q2Chain, Q8Scale, RowDot, VecDotEntry,
};
use crate::formats::iq2_s::BlockIQ2S;
use crate::formats::iq2_xs::BlockIQ2XS;
use crate::formats::iq2_xxs::BlockIQ2XXS;
use crate::formats::iq3_s::BlockIQ3S;
use crate::formats::iq3_xxs::BlockIQ3XXS;
use crate::formats::pq2_0::BlockPQ2_0;
use crate::formats::ptq1_0::BlockPTQ1_0;
use crate::formats::q1_0::BlockQ1_0;
use crate::formats::q2_0::{vec_dot_q2_0_q8_0_fma_model, vec_dot_q2_0_q8_0_nofma_model, BlockQ2_0};
use crate::formats::q8_0::{
    quantize_block_q8_0_avx_model, quantize_block_q8_0_ref_model, BlockQ8_0,
};
use crate::formats::q8_k::BlockQ8K;
use crate::formats::tq1_0::BlockTQ1_0;
use crate::formats::tq2_0::BlockTQ2_0;
use crate::formats::{xorshift64, RandomActivation, RawBlock};
use crate::stock::{DequantizeRowFn, QuantizeRowFn, VecDotFn};
use crate::FloatOrder;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Our kernels serve every call.
    Serve,
    /// Every call goes to the stock symbol.
    Disable,
    /// Both run; ours is returned; differences are counted (and abort when `abort`).
    Verify { abort: bool },
}

/// The stock symbols this library shadows, when it is in front of a ggml.
#[derive(Clone, Copy, Default)]
pub struct Next {
    pub vec_dot_q2_0_q8_0: Option<VecDotFn>,
    pub quantize_row_q8_0: Option<QuantizeRowFn>,
    pub dequantize_row_q2_0: Option<DequantizeRowFn>,
    pub vec_dot_pq2_0_q8_0: Option<VecDotFn>,
    pub dequantize_row_pq2_0: Option<DequantizeRowFn>,
    pub vec_dot_ptq1_0_q8_0: Option<VecDotFn>,
    pub dequantize_row_ptq1_0: Option<DequantizeRowFn>,
    pub vec_dot_q1_0_q8_0: Option<VecDotFn>,
    pub dequantize_row_q1_0: Option<DequantizeRowFn>,
    pub vec_dot_tq2_0_q8_k: Option<VecDotFn>,
    pub dequantize_row_tq2_0: Option<DequantizeRowFn>,
    pub vec_dot_tq1_0_q8_k: Option<VecDotFn>,
    pub dequantize_row_tq1_0: Option<DequantizeRowFn>,
    /// IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S (the order of `IQ_SYMBOLS`).
    pub vec_dot_iq: [Option<VecDotFn>; 5],
    pub dequantize_row_iq: [Option<DequantizeRowFn>; 5],
    pub quantize_row_q8_k: Option<QuantizeRowFn>,
}

pub struct Config {
    pub mode: Mode,
    pub log: bool,
    /// `GGML_LOWBIT_SERVE_ALL=1`: our kernels also for the symbols that otherwise pass to stock because ours are
    /// no faster (testing and benchmarking our code in front of a stock library).
    pub serve_all: bool,
    /// Whether the float order came from the probe of the stock symbols behind this library (not from
    /// `GGML_LOWBIT_MATCH` or the CPU): then every symbol is also checked against its stock one before ours
    /// serves it (`VecDotSymbol::stock_agrees`).
    pub probed: bool,
    /// The stock vec_dot symbols whose kernels the probe found following another order than the one served
    /// (`probe_order`), with its finding: their calls and whole products stay with stock.
    pub unmatched: Vec<(&'static str, String)>,
    pub next: Next,
    pub kernels: Kernels,
}

/// Whether `p` lies in the object (shared library or executable) this code was loaded from. Addresses of our
/// own exported functions cannot be used for that: in a library linked *behind* ggml (the patched build,
/// `ggml-patch/`), references to an exported name resolve to the first definition in the process, which is
/// ggml-cpu's; the object a private function lies in is ours in every setting.
fn is_ours(p: *mut c_void) -> bool {
    fn base(p: *const c_void) -> Option<usize> {
        // SAFETY: dladdr only reads the loader's tables and fills `info`.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        (unsafe { libc::dladdr(p, &mut info) } != 0).then_some(info.dli_fbase as usize)
    }
    static OURS: OnceLock<Option<usize>> = OnceLock::new();
    let ours = *OURS.get_or_init(|| base(is_ours as *const c_void));
    ours.is_some() && base(p) == ours
}

/// Whether `p` lies in *a* ggml-lowbit library: ours, or another copy loaded in the same process (the harness
/// loads one private copy per stock build; a user could preload one over a patched build). Such a definition is
/// never "stock": two copies passing a call to each other would recurse without end. A copy is an object that
/// itself defines `ggml_lowbit_source_hash` (found in that object, not in one it depends on: a patched ggml-cpu
/// links the library but is stock for our purposes).
fn in_a_lowbit_library(p: *mut c_void) -> bool {
    if is_ours(p) {
        return true;
    }
    // SAFETY: dladdr only reads the loader's tables; RTLD_NOLOAD only returns a handle to an object already
    // loaded, closed again below; dlsym with a NUL-terminated name has no other precondition.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(p, &mut info) == 0 || info.dli_fname.is_null() {
            return false;
        }
        let h = libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD);
        if h.is_null() {
            return false;
        }
        let marker = libc::dlsym(h, c"ggml_lowbit_source_hash".as_ptr());
        libc::dlclose(h);
        if marker.is_null() {
            return false;
        }
        let mut at: libc::Dl_info = std::mem::zeroed();
        libc::dladdr(marker, &mut at) != 0 && at.dli_fbase == info.dli_fbase
    }
}

/// The stock definition of `name`: `dlsym(RTLD_NEXT, name)`, else the loaded ggml libraries' own (see
/// `loaded_ggml_symbol`); never one in a ggml-lowbit library (`in_a_lowbit_library`).
pub(crate) fn next_symbol<T: Copy>(name: &std::ffi::CStr) -> Option<T> {
    let p = next_symbol_address(name)?;
    debug_assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: `T` is the function-pointer type of `name`'s ggml signature (see `Next::find_with`).
    Some(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

/// `next_symbol`'s address, untyped.
fn next_symbol_address(name: &std::ffi::CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with a NUL-terminated name has no other precondition.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if p.is_null() || in_a_lowbit_library(p) {
        loaded_ggml_symbol(name)
    } else {
        Some(p)
    }
}

/// The symbol `name` in a loaded ggml library that is not reachable through `RTLD_NEXT`: a `GGML_BACKEND_DL`
/// build `dlopen`s `libggml-cpu*.so` with `RTLD_LOCAL`, so its definitions are outside the global scope (calls
/// from it still reach ours, preloaded libraries come first), and a ggml linked against this library (the
/// patched build) was loaded before it. Each loaded object whose path mentions ggml is reopened with
/// `RTLD_NOLOAD` and asked for the symbol.
fn loaded_ggml_symbol(name: &std::ffi::CStr) -> Option<*mut c_void> {
    unsafe extern "C" fn collect(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid info record and our `data` pointer for the whole iteration.
        unsafe {
            let names = &mut *(data as *mut Vec<std::ffi::CString>);
            let p = (*info).dlpi_name;
            if !p.is_null() {
                let n = std::ffi::CStr::from_ptr(p);
                if n.to_bytes().windows(4).any(|w| w == b"ggml") {
                    names.push(n.to_owned());
                }
            }
        }
        0
    }
    let mut names: Vec<std::ffi::CString> = Vec::new();
    // SAFETY: the callback only reads the records it is given and appends to `names`.
    unsafe { libc::dl_iterate_phdr(Some(collect), &mut names as *mut _ as *mut c_void) };
    names.iter().find_map(|lib| {
        // SAFETY: RTLD_NOLOAD only returns a handle to an object that is already loaded; it is closed again,
        // which drops the extra reference and nothing else.
        unsafe {
            let h = libc::dlopen(lib.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
            if h.is_null() {
                return None;
            }
            let p = libc::dlsym(h, name.as_ptr());
            libc::dlclose(h);
            (!p.is_null() && !in_a_lowbit_library(p)).then_some(p)
        }
    })
}

fn find_next() -> Next {
    Next::find_with(next_symbol_address)
}

impl Next {
    /// The stock symbols `lookup` finds by their C names: behind this library, `dlsym(RTLD_NEXT, …)`; in the
    /// harness, a stock library loaded with libloading.
    pub fn find_with(lookup: impl Fn(&std::ffi::CStr) -> Option<*mut c_void>) -> Next {
        /// # Safety
        /// `T` is the function-pointer type of `name`'s ggml signature.
        unsafe fn typed<T: Copy>(p: Option<*mut c_void>) -> Option<T> {
            debug_assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
            // SAFETY: the caller's contract.
            p.filter(|p| !p.is_null())
                .map(|p| unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
        }
        let dot = |name: &std::ffi::CStr| -> Option<VecDotFn> {
            // SAFETY: every name looked up through `dot` is a `ggml_vec_dot_*` symbol.
            unsafe { typed(lookup(name)) }
        };
        let quantize = |name: &std::ffi::CStr| -> Option<QuantizeRowFn> {
            // SAFETY: every name looked up through `quantize` is a `quantize_row_*` symbol.
            unsafe { typed(lookup(name)) }
        };
        let dequantize = |name: &std::ffi::CStr| -> Option<DequantizeRowFn> {
            // SAFETY: every name looked up through `dequantize` is a `dequantize_row_*` symbol.
            unsafe { typed(lookup(name)) }
        };
        Next {
            vec_dot_q2_0_q8_0: dot(c"ggml_vec_dot_q2_0_q8_0"),
            quantize_row_q8_0: quantize(c"quantize_row_q8_0"),
            dequantize_row_q2_0: dequantize(c"dequantize_row_q2_0"),
            vec_dot_pq2_0_q8_0: dot(c"ggml_vec_dot_pq2_0_q8_0"),
            dequantize_row_pq2_0: dequantize(c"dequantize_row_pq2_0"),
            vec_dot_ptq1_0_q8_0: dot(c"ggml_vec_dot_ptq1_0_q8_0"),
            dequantize_row_ptq1_0: dequantize(c"dequantize_row_ptq1_0"),
            vec_dot_q1_0_q8_0: dot(c"ggml_vec_dot_q1_0_q8_0"),
            dequantize_row_q1_0: dequantize(c"dequantize_row_q1_0"),
            vec_dot_tq2_0_q8_k: dot(c"ggml_vec_dot_tq2_0_q8_K"),
            dequantize_row_tq2_0: dequantize(c"dequantize_row_tq2_0"),
            vec_dot_tq1_0_q8_k: dot(c"ggml_vec_dot_tq1_0_q8_K"),
            dequantize_row_tq1_0: dequantize(c"dequantize_row_tq1_0"),
            vec_dot_iq: IQ_SYMBOLS.map(|(d, _)| dot(d)),
            dequantize_row_iq: IQ_SYMBOLS.map(|(_, deq)| dequantize(deq)),
            quantize_row_q8_k: quantize(c"quantize_row_q8_K"),
        }
    }
}

/// What the library finds in a stock library whose symbols are `next` (`probe_order`): the float order, Q2_0's
/// kernel, and the vec_dot symbols whose kernels follow neither modelled order (passed to stock alone); or why
/// it would pass everything to stock.
pub fn probe_stock(next: &Next) -> Result<ProbedStock, String> {
    match probe_order(next) {
        Probe::Order(order, unmatched, q2_0_chain, q8_0_scale) => Ok(ProbedStock {
            order,
            q2_0_chain,
            q8_0_scale,
            unmatched: unmatched.into_iter().map(|(n, _)| n).collect(),
        }),
        Probe::Neither(why) => Err(why),
    }
}

/// What `probe_stock` finds.
pub struct ProbedStock {
    pub order: FloatOrder,
    pub q2_0_chain: Q2Chain,
    pub q8_0_scale: Q8Scale,
    /// The vec_dot symbols passed to stock alone.
    pub unmatched: Vec<&'static str>,
}

impl ProbedStock {
    /// `k` (a table of this order) with the build's Q2_0 kernel and q8_0 scale.
    pub fn apply(&self, k: Kernels) -> Kernels {
        k.with_q2_0_chain(self.q2_0_chain)
            .with_q8_0_scale(self.q8_0_scale)
    }
}

fn parse_verify(v: &str) -> Option<Option<bool>> {
    match v {
        "1" => Some(Some(false)),
        "abort" => Some(Some(true)),
        "0" => Some(None),
        _ => None,
    }
}

/// How the log names a float order found by the probe.
const PROBED: &str = "probed against the stock library";

/// The active table's kernel forms in words (`KernelChoices::describe`), `"none"` below AVX-512; built once.
pub fn active_forms() -> &'static std::ffi::CStr {
    static FORMS: OnceLock<std::ffi::CString> = OnceLock::new();
    FORMS.get_or_init(|| {
        let k = active();
        let words = if k.isa == Isa::Avx512 {
            k.choices.describe()
        } else {
            "none".to_string()
        };
        // `describe` is built from fixed words, none of them NUL.
        std::ffi::CString::new(words).unwrap_or_default()
    })
}

/// The table every export uses, built on first use from the CPU, the environment and (when the library is in
/// front of a stock ggml) a probe of the stock symbols (`config`).
pub fn active() -> &'static Kernels {
    &config().kernels
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// The configuration every export uses, built on the first call.
pub fn config() -> &'static Config {
    CONFIG.get_or_init(|| configure(find_next()))
}

/// Builds the configuration in front of the stock symbols `next` instead of those behind this library: for the
/// harness, which loads a stock ggml with libloading and times or checks this crate's exports the way the
/// preloaded library serves over that build. Fails once the configuration exists.
pub fn configure_in_front_of(next: Next) -> Result<&'static Config, String> {
    let mut built = false;
    let c = CONFIG.get_or_init(|| {
        built = true;
        configure(next)
    });
    if built {
        Ok(c)
    } else {
        Err("the library's configuration was already built".into())
    }
}

fn configure(next: Next) -> Config {
    {
        let log = env_flag("GGML_LOWBIT_LOG").unwrap_or(false);
        let serve_all = env_flag("GGML_LOWBIT_SERVE_ALL").unwrap_or(false);
        let disable = env_flag("GGML_LOWBIT_DISABLE").unwrap_or(false);
        let verify = env_choice("GGML_LOWBIT_VERIFY", parse_verify, "0, 1, abort").flatten();
        let isa = env_choice("GGML_LOWBIT_ISA", Isa::parse, "scalar, avx2, avx512")
            .unwrap_or(Isa::Avx512);
        let matched = env_choice("GGML_LOWBIT_MATCH", FloatOrder::parse, "haswell, x64");
        // Any stock vec_dot behind us (mainline's Q2_0 or the fork's PQ2_0 / PTQ1_0) makes verify, disable and
        // the probe possible.
        let have_stock = next.vec_dot_q2_0_q8_0.is_some()
            || next.vec_dot_pq2_0_q8_0.is_some()
            || next.vec_dot_ptq1_0_q8_0.is_some();
        let mut mode = match (disable, verify) {
            (true, Some(_)) => crate::process::fatal(
                "GGML_LOWBIT_DISABLE and GGML_LOWBIT_VERIFY exclude each other",
            ),
            (true, None) => Mode::Disable,
            (false, Some(abort)) => Mode::Verify { abort },
            (false, None) => Mode::Serve,
        };
        if mode != Mode::Serve && !have_stock {
            crate::process::fatal(
                "GGML_LOWBIT_DISABLE/GGML_LOWBIT_VERIFY need the stock ggml symbols behind this library \
                 (preload it over a llama.cpp): none were found",
            );
        }
        let mut unmatched = Vec::new();
        let mut q2_0_chain = Q2Chain::GenericC;
        let mut q8_0_scale = Q8Scale::Software;
        let (order, how) = match matched {
            Some(o) => (o, "GGML_LOWBIT_MATCH"),
            None if have_stock && mode != Mode::Disable => match probe_order(&next) {
                Probe::Order(o, u, chain, scale) => {
                    unmatched = u;
                    q2_0_chain = chain;
                    q8_0_scale = scale;
                    (o, PROBED)
                }
                Probe::Neither(why) => {
                    crate::process::log_line(&format!(
                        "the stock library reproduces neither modelled float order ({why}); every call is \
                         passed to stock"
                    ));
                    mode = Mode::Disable;
                    (default_order(), "unmatched")
                }
            },
            None => (default_order(), "this CPU's release build"),
        };
        let kernels = Kernels::new(isa, order)
            .with_q2_0_chain(q2_0_chain)
            .with_q8_0_scale(q8_0_scale);
        if log || matches!(mode, Mode::Verify { .. }) {
            // SAFETY: registering a plain extern "C" function with no arguments.
            unsafe { libc::atexit(summary_at_exit) };
        }
        if log {
            crate::process::log_line(&format!(
                "float order {} ({how}){}{}, instruction set {}{}, mode {:?}, stock symbols {}",
                order.name(),
                match q2_0_chain {
                    Q2Chain::GenericC => "",
                    Q2Chain::GgmlAvx2 => ", Q2_0 in ggml ≥ 0.27.0's own AVX2 order",
                    Q2Chain::GenericCUnfused => ", Q2_0 in the generic C without contraction",
                },
                match q8_0_scale {
                    Q8Scale::Software => "",
                    Q8Scale::F16c => ", q8_0 scales narrowed by F16C",
                },
                kernels.isa.name(),
                kernels.forms_note(),
                mode,
                if have_stock { "found" } else { "not found" }
            ));
        }
        Config {
            mode,
            log,
            serve_all,
            probed: how == PROBED,
            unmatched,
            next,
            kernels,
        }
    }
}

/// A call counter split over cache-line-padded shards, one per thread (round robin), so that counting from
/// several threads does not bounce one cache line between cores (a single atomic cost ggml's two threads a
/// third of their speed on the 8B model).
struct Counter([Shard; 64]);

#[repr(align(64))]
struct Shard(AtomicU64);

impl Counter {
    const fn new() -> Counter {
        Counter([const { Shard(AtomicU64::new(0)) }; 64])
    }

    #[inline(always)]
    fn add(&self) {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        thread_local!(static SHARD: usize = (NEXT.fetch_add(1, Relaxed) % 64) as usize);
        SHARD.with(|&i| self.0[i].0.fetch_add(1, Relaxed));
    }

    fn total(&self) -> u64 {
        self.0.iter().map(|s| s.0.load(Relaxed)).sum()
    }
}

static SERVED: Counter = Counter::new();
static PASSED: Counter = Counter::new();
static PRODUCTS: Counter = Counter::new();
static EXPERTS: Counter = Counter::new();
static VERIFIED: AtomicU64 = AtomicU64::new(0);
static MISMATCHES: AtomicU64 = AtomicU64::new(0);
/// Compared calls whose results held a NaN (with stock's bits: a NaN with other bits is a mismatch).
static NAN_RESULTS: AtomicU64 = AtomicU64::new(0);

extern "C" fn summary_at_exit() {
    let mut line = format!(
        "ggml-lowbit: {} calls served by ggml-lowbit, {} passed to stock\n",
        SERVED.total(),
        PASSED.total()
    );
    if PRODUCTS.total() > 0 {
        line += &format!(
            "ggml-lowbit: {} of them whole MUL_MAT products through the tile kernels\n",
            PRODUCTS.total()
        );
    }
    if EXPERTS.total() > 0 {
        line += &format!(
            "ggml-lowbit: {} of them MUL_MAT_ID expert products through the tile kernels\n",
            EXPERTS.total()
        );
    }
    if VERIFIED.load(Relaxed) > 0 {
        line += &format!(
            "ggml-lowbit verify: {} calls compared with stock, {} mismatches, {} with NaN results\n",
            VERIFIED.load(Relaxed),
            MISMATCHES.load(Relaxed),
            NAN_RESULTS.load(Relaxed)
        );
    }
    // SAFETY: writing a byte buffer to stderr; std's own stderr may be torn down at exit.
    unsafe { libc::write(2, line.as_ptr() as *const c_void, line.len()) };
}

/// Run by the dynamic loader when the built library is loaded (preloaded or linked): with `GGML_LOWBIT_LOG=1`,
/// arranges the one line that says so at exit should no ggml call ever reach the library, as in a program
/// without ggml, over a ggml that lacks the symbols, or over one linked statically (whose calls stay inside the
/// executable). Nothing else happens at load: the configuration waits for the first call.
#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn() = at_load;

extern "C" fn at_load() {
    // Only the value "1" counts here: a bad value aborts with its message on the first call, as every setting
    // does, never at load, where no ggml may be in sight.
    if std::env::var_os("GGML_LOWBIT_LOG").is_some_and(|v| v == "1") && loaded_as_shared_library() {
        // SAFETY: registering a plain extern "C" function with no arguments.
        unsafe { libc::atexit(note_if_never_called) };
    }
}

/// Whether this code runs from a shared object rather than from the program itself (the rlib linked into the
/// harness or a test carries the same constructor, which must stay silent there).
fn loaded_as_shared_library() -> bool {
    let object_of = |address: *const c_void| {
        // SAFETY: `dladdr` only reads the loader's tables; `info` is a valid out-parameter.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        (unsafe { libc::dladdr(address, &mut info) } != 0).then_some(info.dli_fbase)
    };
    // SAFETY: `getauxval` reads the auxiliary vector; AT_PHDR is the program's own program headers, mapped.
    let program = unsafe { libc::getauxval(libc::AT_PHDR) } as *const c_void;
    let this = at_load as extern "C" fn() as *const c_void;
    match (object_of(this), object_of(program)) {
        (Some(ours), Some(theirs)) => ours != theirs,
        _ => false,
    }
}

extern "C" fn note_if_never_called() {
    if CONFIG.get().is_some() {
        return; // the configuration's own lines report what happened
    }
    let line = "ggml-lowbit: loaded, but no ggml call reached it (no ggml in this process, a ggml without \
                these symbols, or one linked into the program): nothing served, nothing changed\n";
    // SAFETY: writing a byte buffer to stderr; std's own stderr may be torn down at exit.
    unsafe { libc::write(2, line.as_ptr() as *const c_void, line.len()) };
}

enum Probe {
    /// The build's order, the vec_dot symbols whose kernels follow neither it nor any modelled one (with the
    /// probe's finding), which Q2_0 kernel it has, and how its q8_0 quantizer narrows a NaN scale.
    Order(FloatOrder, Vec<(&'static str, String)>, Q2Chain, Q8Scale),
    Neither(String),
}

/// One stock vec_dot symbol the probe can use: its block size in bytes and weights, where the f16 scale sits,
/// and our models of its two chains over raw bytes.
struct ProbeDot {
    name: &'static str,
    dot: VecDotFn,
    block_bytes: usize,
    weights: usize,
    scale_at: usize,
    fma_model: RawModel,
    nofma_model: RawModel,
    /// A newer ggml's own SIMD kernel for the format, where the library models one (Q2_0's in ggml ≥ 0.27.0).
    avx2_model: Option<RawModel>,
}

/// A scalar model of a vec_dot over raw weight and activation bytes.
type RawModel = fn(&[u8], &[u8]) -> f32;

/// The first stock vec_dot this process has, in the order Q2_0 (mainline), PQ2_0, PTQ1_0 (the PrismML fork):
/// a fork build is probed through its own formats when it lacks Q2_0.
fn probe_dot(next: &Next) -> Option<ProbeDot> {
    use crate::formats::{blocks, pq2_0, ptq1_0};
    if let Some(dot) = next.vec_dot_q2_0_q8_0 {
        return Some(ProbeDot {
            name: "ggml_vec_dot_q2_0_q8_0",
            dot,
            block_bytes: 18,
            weights: 64,
            scale_at: 0,
            fma_model: |x, y| vec_dot_q2_0_q8_0_fma_model(blocks(x), blocks(y)),
            nofma_model: |x, y| vec_dot_q2_0_q8_0_nofma_model(blocks(x), blocks(y)),
            avx2_model: Some(|x, y| {
                crate::formats::q2_0::vec_dot_q2_0_q8_0_avx2_model(blocks(x), blocks(y))
            }),
        });
    }
    if let Some(dot) = next.vec_dot_pq2_0_q8_0 {
        return Some(ProbeDot {
            name: "ggml_vec_dot_pq2_0_q8_0",
            dot,
            block_bytes: 34,
            weights: 128,
            scale_at: 0,
            fma_model: |x, y| pq2_0::vec_dot_pq2_0_q8_0_fma_model(blocks(x), blocks(y)),
            nofma_model: |x, y| pq2_0::vec_dot_pq2_0_q8_0_nofma_model(blocks(x), blocks(y)),
            avx2_model: None,
        });
    }
    next.vec_dot_ptq1_0_q8_0.map(|dot| ProbeDot {
        name: "ggml_vec_dot_ptq1_0_q8_0",
        dot,
        block_bytes: 28,
        weights: 128,
        scale_at: 26,
        fma_model: |x, y| ptq1_0::vec_dot_ptq1_0_q8_0_fma_model(blocks(x), blocks(y)),
        nofma_model: |x, y| ptq1_0::vec_dot_ptq1_0_q8_0_nofma_model(blocks(x), blocks(y)),
        avx2_model: None,
    })
}

/// Probes the float order of the stock library underneath, format by format. The build's order (haswell: FMA
/// contraction and the AVX q8_0 quantizer; x64: neither) comes from `quantize_row_q8_0`, whose tie rounding
/// tells the two apart, and from the chain of the first stock vec_dot (`probe_dot`) where there is no quantizer
/// (a fork-only library). Each format's own kernel is then checked against that order: the Q2_0 (or fork) chain
/// and the Q1_0 kernel (`probe_q1_0`). One that follows neither model, or the other order, does not switch the
/// library off: it is named in `unmatched`, and its calls and whole products go to stock alone
/// (`decide_agreement`), since a newer ggml may give one format a kernel of its own (ggml ≥ 0.27.0's AVX2
/// Q2_0) while every other format keeps the modelled bits.
fn probe_order(next: &Next) -> Probe {
    let Some(p) = probe_dot(next) else {
        return Probe::Neither("no stock vec_dot symbol".into());
    };
    let chain = probe_chain(&p);
    let mut unmatched = Vec::new();
    let mut q2_0_chain = Q2Chain::GenericC;
    let mut q8_0_scale = Q8Scale::Software;
    let order = match next.quantize_row_q8_0.map(probe_quantizer) {
        Some(Ok((avx, scale))) => {
            q8_0_scale = scale;
            let order = if avx {
                FloatOrder::Haswell
            } else {
                FloatOrder::X64
            };
            let neither = |why: String| {
                format!(
                    "the stock kernel follows neither modelled float order of the {} build ({why})",
                    order.name()
                )
            };
            match chain {
                Ok(Chain::Fused) if avx => {}
                Ok(Chain::Unfused) if !avx => {}
                // ggml ≥ 0.27.0's own AVX2 Q2_0 kernel (only Q2_0 has one; the fork's probe never gets here).
                Ok(Chain::Avx2) if avx && p.name == VEC_DOT_Q2_0.name => {
                    q2_0_chain = Q2Chain::GgmlAvx2
                }
                // An AVX2 build whose Q2_0 loop was not contracted (libggml-python 0.20.2, llama-cpp-py-sync
                // up to b11548): the x64 order's Q2_0 kernels give its bits.
                Ok(Chain::Unfused) if avx && p.name == VEC_DOT_Q2_0.name => {
                    q2_0_chain = Q2Chain::GenericCUnfused
                }
                Ok(chain) => unmatched.push((
                    p.name,
                    neither(format!(
                        "its chain is {chain:?} while quantize_row_q8_0 follows {}",
                        order.name()
                    )),
                )),
                Err(why) => unmatched.push((p.name, neither(why))),
            }
            order
        }
        Some(Err(why)) => return Probe::Neither(why),
        // A library with the fork's vec_dot but no quantizer to check: the chain decides.
        None => match chain {
            Ok(Chain::Fused) => FloatOrder::Haswell,
            Ok(Chain::Unfused) => FloatOrder::X64,
            Ok(Chain::Avx2) => {
                return Probe::Neither(format!("{} has its own AVX2 kernel", p.name))
            }
            Err(why) => return Probe::Neither(why),
        },
    };
    if let Err(why) = probe_q1_0(next, order) {
        unmatched.push((
            "ggml_vec_dot_q1_0_q8_0",
            format!(
                "the stock kernel follows neither modelled float order of the {} build ({why})",
                order.name()
            ),
        ));
    }
    Probe::Order(order, unmatched, q2_0_chain, q8_0_scale)
}

/// The float order a stock vec_dot follows.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Chain {
    /// The generic C with FMA contraction (the haswell build).
    Fused,
    /// The generic C, every operation rounded (the x64 build).
    Unfused,
    /// A newer ggml's own SIMD kernel (`ProbeDot::avx2_model`).
    Avx2,
}

/// Which modelled chain the stock vec_dot `p` follows, run on inputs where the models disagree until exactly
/// one has given every result; an error names a result no model gives.
fn probe_chain(p: &ProbeDot) -> Result<Chain, String> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut consistent = [true, true, p.avx2_model.is_some()];
    let (mut decisive, mut tries) = (0, 0);
    const ROW: usize = 512;
    while (decisive < 4 || consistent.iter().filter(|&&c| c).count() > 1) && tries < 4096 {
        tries += 1;
        let mut x = vec![0u8; ROW / p.weights * p.block_bytes];
        for blk in x.chunks_exact_mut(p.block_bytes) {
            let r = xorshift64(&mut state);
            for (j, b) in blk.iter_mut().enumerate() {
                *b = (r.rotate_left(8 * j as u32) ^ (j as u64 * 0x9d)) as u8;
            }
            let d = 0x2000 + (r % 0x1800) as u16;
            blk[p.scale_at..p.scale_at + 2].copy_from_slice(&d.to_le_bytes());
        }
        let mut y = vec![0u8; ROW / 32 * 34];
        for blk in y.chunks_exact_mut(34) {
            let r = xorshift64(&mut state);
            let s = xorshift64(&mut state);
            blk[..2].copy_from_slice(&(0x2800 + (r % 0x1400) as u16).to_le_bytes());
            for (j, q) in blk[2..].iter_mut().enumerate() {
                *q = (s.rotate_left(5 * j as u32) ^ r.rotate_right(3 * j as u32)) as u8;
            }
        }
        let models = [
            (p.fma_model)(&x, &y),
            (p.nofma_model)(&x, &y),
            p.avx2_model.map_or(f32::NAN, |m| m(&x, &y)),
        ];
        if models[0].to_bits() == models[1].to_bits() {
            continue;
        }
        decisive += 1;
        let mut s = 0f32;
        // SAFETY: the stock symbol has ggml's vec_dot signature; x and y hold the blocks of ROW weights.
        unsafe {
            (p.dot)(
                ROW as c_int,
                &mut s,
                0,
                x.as_ptr() as *const c_void,
                0,
                y.as_ptr() as *const c_void,
                0,
                1,
            )
        };
        for (c, m) in consistent.iter_mut().zip(models) {
            *c &= m.to_bits() == s.to_bits();
        }
        if !consistent.contains(&true) {
            return Err(format!(
                "{} gave {s:e}, models {:e} (FMA) and {:e} (unfused)",
                p.name, models[0], models[1]
            ));
        }
    }
    match consistent {
        [true, false, false] => Ok(Chain::Fused),
        [false, true, false] => Ok(Chain::Unfused),
        [false, false, true] => Ok(Chain::Avx2),
        _ => Err(format!(
            "{} could not be told apart from more than one model in {tries} inputs",
            p.name
        )),
    }
}

/// Whether the stock `quantize_row_q8_0` rounds ties to even (the AVX path: `true`) or away from zero (the
/// reference: `false`); an error where it does neither.
fn probe_quantizer(quant: QuantizeRowFn) -> Result<(bool, Q8Scale), String> {
    let run = |x: &[f32; 32]| {
        let mut got = BlockQ8_0::default();
        // SAFETY: the stock symbol has ggml's quantize signature; 32 floats in, one block out.
        unsafe { quant(x.as_ptr(), &mut got as *mut BlockQ8_0 as *mut c_void, 32) };
        got
    };
    // max = 127 gives id = 1 in both quantizers, so k + 0.5 values are ties: even (AVX path) or away (reference).
    let ties: [f32; 32] = std::array::from_fn(|j| if j == 0 { 127.0 } else { j as f32 - 16.5 });
    let got = run(&ties);
    let avx = if got == quantize_block_q8_0_avx_model(&ties) {
        true
    } else if got == quantize_block_q8_0_ref_model(&ties) {
        false
    } else {
        return Err("quantize_row_q8_0 matches neither quantizer".into());
    };
    // A NaN with payload where the AVX path's `maxps` tree keeps it (lane 3 of the last vector): the scale
    // shows how the build narrows it.
    let mut nan = [1.0f32; 32];
    nan[27] = f32::from_bits(0x7fd2_3456);
    let got = run(&nan);
    let model = |scale| match (avx, scale) {
        (true, Q8Scale::F16c) => crate::formats::q8_0::quantize_block_q8_0_avx_f16c_model(&nan),
        (true, Q8Scale::Software) => quantize_block_q8_0_avx_model(&nan),
        (false, _) => quantize_block_q8_0_ref_model(&nan),
    };
    [Q8Scale::Software, Q8Scale::F16c]
        .into_iter()
        .find(|&scale| got == model(scale))
        .map(|scale| (avx, scale))
        .ok_or_else(|| "quantize_row_q8_0 narrows a NaN scale as neither model does".into())
}

/// Q1_0's stock kernel differs between builds in shape (the haswell build's AVX2 lanes, the generic C
/// elsewhere; an AVX-only or SSSE3 build would have a third and fourth), so the order the Q2_0 chain showed
/// must also be the one Q1_0 follows: checked on rows where the two modelled orders disagree.
fn probe_q1_0(next: &Next, order: FloatOrder) -> Result<(), String> {
    use crate::formats::{blocks, q1_0};
    let Some(dot) = next.vec_dot_q1_0_q8_0 else {
        return Ok(());
    };
    let mut state = 0x2545_f491_4f6c_dd1du64;
    const ROW: usize = 1024;
    let mut checked = 0;
    for _ in 0..256 {
        let mut x = vec![0u8; ROW / 128 * 18];
        for blk in x.chunks_exact_mut(18) {
            let r = xorshift64(&mut state);
            let s = xorshift64(&mut state);
            blk[..2].copy_from_slice(&(0x2000 + (r % 0x1800) as u16).to_le_bytes());
            for (j, b) in blk[2..].iter_mut().enumerate() {
                *b = (s.rotate_left(8 * j as u32) ^ r.rotate_right(j as u32)) as u8;
            }
        }
        let mut y = vec![0u8; ROW / 32 * 34];
        for blk in y.chunks_exact_mut(34) {
            let r = xorshift64(&mut state);
            let s = xorshift64(&mut state);
            blk[..2].copy_from_slice(&(0x2800 + (r % 0x1400) as u16).to_le_bytes());
            for (j, q) in blk[2..].iter_mut().enumerate() {
                *q = (s.rotate_left(5 * j as u32) ^ r.rotate_right(3 * j as u32)) as u8;
            }
        }
        let haswell = q1_0::vec_dot_q1_0_q8_0_haswell_model(blocks(&x), blocks(&y));
        let x64 = q1_0::vec_dot_q1_0_q8_0_x64_model(blocks(&x), blocks(&y));
        if haswell.to_bits() == x64.to_bits() {
            continue;
        }
        let mut s = 0f32;
        // SAFETY: the stock symbol has ggml's vec_dot signature; x and y hold the blocks of ROW weights.
        unsafe {
            dot(
                ROW as c_int,
                &mut s,
                0,
                x.as_ptr() as *const c_void,
                0,
                y.as_ptr() as *const c_void,
                0,
                1,
            )
        };
        let want = match order {
            FloatOrder::Haswell => haswell,
            FloatOrder::X64 => x64,
        };
        if s.to_bits() != want.to_bits() {
            return Err(format!(
                "ggml_vec_dot_q1_0_q8_0 gave {s:e}, the {} model {want:e}",
                order.name()
            ));
        }
        checked += 1;
        if checked == 4 {
            break;
        }
    }
    Ok(())
}

/// Counts one whole MUL_MAT product served by the hook (also a served call).
#[inline(always)]
pub(crate) fn count_served_product() {
    count(&SERVED, config());
    count(&PRODUCTS, config());
}

/// Counts one MUL_MAT_ID expert product served by the hook (also a served call).
#[inline(always)]
pub(crate) fn count_served_expert() {
    count(&SERVED, config());
    count(&EXPERTS, config());
}

#[inline(always)]
fn count(c: &Counter, config: &Config) {
    if counts(config) {
        c.add();
    }
}

/// Whether calls are counted: when logging or verifying.
fn counts(config: &Config) -> bool {
    config.log || matches!(config.mode, Mode::Verify { .. })
}

fn differs(symbol: &str, abort: bool, detail: impl FnOnce() -> String) {
    MISMATCHES.fetch_add(1, Relaxed);
    if abort {
        crate::process::fatal(&format!(
            "GGML_LOWBIT_VERIFY=abort: {symbol} differs from stock: {}",
            detail()
        ));
    }
}

fn compare_floats(symbol: &str, abort: bool, ours: &[f32], stock: &[f32]) {
    if let Some(i) =
        (0..ours.len().min(stock.len())).find(|&i| ours[i].to_bits() != stock[i].to_bits())
    {
        let (a, b) = (ours[i], stock[i]);
        return differs(symbol, abort, || {
            format!(
                "value {i}: ours {a:e} ({:#010x}), stock {b:e} ({:#010x})",
                a.to_bits(),
                b.to_bits()
            )
        });
    }
    if stock.iter().any(|v| v.is_nan()) {
        NAN_RESULTS.fetch_add(1, Relaxed);
    }
}

/// `len` elements at `p`, or an empty slice for `len == 0` (where `p` may be null).
///
/// # Safety
/// `len` elements of `T` must be readable at `p`.
unsafe fn view<'a, T: RawBlock>(p: *const c_void, len: usize) -> &'a [T] {
    if len == 0 {
        &[]
    } else {
        // SAFETY: the caller guarantees `len` readable elements; `T` has alignment 1.
        unsafe { std::slice::from_raw_parts(p as *const T, len) }
    }
}

/// Whole blocks in `n` values, as C's `n / qk` for `n ≥ 0` (none for a negative `n`): a vec_dot's `int n`, or a
/// `k` its stock symbol divides in an `int64_t`.
#[inline(always)]
pub fn whole_blocks(n: i64, qk: usize) -> usize {
    BlockCount::Int64.of(n, qk)
}

/// How a stock quantizer or dequantizer counts the whole blocks of its `int64_t k` values: `k / qk` kept in an
/// `int` (`dequantize_row_q2_0`, `dequantize_row_q1_0` and `quantize_row_q8_0` of the pinned builds), which
/// wraps as GCC converts it, or in an `int64_t`. A negative count reads and writes nothing. Only a `k` no
/// ggml passes tells them apart (`k = −2⁶³ + 1` gives one block in an `int`), and ours counts as stock does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockCount {
    Int,
    Int64,
}

impl BlockCount {
    #[inline(always)]
    pub fn of(self, k: i64, qk: usize) -> usize {
        let q = k / qk as i64;
        let q = match self {
            BlockCount::Int => q as i32 as i64,
            BlockCount::Int64 => q,
        };
        q.max(0) as usize
    }
}

/// The arguments of a `ggml_vec_dot_*` call, passed on unchanged to the stock symbol.
#[derive(Clone, Copy)]
pub struct VecDotArgs {
    pub n: c_int,
    pub s: *mut f32,
    pub bs: usize,
    pub vx: *const c_void,
    pub bx: usize,
    pub vy: *const c_void,
    pub by: usize,
    pub nrc: c_int,
}

impl VecDotArgs {
    /// The arguments in ggml's order.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn new(
        n: c_int,
        s: *mut f32,
        bs: usize,
        vx: *const c_void,
        bx: usize,
        vy: *const c_void,
        by: usize,
        nrc: c_int,
    ) -> VecDotArgs {
        VecDotArgs {
            n,
            s,
            bs,
            vx,
            bx,
            vy,
            by,
            nrc,
        }
    }
}

/// The mode one call is served in: `Serve` becomes `Disable` (pass to stock) for a symbol whose stock
/// implementation is at least as fast as ours (`stock_first`: without AVX-512 Q1_0 in the haswell order, the
/// q8_K formats and `quantize_row_q8_K`; TQ2_0 in the haswell order except with AVX-512 on an Intel CPU or a
/// Zen 5; the Q1_0, TQ2_0 and IQ dequantizers; `q1_0.md`, `tq2_0.md`, `iq.md`), unless
/// `GGML_LOWBIT_SERVE_ALL=1`. Verify still compares ours with stock; without a stock symbol ours computes.
fn call_mode(c: &Config, stock_first: bool) -> Mode {
    if stock_first && !c.serve_all && c.mode == Mode::Serve {
        Mode::Disable
    } else {
        c.mode
    }
}

/// Serves one vec_dot call in `mode` (`VecDotSymbol::mode`): `ours` computes the value; `next` is the shadowed
/// stock symbol, if any.
///
/// # Safety
/// ggml's contract for the symbol: `args.s` is writable and the rows hold what `ours` and the stock symbol read.
unsafe fn serve_vec_dot(
    symbol: &str,
    next: Option<VecDotFn>,
    mode: Mode,
    a: VecDotArgs,
    ours: impl FnOnce() -> f32,
) {
    let c = config();
    match (mode, next) {
        (Mode::Serve, _) | (_, None) => {
            count(&SERVED, c);
            // SAFETY: `s` is writable by ggml's contract.
            unsafe { *a.s = ours() };
        }
        (Mode::Disable, Some(stock)) => {
            count(&PASSED, c);
            // SAFETY: the shadowed symbol, called with the caller's own arguments.
            unsafe { stock(a.n, a.s, a.bs, a.vx, a.bx, a.vy, a.by, a.nrc) };
        }
        (Mode::Verify { abort }, Some(stock)) => {
            count(&SERVED, c);
            VERIFIED.fetch_add(1, Relaxed);
            let mine = ours();
            let mut theirs = 0f32;
            // SAFETY: as above, with our own output slot.
            unsafe { stock(a.n, &mut theirs, a.bs, a.vx, a.bx, a.vy, a.by, a.nrc) };
            compare_floats(symbol, abort, &[mine], &[theirs]);
            // SAFETY: `s` is writable by ggml's contract.
            unsafe { *a.s = mine };
        }
    }
}

/// Serves one dequantize call of `values` floats (whole blocks): `ours` fills the output; `stock_first` as in
/// `call_mode`.
///
/// # Safety
/// ggml's contract: `y` has room for `k` floats and `vx` holds the blocks both implementations read.
unsafe fn serve_dequantize(
    symbol: &str,
    next: Option<DequantizeRowFn>,
    mode: Mode,
    (vx, y, k): (*const c_void, *mut f32, i64),
    values: usize,
    ours: impl Fn(&mut [f32]),
) {
    let c = config();
    let out = || -> &mut [f32] {
        if values == 0 {
            &mut []
        } else {
            // SAFETY: ggml's contract: `y` has room for `k` floats, of which `values` are whole blocks.
            unsafe { std::slice::from_raw_parts_mut(y, values) }
        }
    };
    match (mode, next) {
        (Mode::Serve, _) | (_, None) => {
            count(&SERVED, c);
            ours(out());
        }
        (Mode::Disable, Some(stock)) => {
            count(&PASSED, c);
            // SAFETY: the shadowed symbol, called with the caller's own arguments.
            unsafe { stock(vx, y, k) };
        }
        (Mode::Verify { abort }, Some(stock)) => {
            count(&SERVED, c);
            VERIFIED.fetch_add(1, Relaxed);
            let mut theirs = vec![0f32; values];
            // SAFETY: as above, into our own buffer of `k` floats.
            unsafe { stock(vx, theirs.as_mut_ptr(), k) };
            let mine = out();
            ours(mine);
            compare_floats(symbol, abort, mine, &theirs);
        }
    }
}

/// Serves a `quantize_row_*` call into blocks `B` of `qk` floats: `k/qk` whole blocks (a tail is ignored, as
/// in stock); `stock_first` as in `call_mode`, and every call to stock where the stock quantizer gives other
/// bytes than ours (`quantizer_agrees`, decided once into `agrees`). Verify compares the whole output blocks.
///
/// # Safety
/// ggml's contract for the symbol: `x` holds `k` floats, `vy` has room for `k/qk` blocks.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn quantize_rows<B: RawBlock + PartialEq + std::fmt::Debug>(
    symbol: &str,
    next: Option<QuantizeRowFn>,
    stock_first: bool,
    agrees: &OnceLock<bool>,
    (qk, blocks_of): (usize, BlockCount),
    kernel: impl Fn(&Kernels, &[f32], &mut [B]),
    (x, vy, k): (*const f32, *mut c_void, i64),
) {
    let c = config();
    let mode = match call_mode(c, stock_first) {
        Mode::Serve if !quantizer_agrees(agrees, symbol, c, next, qk, &kernel) => Mode::Disable,
        mode => mode,
    };
    let nb = blocks_of.of(k, qk);
    let ours = |out: &mut [B]| {
        let input = if nb == 0 {
            &[][..]
        } else {
            // SAFETY: ggml's contract: `x` holds `k` floats.
            unsafe { std::slice::from_raw_parts(x, nb * qk) }
        };
        kernel(&c.kernels, input, out)
    };
    let out = || -> &mut [B] {
        if nb == 0 {
            &mut []
        } else {
            // SAFETY: ggml's contract: `vy` has room for `k/qk` blocks.
            unsafe { std::slice::from_raw_parts_mut(vy as *mut B, nb) }
        }
    };
    match (mode, next) {
        (Mode::Serve, _) | (_, None) => {
            count(&SERVED, c);
            ours(out());
        }
        (Mode::Disable, Some(stock)) => {
            count(&PASSED, c);
            // SAFETY: the shadowed symbol, called with the caller's own arguments.
            unsafe { stock(x, vy, k) };
        }
        (Mode::Verify { abort }, Some(stock)) => {
            count(&SERVED, c);
            VERIFIED.fetch_add(1, Relaxed);
            let mut theirs = vec![0u8; nb * std::mem::size_of::<B>()];
            // SAFETY: as above, into our own buffer of `k/qk` blocks.
            unsafe { stock(x, theirs.as_mut_ptr() as *mut c_void, k) };
            let theirs: &[B] = crate::formats::blocks(&theirs);
            let mine = out();
            ours(mine);
            if let Some(i) = mine.iter().zip(theirs).position(|(a, b)| a != b) {
                differs(symbol, abort, || {
                    format!("block {i}: ours {:?}, stock {:?}", mine[i], theirs[i])
                });
            }
        }
    }
}

/// Whether the stock quantizer gives our quantizer's bytes on the agreement rows (`agreement_floats`),
/// decided once into `agrees`, as `VecDotSymbol::stock_agrees` decides for a dot product: checked when the
/// float order was probed (true otherwise); one that differs is named on stderr.
fn quantizer_agrees<B: RawBlock + PartialEq>(
    agrees: &OnceLock<bool>,
    symbol: &str,
    c: &Config,
    next: Option<QuantizeRowFn>,
    qk: usize,
    kernel: &impl Fn(&Kernels, &[f32], &mut [B]),
) -> bool {
    decide_agreement(agrees, c, symbol, "quantizer", next, |stock| {
        let mut state = 0x1f83_d9ab_fb41_bd6bu64;
        let nb = AGREEMENT_BLOCKS;
        (0..AGREEMENT_ROWS).find_map(|row| {
            let x = agreement_floats(&mut state, row, nb, qk);
            let mut mine = vec![0u8; nb * size_of::<B>()];
            let mut theirs = mine.clone();
            kernel(&c.kernels, &x, crate::formats::blocks_mut(&mut mine));
            // SAFETY: the stock symbol has ggml's quantize signature; `x` holds `nb·qk` floats and `theirs`
            // room for `nb` blocks.
            unsafe {
                stock(
                    x.as_ptr(),
                    theirs.as_mut_ptr() as *mut c_void,
                    (nb * qk) as i64,
                )
            };
            (mine != theirs).then(|| format!("row {row}"))
        })
    })
}

/// A row of `nb` blocks of `qk` floats for the quantizers' agreement check: each block random at its own
/// magnitude (1e-3 to 1e3); in row 0 the first block is ties (127 first, which makes the scale exactly 1 in
/// both q8 quantizers, then values `k + 0.5`), where a quantizer's rounding shows.
fn agreement_floats(state: &mut u64, row: usize, nb: usize, qk: usize) -> Vec<f32> {
    let mut x = Vec::with_capacity(nb * qk);
    for b in 0..nb {
        let scale = 10f32.powi((xorshift64(state) % 7) as i32 - 3);
        for j in 0..qk {
            x.push(if row == 0 && b == 0 {
                if j == 0 {
                    127.0
                } else {
                    (j % 128) as f32 - 63.5
                }
            } else {
                ((xorshift64(state) >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            });
        }
    }
    x
}

static QUANTIZE_Q8_0_AGREES: OnceLock<bool> = OnceLock::new();
static QUANTIZE_Q8_K_AGREES: OnceLock<bool> = OnceLock::new();

/// # Safety
/// ggml's contract for `quantize_row_q8_0`.
pub unsafe fn quantize_row_q8_0(x: *const f32, vy: *mut c_void, k: i64) {
    let c = config();
    // SAFETY: passed on.
    unsafe {
        quantize_rows::<BlockQ8_0>(
            "quantize_row_q8_0",
            c.next.quantize_row_q8_0,
            !c.kernels.serves_q8_0_quantizer_over_stock(),
            &QUANTIZE_Q8_0_AGREES,
            (32, BlockCount::Int),
            Kernels::quantize_row_q8_0,
            (x, vy, k),
        )
    }
}

/// # Safety
/// ggml's contract for `quantize_row_q8_K`.
pub unsafe fn quantize_row_q8_k(x: *const f32, vy: *mut c_void, k: i64) {
    let c = config();
    // SAFETY: passed on. Without AVX-512 ours is stock's scalar C again: stock first.
    unsafe {
        quantize_rows::<BlockQ8K>(
            "quantize_row_q8_K",
            c.next.quantize_row_q8_k,
            !c.kernels.serves_q8_k_over_stock(),
            &QUANTIZE_Q8_K_AGREES,
            (256, BlockCount::Int64),
            Kernels::quantize_row_q8_k,
            (x, vy, k),
        )
    }
}

/// One vec_dot symbol as this library serves it: its name, the stock symbol it shadows, whether our kernel is
/// served over that one (`call_mode`), and where its calls go once the first has been served (`direct`).
pub struct VecDotSymbol<B: VecDotEntry> {
    name: &'static str,
    next: fn(&Next) -> Option<VecDotFn>,
    ours_over_stock: fn(&Kernels) -> bool,
    /// Where this symbol's calls go once the first has been served, when one kernel alone runs them (no
    /// counting): ours (mode `Serve`, ours chosen over stock), or stock's (passed, e.g. where ours is no
    /// faster). Each call then goes straight there from the export, without the configuration's checks, the
    /// panic guard's frame and two more calls. That path cost about 6 ns a call on the Zen 5 machine, about a
    /// twelfth of a 4096-weight Q1_0 row (`docs/PERFORMANCE.md`), and about a tenth of the decode time of a
    /// Q2_0 model whose rows pass to ggml ≥ 0.27.0's own kernel (Zen 3).
    direct: OnceLock<Direct<B>>,
    /// Whether the stock symbol gave our kernel's bits on the agreement rows (`stock_agrees`); decided on
    /// first use.
    agrees: OnceLock<bool>,
}

/// Where a vec_dot symbol's calls go without the configuration (`VecDotSymbol::direct`).
enum Direct<B: VecDotEntry> {
    Ours(RowDot<B, B::Y>),
    Stock(VecDotFn),
    /// Through the configuration on every call (verify mode, counting).
    Configured,
}

impl<B: VecDotEntry> VecDotSymbol<B> {
    const fn new(
        name: &'static str,
        next: fn(&Next) -> Option<VecDotFn>,
        ours_over_stock: fn(&Kernels) -> bool,
    ) -> Self {
        VecDotSymbol {
            name,
            next,
            ours_over_stock,
            direct: OnceLock::new(),
            agrees: OnceLock::new(),
        }
    }

    /// How this symbol's calls are served: `call_mode` (ours, or stock's where ours is no faster), except that
    /// a stock symbol which does not give our kernel's bits (`stock_agrees`) gets every call, whatever
    /// `GGML_LOWBIT_SERVE_ALL` says.
    fn mode(&self, c: &Config) -> Mode {
        let mode = call_mode(c, !(self.ours_over_stock)(&c.kernels));
        if mode == Mode::Serve && !self.stock_agrees(c) {
            Mode::Disable
        } else {
            mode
        }
    }

    /// Whether our kernel may serve this symbol in front of the stock one: always, unless the float order
    /// was probed (`Config::probed`) and the stock symbol, run once on the agreement rows
    /// (`first_row_differing_from_stock`), gives other bits than our kernel. The probe models the builds of the
    /// pinned llama.cpp; a ggml whose kernel for one format has another layout or order (another version,
    /// another build) then keeps stock's bits for that format, and says so on stderr.
    pub(crate) fn stock_agrees(&self, c: &Config) -> bool {
        let stock = (self.next)(&c.next);
        decide_agreement(&self.agrees, c, self.name, "kernel", stock, |stock| {
            first_row_differing_from_stock::<B>(stock, B::vec_dot_entry(&c.kernels))
        })
    }
}

/// A row of `AGREEMENT_BLOCKS` weight blocks for the agreement checks: every byte random (any code, sign or
/// grid index the format has), the f16 scale moderate (no infinite or NaN result, whose payload stock need not
/// share).
fn agreement_blocks<B: VecDotEntry>(state: &mut u64) -> Vec<u8> {
    let mut x = vec![0u8; AGREEMENT_BLOCKS * size_of::<B>()];
    for blk in x.chunks_exact_mut(size_of::<B>()) {
        blk.iter_mut().for_each(|b| *b = xorshift64(state) as u8);
        let d = 0x2000 + (xorshift64(state) % 0x1800) as u16;
        blk[B::SCALE_AT..B::SCALE_AT + 2].copy_from_slice(&d.to_le_bytes());
    }
    x
}

/// Decides once, into `agrees`, whether our `what` (kernel, quantizer or dequantizer) may serve `symbol` in
/// front of its `stock` one: yes, unless the probe found its kernel unmatched (`Config::unmatched`), or the float
/// order was probed (`Config::probed`), the stock symbol exists, and `first_difference` names a row of the
/// agreement check where the two give other bits; such a symbol is named on stderr, once.
fn decide_agreement<F>(
    agrees: &OnceLock<bool>,
    c: &Config,
    symbol: &str,
    what: &str,
    stock: Option<F>,
    first_difference: impl FnOnce(F) -> Option<String>,
) -> bool {
    *agrees.get_or_init(|| {
        if let Some((_, why)) = c.unmatched.iter().find(|(name, _)| *name == symbol) {
            crate::process::log_line(&format!(
                "{symbol}: {why}; its calls and whole products are passed to stock, the other formats are served"
            ));
            return false;
        }
        let Some(why) = stock.filter(|_| c.probed).and_then(first_difference) else {
            return true;
        };
        crate::process::log_line(&format!(
            "{symbol}: the stock library gives other bits than this library's {} {what} ({why}); its calls \
             are passed to stock",
            c.kernels.order.name()
        ));
        false
    })
}

/// Rows and blocks per row of the agreement check: it runs once per symbol (512 blocks), and a kernel in the
/// other modelled float order differs from ours on at least a quarter of these rows for every format (22 of 64
/// at the fewest: `tests::agreement_rows_tell_the_two_float_orders_apart`).
const AGREEMENT_ROWS: usize = 64;
const AGREEMENT_BLOCKS: usize = 8;

/// The agreement rows of `B`: `agreement_blocks` against random activations (`RandomActivation`), given to
/// `each(row, x, y)` as raw bytes until it returns something, which is returned.
fn agreement_rows<B: VecDotEntry, T>(
    mut each: impl FnMut(usize, &[u8], &[u8]) -> Option<T>,
) -> Option<T> {
    let mut state = 0x5851_f42d_4c95_7f2du64;
    let mut y = vec![0u8; AGREEMENT_BLOCKS * B::Y_PER_BLOCK * size_of::<B::Y>()];
    (0..AGREEMENT_ROWS).find_map(|row| {
        let x = agreement_blocks::<B>(&mut state);
        <B::Y as RandomActivation>::fill_random(&mut y, &mut state);
        each(row, &x, &y)
    })
}

/// Runs the stock vec_dot and ours on the agreement rows of `B` (`agreement_rows`) and names the first row
/// that differs, if any.
fn first_row_differing_from_stock<B: VecDotEntry>(
    stock: VecDotFn,
    ours: RowDot<B, B::Y>,
) -> Option<String> {
    use crate::formats::blocks;
    agreement_rows::<B, String>(|row, x, y| {
        // SAFETY: the kernel is the table's entry for this CPU (`Kernels::new`); x and y hold whole blocks
        // that meet.
        let mine = unsafe { ours(blocks(x), blocks(y)) };
        let mut theirs = 0f32;
        // SAFETY: the stock symbol has ggml's vec_dot signature; x and y hold the blocks of the n weights.
        unsafe {
            stock(
                (AGREEMENT_BLOCKS * B::QK) as c_int,
                &mut theirs,
                0,
                x.as_ptr() as *const c_void,
                0,
                y.as_ptr() as *const c_void,
                0,
                1,
            )
        };
        (mine.to_bits() != theirs.to_bits())
            .then(|| format!("row {row}: stock {theirs:e}, ours {mine:e}"))
    })
}

impl<B: IqSymbol + VecDotEntry> VecDotSymbol<B> {
    /// An IQ format's vec_dot symbol (`IQ_SYMBOLS`), passed to stock where ours is not faster
    /// (`Kernels::serves_iq_over_stock`).
    const fn iq() -> Self {
        VecDotSymbol::new(
            B::VEC_DOT_NAME,
            |n| n.vec_dot_iq[B::INDEX],
            Kernels::serves_iq_over_stock::<B>,
        )
    }
}

pub(crate) static VEC_DOT_Q2_0: VecDotSymbol<BlockQ2_0> = VecDotSymbol::new(
    "ggml_vec_dot_q2_0_q8_0",
    |n| n.vec_dot_q2_0_q8_0,
    Kernels::serves_q2_0_rows_over_stock,
);
pub(crate) static VEC_DOT_Q1_0: VecDotSymbol<BlockQ1_0> = VecDotSymbol::new(
    "ggml_vec_dot_q1_0_q8_0",
    |n| n.vec_dot_q1_0_q8_0,
    Kernels::serves_q1_0_over_stock,
);
pub(crate) static VEC_DOT_PQ2_0: VecDotSymbol<BlockPQ2_0> = VecDotSymbol::new(
    "ggml_vec_dot_pq2_0_q8_0",
    |n| n.vec_dot_pq2_0_q8_0,
    |_| true,
);
pub(crate) static VEC_DOT_PTQ1_0: VecDotSymbol<BlockPTQ1_0> = VecDotSymbol::new(
    "ggml_vec_dot_ptq1_0_q8_0",
    |n| n.vec_dot_ptq1_0_q8_0,
    |_| true,
);
// Stock haswell's TQ2_0 is served only where ours measured faster (`Kernels::serves_tq2_0_over_stock`).
pub(crate) static VEC_DOT_TQ2_0: VecDotSymbol<BlockTQ2_0> = VecDotSymbol::new(
    "ggml_vec_dot_tq2_0_q8_K",
    |n| n.vec_dot_tq2_0_q8_k,
    Kernels::serves_tq2_0_over_stock,
);
pub(crate) static VEC_DOT_TQ1_0: VecDotSymbol<BlockTQ1_0> = VecDotSymbol::new(
    "ggml_vec_dot_tq1_0_q8_K",
    |n| n.vec_dot_tq1_0_q8_k,
    Kernels::serves_tq1_0_over_stock,
);
pub(crate) static VEC_DOT_IQ2_XXS: VecDotSymbol<BlockIQ2XXS> = VecDotSymbol::iq();
pub(crate) static VEC_DOT_IQ2_XS: VecDotSymbol<BlockIQ2XS> = VecDotSymbol::iq();
pub(crate) static VEC_DOT_IQ2_S: VecDotSymbol<BlockIQ2S> = VecDotSymbol::iq();
pub(crate) static VEC_DOT_IQ3_XXS: VecDotSymbol<BlockIQ3XXS> = VecDotSymbol::iq();
pub(crate) static VEC_DOT_IQ3_S: VecDotSymbol<BlockIQ3S> = VecDotSymbol::iq();

/// Serves one call of a vec_dot symbol over `n/QK` whole weight blocks (C's integer division): straight to
/// our kernel or to stock's once `symbol.direct` says so, else through `vec_dot_configured`. The direct path has no panic
/// guard of its own: the kernels do not panic on rows of the lengths built here, and should one ever do, Rust
/// aborts at the `extern "C"` boundary with the panic's message (no unwinding reaches C either way).
///
/// # Safety
/// ggml's (or the fork's) contract for the symbol: `vx` holds `n/QK` blocks, `vy` the activation blocks they
/// meet, `s` is writable.
#[inline(always)]
pub unsafe fn vec_dot<B: VecDotEntry>(symbol: &'static VecDotSymbol<B>, a: VecDotArgs) {
    match symbol.direct.get() {
        Some(Direct::Ours(kernel)) => {
            let nb = whole_blocks(a.n as i64, B::QK);
            // SAFETY: the caller's contract: `s` is writable, `vx` holds `nb` blocks and `vy` the
            // `nb·Y_PER_BLOCK` activation blocks they meet; the table entry runs on this CPU (`Kernels::new`).
            unsafe {
                let (x, y) = (view(a.vx, nb), view(a.vy, nb * B::Y_PER_BLOCK));
                let v = kernel(x, y);
                *a.s = if v.is_nan() {
                    stock_nan((symbol.next)(&config().next), &a, x, y)
                } else {
                    v
                };
            }
        }
        // SAFETY: the shadowed symbol, with the caller's own arguments.
        Some(Direct::Stock(stock)) => unsafe {
            stock(a.n, a.s, a.bs, a.vx, a.bx, a.vy, a.by, a.nrc)
        },
        // The arguments one by one, so that they stay in registers on the direct paths (a `VecDotArgs` passed
        // on is first stored to the stack, on every call).
        // SAFETY: passed on.
        _ => unsafe { vec_dot_configured(symbol, a.n, a.s, a.bs, a.vx, a.bx, a.vy, a.by, a.nrc) },
    }
}

/// A NaN result of our kernel on the call `a` (whose rows are `x` and `y`), with stock's bits: from the stock
/// symbol `next` where there is one, so that its NaN is whatever its compiler made of the operand order; from the
/// model of the table's order otherwise (the pinned builds' and ggml ≥ 0.27.0's NaNs, `dispatch.md`).
///
/// # Safety
/// `a` is a call ggml made to this symbol (its rows hold what `next` reads).
#[cold]
#[inline(never)]
unsafe fn stock_nan<B: VecDotEntry>(
    next: Option<VecDotFn>,
    a: &VecDotArgs,
    x: &[B],
    y: &[B::Y],
) -> f32 {
    match next {
        Some(stock) => {
            let mut s = 0f32;
            // SAFETY: the caller's arguments, with one output (ours writes one).
            unsafe { stock(a.n, &mut s, a.bs, a.vx, a.bx, a.vy, a.by, 1) };
            s
        }
        None => config().kernels.model_row(x, y),
    }
}

/// `vec_dot` through the configuration, under the panic guard: ours, stock's or both (`serve_vec_dot`);
/// then records in `symbol.direct` whether later calls can go straight to our kernel or to stock's.
///
/// # Safety
/// As `vec_dot`.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe fn vec_dot_configured<B: VecDotEntry>(
    symbol: &'static VecDotSymbol<B>,
    n: c_int,
    s: *mut f32,
    bs: usize,
    vx: *const c_void,
    bx: usize,
    vy: *const c_void,
    by: usize,
    nrc: c_int,
) {
    let a = VecDotArgs::new(n, s, bs, vx, bx, vy, by, nrc);
    crate::process::guard(symbol.name, || {
        let c = config();
        let kernel = B::vec_dot_entry(&c.kernels);
        let mode = symbol.mode(c);
        let next = (symbol.next)(&c.next);
        let nb = whole_blocks(a.n as i64, B::QK);
        // SAFETY: as in `vec_dot`.
        let ours = || unsafe {
            let (x, y) = (view(a.vx, nb), view(a.vy, nb * B::Y_PER_BLOCK));
            match kernel(x, y) {
                v if v.is_nan() => stock_nan(next, &a, x, y),
                v => v,
            }
        };
        // SAFETY: the caller's contract: `s` is writable and the rows hold what both implementations read.
        unsafe { serve_vec_dot(symbol.name, next, mode, a, ours) };
        symbol.direct.get_or_init(|| match (counts(c), mode, next) {
            (true, _, _) => Direct::Configured,
            (false, Mode::Serve, _) | (false, _, None) => Direct::Ours(kernel),
            (false, Mode::Disable, Some(stock)) => Direct::Stock(stock),
            (false, Mode::Verify { .. }, _) => Direct::Configured,
        });
    })
}

/// Serves a `dequantize_row_*` call for a format of `B` blocks (`B::QK` weights each); `stock_first` as in
/// `call_mode`, and every call to stock where the stock dequantizer gives other bits than ours
/// (`dequantizer_agrees`, decided once into `agrees`).
///
/// # Safety
/// ggml's (or the fork's) contract for the symbol: `vx` holds `k/B::QK` blocks, `y` has room for `k` floats.
#[inline(always)]
unsafe fn dequantize_rows<B: VecDotEntry>(
    symbol: &str,
    next: impl Fn(&Next) -> Option<DequantizeRowFn>,
    stock_first: bool,
    agrees: &OnceLock<bool>,
    (blocks_of, kernel): (BlockCount, impl Fn(&Kernels, &[B], &mut [f32])),
    (vx, y, k): (*const c_void, *mut f32, i64),
) {
    let c = config();
    let next = next(&c.next);
    let mode = match call_mode(c, stock_first) {
        Mode::Serve if !dequantizer_agrees(agrees, symbol, c, next, &kernel) => Mode::Disable,
        mode => mode,
    };
    let nb = blocks_of.of(k, B::QK);
    // SAFETY: the caller's contract: `vx` holds `nb` blocks, `y` has room for `k` floats.
    unsafe {
        let x: &[B] = view(vx, nb);
        serve_dequantize(symbol, next, mode, (vx, y, k), nb * B::QK, |out| {
            kernel(&c.kernels, x, out)
        })
    }
}

/// Whether the stock dequantizer gives our floats, bit for bit, on the agreement rows (`agreement_blocks`),
/// decided once into `agrees` as `VecDotSymbol::stock_agrees` decides for a dot product: checked when the float
/// order was probed (true otherwise); one that differs is named on stderr.
fn dequantizer_agrees<B: VecDotEntry>(
    agrees: &OnceLock<bool>,
    symbol: &str,
    c: &Config,
    next: Option<DequantizeRowFn>,
    kernel: &impl Fn(&Kernels, &[B], &mut [f32]),
) -> bool {
    decide_agreement(agrees, c, symbol, "dequantizer", next, |stock| {
        let mut state = 0xd1b5_4a32_d192_ed03u64;
        let values = AGREEMENT_BLOCKS * B::QK;
        (0..AGREEMENT_ROWS).find_map(|row| {
            let x = agreement_blocks::<B>(&mut state);
            let (mut mine, mut theirs) = (vec![0f32; values], vec![0f32; values]);
            kernel(&c.kernels, crate::formats::blocks(&x), &mut mine);
            // SAFETY: the stock symbol has ggml's dequantize signature; `x` holds the blocks of `values`
            // weights and `theirs` room for them.
            unsafe {
                stock(
                    x.as_ptr() as *const c_void,
                    theirs.as_mut_ptr(),
                    values as i64,
                )
            };
            let differ = mine
                .iter()
                .zip(&theirs)
                .any(|(a, b)| a.to_bits() != b.to_bits());
            differ.then(|| format!("row {row}"))
        })
    })
}

/// `dequantizer_agrees`'s decisions, one per dequantizer.
static DEQUANTIZE_Q2_0_AGREES: OnceLock<bool> = OnceLock::new();
static DEQUANTIZE_Q1_0_AGREES: OnceLock<bool> = OnceLock::new();
static DEQUANTIZE_IQ_AGREES: [OnceLock<bool>; 5] = [const { OnceLock::new() }; 5];
static DEQUANTIZE_TQ1_0_AGREES: OnceLock<bool> = OnceLock::new();
static DEQUANTIZE_TQ2_0_AGREES: OnceLock<bool> = OnceLock::new();
static DEQUANTIZE_PQ2_0_AGREES: OnceLock<bool> = OnceLock::new();
static DEQUANTIZE_PTQ1_0_AGREES: OnceLock<bool> = OnceLock::new();

/// # Safety
/// ggml's contract for `dequantize_row_q2_0`.
pub unsafe fn dequantize_row_q2_0(vx: *const c_void, y: *mut f32, k: i64) {
    // SAFETY: passed on.
    unsafe {
        dequantize_rows::<BlockQ2_0>(
            "dequantize_row_q2_0",
            |n| n.dequantize_row_q2_0,
            false,
            &DEQUANTIZE_Q2_0_AGREES,
            (BlockCount::Int, Kernels::dequantize_row_q2_0),
            (vx, y, k),
        )
    }
}

/// # Safety
/// ggml's contract for `dequantize_row_q1_0`.
pub unsafe fn dequantize_row_q1_0(vx: *const c_void, y: *mut f32, k: i64) {
    // SAFETY: passed on; ours (the scalar model) is no faster than stock's.
    unsafe {
        dequantize_rows::<BlockQ1_0>(
            "dequantize_row_q1_0",
            |n| n.dequantize_row_q1_0,
            true,
            &DEQUANTIZE_Q1_0_AGREES,
            (BlockCount::Int, Kernels::dequantize_row_q1_0),
            (vx, y, k),
        )
    }
}

/// The IQ formats' vec_dot and dequantize symbols, in the order of `Next::vec_dot_iq`.
pub const IQ_SYMBOLS: [(&CStr, &CStr); 5] = [
    (c"ggml_vec_dot_iq2_xxs_q8_K", c"dequantize_row_iq2_xxs"),
    (c"ggml_vec_dot_iq2_xs_q8_K", c"dequantize_row_iq2_xs"),
    (c"ggml_vec_dot_iq2_s_q8_K", c"dequantize_row_iq2_s"),
    (c"ggml_vec_dot_iq3_xxs_q8_K", c"dequantize_row_iq3_xxs"),
    (c"ggml_vec_dot_iq3_s_q8_K", c"dequantize_row_iq3_s"),
];

/// An IQ block type's place in `IQ_SYMBOLS`.
pub trait IqSymbol: IqFormat {
    const INDEX: usize;
    /// The symbol names as `&str`, for messages, converted once at compile time (not per call).
    const VEC_DOT_NAME: &'static str = name(IQ_SYMBOLS[Self::INDEX].0);
    const DEQUANTIZE_NAME: &'static str = name(IQ_SYMBOLS[Self::INDEX].1);
}

/// A symbol name as `&str` (the names are ASCII).
const fn name(symbol: &'static CStr) -> &'static str {
    match symbol.to_str() {
        Ok(s) => s,
        Err(_) => panic!("symbol names are ASCII"),
    }
}
impl IqSymbol for BlockIQ2XXS {
    const INDEX: usize = 0;
}
impl IqSymbol for BlockIQ2XS {
    const INDEX: usize = 1;
}
impl IqSymbol for BlockIQ2S {
    const INDEX: usize = 2;
}
impl IqSymbol for BlockIQ3XXS {
    const INDEX: usize = 3;
}
impl IqSymbol for BlockIQ3S {
    const INDEX: usize = 4;
}

/// Serves `dequantize_row_<iq format>`; ours (the scalar model) is no faster than stock's: stock first.
///
/// # Safety
/// ggml's contract for the symbol.
pub unsafe fn dequantize_row_iq<B: IqSymbol + VecDotEntry>(vx: *const c_void, y: *mut f32, k: i64) {
    // SAFETY: passed on.
    unsafe {
        dequantize_rows::<B>(
            B::DEQUANTIZE_NAME,
            |n| n.dequantize_row_iq[B::INDEX],
            true,
            &DEQUANTIZE_IQ_AGREES[B::INDEX],
            (BlockCount::Int64, Kernels::dequantize_row_iq::<B>),
            (vx, y, k),
        )
    }
}

/// # Safety
/// ggml's contract for `dequantize_row_tq1_0`.
pub unsafe fn dequantize_row_tq1_0(vx: *const c_void, y: *mut f32, k: i64) {
    // SAFETY: passed on; ours (the scalar model) is no faster than stock's.
    unsafe {
        dequantize_rows::<BlockTQ1_0>(
            "dequantize_row_tq1_0",
            |n| n.dequantize_row_tq1_0,
            true,
            &DEQUANTIZE_TQ1_0_AGREES,
            (BlockCount::Int64, Kernels::dequantize_row_tq1_0),
            (vx, y, k),
        )
    }
}

/// # Safety
/// ggml's contract for `dequantize_row_tq2_0`.
pub unsafe fn dequantize_row_tq2_0(vx: *const c_void, y: *mut f32, k: i64) {
    // SAFETY: passed on; ours (the scalar model) is no faster than stock's.
    unsafe {
        dequantize_rows::<BlockTQ2_0>(
            "dequantize_row_tq2_0",
            |n| n.dequantize_row_tq2_0,
            true,
            &DEQUANTIZE_TQ2_0_AGREES,
            (BlockCount::Int64, Kernels::dequantize_row_tq2_0),
            (vx, y, k),
        )
    }
}

/// # Safety
/// The fork's contract for `dequantize_row_pq2_0`.
pub unsafe fn dequantize_row_pq2_0(vx: *const c_void, y: *mut f32, k: i64) {
    // SAFETY: passed on.
    unsafe {
        dequantize_rows::<BlockPQ2_0>(
            "dequantize_row_pq2_0",
            |n| n.dequantize_row_pq2_0,
            false,
            &DEQUANTIZE_PQ2_0_AGREES,
            (BlockCount::Int64, Kernels::dequantize_row_pq2_0),
            (vx, y, k),
        )
    }
}

/// # Safety
/// The fork's contract for `dequantize_row_ptq1_0`.
pub unsafe fn dequantize_row_ptq1_0(vx: *const c_void, y: *mut f32, k: i64) {
    // SAFETY: passed on.
    unsafe {
        dequantize_rows::<BlockPTQ1_0>(
            "dequantize_row_ptq1_0",
            |n| n.dequantize_row_ptq1_0,
            false,
            &DEQUANTIZE_PTQ1_0_AGREES,
            (BlockCount::Int64, Kernels::dequantize_row_ptq1_0),
            (vx, y, k),
        )
    }
}

/// The arguments of `ggml_lowbit_mul_mat_q2_0_q8_0` (vec_dot's, plus the row and column counts).
#[derive(Clone, Copy)]
pub struct MulMatArgs {
    pub n: c_int,
    pub s: *mut f32,
    pub bs: usize,
    pub vx: *const c_void,
    pub bx: usize,
    pub vy: *const c_void,
    pub by: usize,
    pub nrows: c_int,
    pub ncols: c_int,
}

impl MulMatArgs {
    /// The arguments of a `ggml_lowbit_mul_mat_*` export, in its order.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        n: c_int,
        s: *mut f32,
        bs: usize,
        vx: *const c_void,
        bx: usize,
        vy: *const c_void,
        by: usize,
        nrows: c_int,
        ncols: c_int,
    ) -> MulMatArgs {
        MulMatArgs {
            n,
            s,
            bs,
            vx,
            bx,
            vy,
            by,
            nrows,
            ncols,
        }
    }
}

/// The stride of `count` rows in whole blocks of `block` bytes, each row `nb` blocks: `bytes` must be a multiple
/// of `block` and hold a row; a single row needs no stride.
fn block_stride(
    symbol: &str,
    what: &str,
    bytes: usize,
    block: usize,
    nb: usize,
    count: usize,
) -> usize {
    if count <= 1 {
        return nb;
    }
    if !bytes.is_multiple_of(block) || bytes / block < nb {
        crate::process::fatal(&format!(
            "{symbol}: {what} = {bytes} is not a whole number of {block}-byte blocks holding a row of {nb}"
        ));
    }
    bytes / block
}

/// Serves a `ggml_lowbit_mul_mat_*` call for a format of `B` blocks of `qk` weights against activation blocks
/// `A` of `act_qk` (q8_0: 32, q8_K: 256) with `kernel` (see the exports' documentation in `ffi.rs`).
///
/// # Safety
/// The C contract: rows, columns and outputs hold what the arguments describe.
unsafe fn mul_mat_rows<B: RawBlock, A: RawBlock>(
    symbol: &str,
    (qk, act_qk): (usize, usize),
    kernel: impl Fn(
        &Kernels,
        crate::tiles::Rows<'_, B>,
        crate::tiles::Rows<'_, A>,
        crate::tiles::Emit<'_>,
    ),
    a: MulMatArgs,
) {
    if a.nrows <= 0 || a.ncols <= 0 {
        return;
    }
    let (rows, cols) = (a.nrows as usize, a.ncols as usize);
    if cols > 1 && a.bs < rows {
        crate::process::fatal(&format!(
            "{symbol}: bs = {} floats is shorter than a column of {rows}",
            a.bs
        ));
    }
    let nb = whole_blocks(a.n as i64, qk);
    let per_block = qk / act_qk;
    let out = |r: usize, c: usize, v: f32| {
        // SAFETY: element (r, c) of the output the caller described.
        unsafe { *a.s.add(c * a.bs + r) = v }
    };
    if nb == 0 {
        (0..cols).for_each(|c| (0..rows).for_each(|r| out(r, c, 0.0)));
        return;
    }
    let xs = block_stride(symbol, "bx", a.bx, std::mem::size_of::<B>(), nb, rows);
    let ys = block_stride(
        symbol,
        "by",
        a.by,
        std::mem::size_of::<A>(),
        per_block * nb,
        cols,
    );
    // SAFETY: the caller's contract: `rows` rows of `nb` blocks `xs` apart, `cols` columns of `per_block·nb`
    // blocks `ys` apart.
    let (x, y) = unsafe {
        (
            view::<B>(a.vx, (rows - 1) * xs + nb),
            view::<A>(a.vy, (cols - 1) * ys + per_block * nb),
        )
    };
    let x = crate::tiles::Rows::new(x, nb, xs, rows).expect("sized from the strides");
    let y = crate::tiles::Rows::new(y, per_block * nb, ys, cols).expect("sized from the strides");
    count(&SERVED, config());
    kernel(&config().kernels, x, y, &mut |r, c, v| out(r, c, v));
}

/// Serves `ggml_lowbit_mul_mat_q2_0_q8_0` with the tile kernels.
///
/// # Safety
/// As `mul_mat_rows`.
pub unsafe fn mul_mat_q2_0_q8_0(a: MulMatArgs) {
    // SAFETY: passed on.
    unsafe {
        mul_mat_rows::<BlockQ2_0, BlockQ8_0>(
            "ggml_lowbit_mul_mat_q2_0_q8_0",
            (64, 32),
            Kernels::mul_mat_q2_0_q8_0,
            a,
        )
    }
}

/// Serves `ggml_lowbit_mul_mat_pq2_0_q8_0` with the tile kernels (the fork's PQ2_0).
///
/// # Safety
/// As `mul_mat_rows`.
pub unsafe fn mul_mat_pq2_0_q8_0(a: MulMatArgs) {
    // SAFETY: passed on.
    unsafe {
        mul_mat_rows::<BlockPQ2_0, BlockQ8_0>(
            "ggml_lowbit_mul_mat_pq2_0_q8_0",
            (128, 32),
            Kernels::mul_mat_pq2_0_q8_0,
            a,
        )
    }
}

/// Serves `ggml_lowbit_mul_mat_ptq1_0_q8_0` with the tile kernels (the fork's PTQ1_0).
///
/// # Safety
/// As `mul_mat_rows`.
pub unsafe fn mul_mat_ptq1_0_q8_0(a: MulMatArgs) {
    // SAFETY: passed on.
    unsafe {
        mul_mat_rows::<BlockPTQ1_0, BlockQ8_0>(
            "ggml_lowbit_mul_mat_ptq1_0_q8_0",
            (128, 32),
            Kernels::mul_mat_ptq1_0_q8_0,
            a,
        )
    }
}

/// Serves `ggml_lowbit_mul_mat_q1_0_q8_0` with the tile kernels.
///
/// # Safety
/// As `mul_mat_rows`.
pub unsafe fn mul_mat_q1_0_q8_0(a: MulMatArgs) {
    // SAFETY: passed on.
    unsafe {
        mul_mat_rows::<BlockQ1_0, BlockQ8_0>(
            "ggml_lowbit_mul_mat_q1_0_q8_0",
            (128, 32),
            Kernels::mul_mat_q1_0_q8_0,
            a,
        )
    }
}

/// Serves `ggml_lowbit_mul_mat_tq1_0_q8_K` with the tile kernels.
///
/// # Safety
/// As `mul_mat_rows`.
pub unsafe fn mul_mat_tq1_0_q8_k(a: MulMatArgs) {
    // SAFETY: passed on.
    unsafe {
        mul_mat_rows::<BlockTQ1_0, BlockQ8K>(
            "ggml_lowbit_mul_mat_tq1_0_q8_K",
            (256, 256),
            Kernels::mul_mat_tq1_0_q8_k,
            a,
        )
    }
}

/// Serves `ggml_lowbit_mul_mat_tq2_0_q8_K` with the tile kernels.
///
/// # Safety
/// As `mul_mat_rows`.
pub unsafe fn mul_mat_tq2_0_q8_k(a: MulMatArgs) {
    // SAFETY: passed on.
    unsafe {
        mul_mat_rows::<BlockTQ2_0, BlockQ8K>(
            "ggml_lowbit_mul_mat_tq2_0_q8_K",
            (256, 256),
            Kernels::mul_mat_tq2_0_q8_k,
            a,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::{blocks, blocks_mut};

    /// Rows of the agreement check on which `B`'s two modelled float orders (the scalar tables of each) give
    /// different bits.
    fn rows_telling_the_orders_apart<B: VecDotEntry>() -> usize {
        let haswell = B::vec_dot_entry(&Kernels::new(Isa::Scalar, FloatOrder::Haswell));
        let x64 = B::vec_dot_entry(&Kernels::new(Isa::Scalar, FloatOrder::X64));
        let mut differing = 0;
        agreement_rows::<B, ()>(|_, x, y| {
            // SAFETY: the scalar tables run on every CPU; x and y hold whole blocks that meet.
            let (a, b) = unsafe { (haswell(blocks(x), blocks(y)), x64(blocks(x), blocks(y))) };
            differing += usize::from(a.to_bits() != b.to_bits());
            None
        });
        differing
    }

    /// The check is sensitive: a stock library in the other modelled float order (a kernel in another order,
    /// as another ggml version could have) differs from ours on at least a quarter of the agreement rows of
    /// every format (measured: 22 of 64 for PQ2_0's two chains, 26 for Q2_0's, 62–64 for the IQ formats), and
    /// the q8_0 quantizers of the two builds differ on the rows' ties.
    #[test]
    fn agreement_rows_tell_the_two_float_orders_apart() {
        let counts = [
            ("Q2_0", rows_telling_the_orders_apart::<BlockQ2_0>()),
            ("Q1_0", rows_telling_the_orders_apart::<BlockQ1_0>()),
            ("PQ2_0", rows_telling_the_orders_apart::<BlockPQ2_0>()),
            ("PTQ1_0", rows_telling_the_orders_apart::<BlockPTQ1_0>()),
            ("TQ2_0", rows_telling_the_orders_apart::<BlockTQ2_0>()),
            ("TQ1_0", rows_telling_the_orders_apart::<BlockTQ1_0>()),
            ("IQ2_XXS", rows_telling_the_orders_apart::<BlockIQ2XXS>()),
            ("IQ2_XS", rows_telling_the_orders_apart::<BlockIQ2XS>()),
            ("IQ2_S", rows_telling_the_orders_apart::<BlockIQ2S>()),
            ("IQ3_XXS", rows_telling_the_orders_apart::<BlockIQ3XXS>()),
            ("IQ3_S", rows_telling_the_orders_apart::<BlockIQ3S>()),
        ];
        println!("{counts:?} of {AGREEMENT_ROWS} rows");
        for (format, differing) in counts {
            assert!(
                4 * differing >= AGREEMENT_ROWS,
                "{format}: the orders differ on only {differing} of {AGREEMENT_ROWS} agreement rows"
            );
        }
        let quantized = |order| {
            let x = agreement_floats(&mut 1, 0, AGREEMENT_BLOCKS, 32);
            let mut out = vec![0u8; AGREEMENT_BLOCKS * size_of::<BlockQ8_0>()];
            Kernels::new(Isa::Scalar, order).quantize_row_q8_0(&x, blocks_mut(&mut out));
            out
        };
        assert_ne!(quantized(FloatOrder::Haswell), quantized(FloatOrder::X64));
    }
}
