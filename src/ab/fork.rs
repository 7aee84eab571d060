//! The PrismML fork's generic C, the yardstick for PQ2_0 and PTQ1_0: the fork's build is not available here, so
//! `bench/c/pq2_0_generic.c` and `bench/c/ptq1_0_generic.c` (written from `formats.md` §3–4) are compiled the way
//! the fork is built on x86 (`-O3 -mavx2 -mf16c`, with `-mfma` as in a release build or `-mno-fma`), into
//! `target/fork-c/`. Used by `speed` (the baseline for the fork's symbols), the tests and the benches.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::stock::{DequantizeRowFn, VecDotFn};

/// The compiled reference; keeps the library loaded while its functions are used.
pub struct ForkReference {
    _lib: libloading::Library,
    pub vec_dot_pq2_0: VecDotFn,
    pub vec_dot_ptq1_0: VecDotFn,
    pub dequantize_pq2_0: DequantizeRowFn,
    pub dequantize_ptq1_0: DequantizeRowFn,
}

fn tag(fma: bool) -> &'static str {
    if fma {
        "fma"
    } else {
        "nofma"
    }
}

/// The C compiler: `$CC` if set, else `cc`.
pub fn default_compiler() -> PathBuf {
    std::env::var_os("CC")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("cc"))
}

/// Compiles `args` with `compiler` into `out`: to a file of its own first, renamed into place, so concurrent
/// builds (parallel tests) never load a half-written library.
pub(crate) fn compile(compiler: &Path, args: &[String], out: &Path) -> Result<(), String> {
    let tmp = out.with_extension(format!(
        "{}.{:?}.tmp",
        std::process::id(),
        std::thread::current().id()
    ));
    let status = Command::new(compiler)
        .args(args)
        .arg("-o")
        .arg(&tmp)
        .status()
        .map_err(|e| format!("cannot run the C compiler {}: {e}", compiler.display()))?;
    if !status.success() {
        return Err(format!(
            "{} {} failed ({status})",
            compiler.display(),
            args.join(" ")
        ));
    }
    std::fs::rename(&tmp, out).map_err(|e| format!("{}: {e}", out.display()))
}

fn flags(fma: bool) -> Vec<String> {
    [
        "-O3",
        "-mavx2",
        "-mf16c",
        if fma { "-mfma" } else { "-mno-fma" },
        "-shared",
        "-fPIC",
    ]
    .map(String::from)
    .to_vec()
}

fn sources(root: &Path) -> Vec<String> {
    ["bench/c/pq2_0_generic.c", "bench/c/ptq1_0_generic.c"]
        .map(|s| root.join(s).display().to_string())
        .to_vec()
}

/// Builds and loads the reference (symbols `fork_*`), with or without FMA. `root` is the repository.
pub fn build(compiler: &Path, root: &Path, fma: bool) -> Result<ForkReference, String> {
    let dir = root.join("target/fork-c");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let so = dir.join(format!("libfork_generic_{}.so", tag(fma)));
    compile(compiler, &[flags(fma), sources(root)].concat(), &so)?;
    // SAFETY: our own freshly compiled C, with no initialisers.
    let lib = unsafe { libloading::Library::new(&so) }.map_err(|e| e.to_string())?;
    // SAFETY: the functions have ggml's vec_dot and dequantize signatures.
    unsafe {
        let get_dot = |name: &[u8]| {
            lib.get::<VecDotFn>(name)
                .map(|f| *f)
                .map_err(|e| e.to_string())
        };
        let get_deq = |name: &[u8]| {
            lib.get::<DequantizeRowFn>(name)
                .map(|f| *f)
                .map_err(|e| e.to_string())
        };
        Ok(ForkReference {
            vec_dot_pq2_0: get_dot(b"fork_vec_dot_pq2_0_q8_0\0")?,
            vec_dot_ptq1_0: get_dot(b"fork_vec_dot_ptq1_0_q8_0\0")?,
            dequantize_pq2_0: get_deq(b"fork_dequantize_row_pq2_0\0")?,
            dequantize_ptq1_0: get_deq(b"fork_dequantize_row_ptq1_0\0")?,
            _lib: lib,
        })
    }
}

/// A stand-in for the fork's CPU library and a program on it: the same C compiled with the fork's own symbol
/// names (`ggml_vec_dot_pq2_0_q8_0`, …) into `libfakefork_{fma,nofma}.so`, and `tests/c/fork_host.c` linked
/// against it (rpath set), so that `LD_PRELOAD` and `dlsym(RTLD_NEXT, …)` meet it as they would meet the fork.
/// Returns the host executable.
pub fn build_fake_fork(compiler: &Path, root: &Path, fma: bool) -> Result<PathBuf, String> {
    let dir = root
        .join("target/fork-c")
        .join(format!("fake-fork-{}", tag(fma)));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let lib = dir.join(format!("libfakefork_{}.so", tag(fma)));
    let renames = [
        "vec_dot_pq2_0_q8_0",
        "vec_dot_ptq1_0_q8_0",
        "dequantize_row_pq2_0",
        "dequantize_row_ptq1_0",
    ]
    .map(|s| {
        let ggml = if s.starts_with("vec_dot") {
            format!("ggml_{s}")
        } else {
            s.to_string()
        };
        format!("-Dfork_{s}={ggml}")
    });
    compile(
        compiler,
        &[flags(fma), renames.to_vec(), sources(root)].concat(),
        &lib,
    )?;
    let host = dir.join("fork_host");
    compile(
        compiler,
        &[
            "-O2".to_string(),
            root.join("tests/c/fork_host.c").display().to_string(),
            lib.display().to_string(),
            format!("-Wl,-rpath,{}", dir.display()),
        ],
        &host,
    )?;
    Ok(host)
}
