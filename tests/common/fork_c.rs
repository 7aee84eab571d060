//! Compiles `bench/c/pq2_0_generic.c` (the PrismML fork's generic PQ2_0 dot product written from the
//! specification) into a shared library with the `cc` crate's C compiler, with or without FMA, and loads it.
//! Shared by `tests/fork_reference.rs` and `bench/fork_generic.rs`.

use std::path::PathBuf;
use std::process::Command;

use ggml_lowbit::stock::VecDotFn;

/// The compiled reference: keeps the library loaded while `vec_dot` is used.
pub struct ForkReference {
    _lib: libloading::Library,
    pub vec_dot: VecDotFn,
}

/// Builds with `-O3 -mavx2 -mf16c` and `-mfma` (the fork's x86 release build: GCC contracts `+= a * b` into an
/// FMA) or `-mno-fma` (every product and sum rounded on its own).
pub fn build(fma: bool) -> ForkReference {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = root.join("target/fork-c");
    std::fs::create_dir_all(&out).expect("target/fork-c");
    let compiler = cc::Build::new()
        .target("x86_64-unknown-linux-gnu")
        .host("x86_64-unknown-linux-gnu")
        .opt_level(3)
        .cargo_metadata(false)
        .get_compiler();
    let so = out.join(format!(
        "libpq2_0_generic_{}.so",
        if fma { "fma" } else { "nofma" }
    ));
    let status = Command::new(compiler.path())
        .args([
            "-O3",
            "-mavx2",
            "-mf16c",
            if fma { "-mfma" } else { "-mno-fma" },
            "-shared",
            "-fPIC",
            "-o",
        ])
        .arg(&so)
        .arg(root.join("bench/c/pq2_0_generic.c"))
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "compiling bench/c/pq2_0_generic.c failed");
    // SAFETY: our own freshly compiled C file, with no initialisers.
    let lib = unsafe { libloading::Library::new(&so) }.expect("load the reference");
    // SAFETY: the function has ggml's vec_dot signature.
    let vec_dot = *unsafe { lib.get::<VecDotFn>(b"fork_vec_dot_pq2_0_q8_0\0") }.expect("symbol");
    ForkReference { _lib: lib, vec_dot }
}
