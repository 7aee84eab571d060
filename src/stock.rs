//! The pinned stock llama.cpp, built by `scripts/stock-llama.sh` and loaded with libloading: the oracle for every
//! bit test and the baseline for every speed ratio.

use std::ffi::{c_int, c_void};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use libloading::Library;

use crate::FloatOrder;

pub type VecDotFn =
    unsafe extern "C" fn(c_int, *mut f32, usize, *const c_void, usize, *const c_void, usize, c_int);
pub type QuantizeRowFn = unsafe extern "C" fn(*const f32, *mut c_void, i64);
pub type DequantizeRowFn = unsafe extern "C" fn(*const c_void, *mut f32, i64);

/// The repository's `scripts/` folder (the crate root is the repository root).
pub fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts")
}

/// Builds (or finds in the cache) the stock build for `order` and returns the folder with its libraries.
/// Build output goes to this process's stderr; a failure is an error, never a skip.
pub fn ensure_built(order: FloatOrder) -> Result<PathBuf, String> {
    ensure_built_variant(order.name())
}

/// As `ensure_built`, by the script's variant name (`haswell`, `x64`, `haswell-dl`).
pub fn ensure_built_variant(variant: &str) -> Result<PathBuf, String> {
    run_build_script("stock-llama.sh", variant, "libggml-cpu.so")
}

/// The pinned llama.cpp source tree (unpacked by `scripts/stock-llama.sh` next to its builds), after making sure
/// the haswell build exists.
pub fn source_dir() -> Result<PathBuf, String> {
    let build = ensure_built(FloatOrder::Haswell)?;
    let src = build
        .parent()
        .map(|root| root.join("src/llama.cpp"))
        .ok_or_else(|| format!("{} has no parent", build.display()))?;
    if !src.join("ggml/src/ggml-common.h").is_file() {
        return Err(format!("no pinned source under {}", src.display()));
    }
    Ok(src)
}

/// Runs `scripts/<script> <variant>` and returns the folder it prints as its last line, which must hold
/// `expect`. Its progress reaches our stderr once it ends, less the "cached" line every run of a cached build
/// prints; a failure is an error carrying the script's messages, never a skip.
pub fn run_build_script(script: &str, variant: &str, expect: &str) -> Result<PathBuf, String> {
    let script = scripts_dir().join(script);
    let out = Command::new("bash")
        .arg(&script)
        .arg(variant)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "{} {variant} failed ({}):\n{}",
            script.display(),
            out.status,
            stderr.trim_end()
        ));
    }
    let news: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.contains(": cached ("))
        .collect();
    if !news.is_empty() {
        eprintln!("{}", news.join("\n"));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let dir = stdout.lines().last().map(str::trim).unwrap_or_default();
    if dir.is_empty() || !Path::new(dir).join(expect).is_file() {
        return Err(format!(
            "{} {variant} printed no folder holding {expect}",
            script.display()
        ));
    }
    Ok(PathBuf::from(dir))
}

/// One loaded stock build: `libggml-base.so` and `libggml-cpu.so`, initialised with `ggml_cpu_init()`.
pub struct StockLib {
    pub order: FloatOrder,
    /// The build's name in reports: the float order's for the pinned builds, else the prebuilt build's.
    pub build: String,
    pub dir: PathBuf,
    // Field order matters for drop: cpu before base.
    cpu: Library,
    _base: Library,
}

impl StockLib {
    /// Loads the build in `dir` (the folder `scripts/stock-llama.sh` prints).
    pub fn open(order: FloatOrder, dir: &Path) -> Result<StockLib, String> {
        StockLib::open_files(
            order.name(),
            order,
            &dir.join("libggml-base.so"),
            &dir.join("libggml-cpu.so"),
        )
    }

    /// Loads libggml-base from `base` and the CPU backend (a linked libggml-cpu or one `GGML_BACKEND_DL`
    /// variant's module) from `cpu`; `build` names it in reports and `order` is its probed float order.
    pub fn open_files(
        build: &str,
        order: FloatOrder,
        base: &Path,
        cpu: &Path,
    ) -> Result<StockLib, String> {
        let dir = cpu.parent().unwrap_or(Path::new("."));
        let load = |path: &Path| {
            // SAFETY: loading ggml runs only its static initialisers, which have no preconditions.
            unsafe { Library::new(path) }
                .map_err(|e| format!("cannot load {}: {e}", path.display()))
        };
        let base = load(base)?;
        let cpu = load(cpu)?;
        // SAFETY: `ggml_cpu_init` has the C signature `void(void)` and may be called any number of times.
        unsafe {
            let init: libloading::Symbol<unsafe extern "C" fn()> = cpu
                .get(b"ggml_cpu_init\0")
                .map_err(|e| format!("{}: no ggml_cpu_init: {e}", dir.display()))?;
            init();
        }
        Ok(StockLib {
            order,
            build: build.to_string(),
            dir: dir.to_path_buf(),
            cpu,
            _base: base,
        })
    }

    /// Builds if needed, then loads.
    pub fn load(order: FloatOrder) -> Result<StockLib, String> {
        let dir = ensure_built(order)?;
        StockLib::open(order, &dir)
    }

    fn symbol<T: Copy>(&self, name: &str) -> Result<T, String> {
        let cname = format!("{name}\0");
        // SAFETY: callers ask for each name with its ggml C signature (see the typed accessors below).
        unsafe { self.cpu.get::<T>(cname.as_bytes()) }
            .map(|s| *s)
            .map_err(|e| format!("stock {} has no {name}: {e}", self.order.name()))
    }

    /// The address of `name` in the build (its CPU backend and the libraries it links), if it has it; valid
    /// while `self` lives.
    pub fn address(&self, name: &std::ffi::CStr) -> Option<*mut std::ffi::c_void> {
        // SAFETY: looking a symbol up has no precondition; callers call it only through its ggml C type.
        unsafe {
            self.cpu
                .get::<*mut std::ffi::c_void>(name.to_bytes_with_nul())
        }
        .ok()
        .map(|s| *s)
    }

    /// A `ggml_vec_dot_*` symbol; valid while `self` lives.
    pub fn vec_dot(&self, name: &str) -> Result<VecDotFn, String> {
        self.symbol(name)
    }

    /// A `quantize_row_*` symbol; valid while `self` lives.
    pub fn quantize_row(&self, name: &str) -> Result<QuantizeRowFn, String> {
        self.symbol(name)
    }

    /// A `dequantize_row_*` symbol (exported by ggml-base, reached through ggml-cpu's dependencies).
    pub fn dequantize_row(&self, name: &str) -> Result<DequantizeRowFn, String> {
        self.symbol(name)
    }
}

/// The cache the build scripts share: `$GGML_LOWBIT_CACHE_DIR`, else `~/.cache/ggml-lowbit`.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("GGML_LOWBIT_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into()))
                .join(".cache/ggml-lowbit")
        })
}
