//! The fork's generic C (`ggml_lowbit::ab::fork`) built with the `cc` crate's C compiler, for the tests and
//! benches; a failure to build is a test failure, never a skip.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

pub use ggml_lowbit::ab::fork::ForkReference;

fn compiler() -> PathBuf {
    cc_compiler(false)
}

/// The `cc` crate's C (or, `cpp`, C++) compiler for this target; the Metal tests build their C++ with it too.
pub fn cc_compiler(cpp: bool) -> PathBuf {
    cc::Build::new()
        .cpp(cpp)
        .target("x86_64-unknown-linux-gnu")
        .host("x86_64-unknown-linux-gnu")
        .opt_level(3)
        .cargo_metadata(false)
        .get_compiler()
        .path()
        .to_path_buf()
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The reference, `-O3 -mavx2 -mf16c` with `-mfma` (the fork's x86 release build) or `-mno-fma`.
pub fn build(fma: bool) -> ForkReference {
    ggml_lowbit::ab::fork::build(&compiler(), root(), fma).expect("build the fork reference")
}

/// The stand-in fork library and `tests/c/fork_host.c` linked against it; returns the host executable.
pub fn build_fake_fork(fma: bool) -> PathBuf {
    ggml_lowbit::ab::fork::build_fake_fork(&compiler(), root(), fma).expect("build the fake fork")
}
