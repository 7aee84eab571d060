//! The library over the PrismML fork, as a user runs it: `LD_PRELOAD=libggml_lowbit.so` in front of a program
//! linked against a library that exports the fork's symbols. The fork's build is not available here, so the
//! stand-in is the fork's generic C written from the specification (`bench/c/*_generic.c`), compiled with the
//! fork's symbol names, with FMA (a release x86 build) and without; `tests/c/fork_host.c` calls it.
//!
//! Checked: identical results with and without the preload; the probe finds the right float order through the
//! fork's own symbols (there is no Q2_0 in the stand-in); `GGML_LOWBIT_VERIFY=1` compares every call with zero
//! mismatches; a forced wrong order is caught by `GGML_LOWBIT_VERIFY=abort`; `GGML_LOWBIT_DISABLE=1` passes
//! every call through.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn library() -> PathBuf {
    let lib = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/release/libggml_lowbit.so");
    assert!(
        lib.exists(),
        "{} is missing: run `cargo build --release` first",
        lib.display()
    );
    lib
}

fn run(host: &Path, preload: bool, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(host);
    if preload {
        cmd.env("LD_PRELOAD", library());
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run the fork host")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn check_build(fma: bool) {
    let host = common::fork_c::build_fake_fork(fma);
    let order = if fma { "haswell" } else { "x64" };
    let plain = run(&host, false, &[]);
    assert!(plain.status.success(), "{}", text(&plain.stderr));
    let want = text(&plain.stdout);
    assert!(want.contains("1600 calls"), "{want}");

    let served = run(&host, true, &[("GGML_LOWBIT_LOG", "1")]);
    let log = text(&served.stderr);
    println!("{log}");
    assert!(served.status.success(), "{log}");
    assert_eq!(
        text(&served.stdout),
        want,
        "results differ under the preload"
    );
    assert!(
        log.contains(&format!(
            "float order {order} (probed against the stock library)"
        )),
        "{log}"
    );
    assert!(log.contains("1600 calls served by ggml-lowbit"), "{log}");

    let verified = run(&host, true, &[("GGML_LOWBIT_VERIFY", "1")]);
    let log = text(&verified.stderr);
    println!("{log}");
    assert!(verified.status.success(), "{log}");
    assert_eq!(text(&verified.stdout), want);
    assert!(
        log.contains("1600 calls compared with stock, 0 mismatches"),
        "{log}"
    );

    let wrong = if fma { "x64" } else { "haswell" };
    let caught = run(
        &host,
        true,
        &[
            ("GGML_LOWBIT_VERIFY", "abort"),
            ("GGML_LOWBIT_MATCH", wrong),
        ],
    );
    let log = text(&caught.stderr);
    assert!(
        !caught.status.success(),
        "a wrong float order went unnoticed"
    );
    assert!(
        log.contains("GGML_LOWBIT_VERIFY=abort: ggml_vec_dot_p")
            && log.contains("differs from stock"),
        "{log}"
    );

    let passed = run(
        &host,
        true,
        &[("GGML_LOWBIT_DISABLE", "1"), ("GGML_LOWBIT_LOG", "1")],
    );
    let log = text(&passed.stderr);
    assert!(passed.status.success(), "{log}");
    assert_eq!(text(&passed.stdout), want);
    assert!(
        log.contains("0 calls served by ggml-lowbit, 1600 passed to stock"),
        "{log}"
    );
}

#[test]
fn preloaded_over_a_fork_built_with_fma() {
    check_build(true);
}

#[test]
fn preloaded_over_a_fork_built_without_fma() {
    check_build(false);
}
