//! The library preloaded over a prebuilt ggml from the package registries, as its users get it: Debian's
//! libggml0 0.27.0 (`scripts/prebuilt-ggml.sh`), whose CPU backend is dlopened per CPU variant and whose Q2_0 has
//! a kernel of its own in an order the library does not model. Its programs need glibc 2.38, so the host runs
//! through trixie's loader from the same fetch. `tests/c/vec_dot_host.c` loads one variant as a release
//! llama.cpp does and compares every low-bit vec_dot, as ggml's own relocations reach it (the preload) against
//! the module's own definition, bit for bit.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const CASES: &str = "20000";
const SYMBOLS: usize = 9;

fn library() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ggml-lowbit-ab"))
        .parent()
        .unwrap()
        .join("libggml_lowbit.so")
}

fn debian_0_27_0() -> PathBuf {
    ggml_lowbit::stock::run_build_script(
        "prebuilt-ggml.sh",
        "debian-libggml0-0.27.0",
        "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
    )
    .expect("Debian's libggml0 0.27.0 (scripts/prebuilt-ggml.sh)")
}

fn host(dir: &Path) -> PathBuf {
    let exe = dir.join("vec_dot_host");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/vec_dot_host.c");
    let compiler = ggml_lowbit::ab::fork::default_compiler();
    let status = Command::new(&compiler)
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-ldl")
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "cannot build {}", src.display());
    exe
}

/// The host over `variant`'s module, run through trixie's loader with the library preloaded and `env` set.
fn run(root: &Path, host: &Path, variant: &str, env: &[(&str, &str)]) -> (Output, String) {
    let lib = root.join("usr/lib/x86_64-linux-gnu");
    let mut cmd = Command::new(lib.join("ld-linux-x86-64.so.2"));
    cmd.arg("--library-path")
        .arg(format!("{}:/usr/lib/x86_64-linux-gnu", lib.display()))
        .arg("--preload")
        .arg(library())
        .arg(host)
        .arg(lib.join(format!("ggml/backends0/libggml-cpu-{variant}.so")))
        .arg(CASES);
    for var in [
        "GGML_LOWBIT_MATCH",
        "GGML_LOWBIT_ISA",
        "GGML_LOWBIT_VERIFY",
        "GGML_LOWBIT_DISABLE",
        "GGML_LOWBIT_SERVE_ALL",
        "LD_PRELOAD",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("GGML_LOWBIT_LOG", "1").envs(env.iter().copied());
    let out = cmd.output().expect("run the host through trixie's loader");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{variant} {env:?}:\n{text}");
    (out, text)
}

/// The calls the library served, from its exit line.
fn served(text: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.contains("calls served by ggml-lowbit"))
        .unwrap_or_else(|| panic!("no exit line in {text}"));
    line.split_whitespace()
        .nth(1)
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no count in {line:?}"))
}

/// The variants this CPU can run: x64 always, haswell with AVX2, FMA, F16C and BMI2 (the others need AVX-512 or
/// AMX and are for machines that have them).
fn variants() -> Vec<&'static str> {
    let mut v = vec!["x64"];
    if std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
        && std::arch::is_x86_feature_detected!("f16c")
        && std::arch::is_x86_feature_detected!("bmi2")
    {
        v.push("haswell");
    } else {
        println!("SKIPPED the haswell variant: this CPU lacks AVX2, FMA, F16C or BMI2");
    }
    v
}

#[test]
fn over_debian_libggml0_0_27_0_every_vec_dot_keeps_its_bits_and_only_q2_0_is_left_to_stock() {
    let root = debian_0_27_0();
    let dir = std::env::temp_dir().join(format!("ggml-lowbit-prebuilt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let host = host(&dir);
    for variant in variants() {
        // Every symbol ours can serve is served, so its bits are compared whatever the faster kernel here.
        for env in [&[("GGML_LOWBIT_SERVE_ALL", "1")][..], &[]] {
            let (out, text) = run(&root, &host, variant, env);
            assert!(out.status.success(), "{variant} {env:?}: {text}");
            let lines: Vec<&str> = text.lines().filter(|l| l.contains(" cases, ")).collect();
            assert_eq!(lines.len(), SYMBOLS, "{text}");
            assert!(
                lines.iter().all(|l| l.ends_with(", 0 mismatches")),
                "{text}"
            );
            let order = if variant == "x64" { "x64" } else { "haswell" };
            assert!(
                text.contains(&format!(
                    "float order {order} (probed against the stock library)"
                )),
                "{text}"
            );
            // 0.27.0's AVX2 Q2_0 kernel has its own order; its x64 variant keeps the generic C, modelled.
            let q2_named =
                text.contains("ggml_vec_dot_q2_0_q8_0: the stock kernel follows neither");
            assert_eq!(q2_named, variant != "x64", "{text}");
            assert!(!text.contains("every call is passed to stock"), "{text}");
            if !env.is_empty() {
                let all: u64 = CASES.parse().unwrap();
                let want = if variant == "x64" {
                    SYMBOLS
                } else {
                    SYMBOLS - 1
                };
                assert_eq!(served(&text), want as u64 * all, "{text}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The comparison can fail: the other build's order, forced over a variant, gives other bits.
#[test]
fn the_prebuilt_comparison_catches_a_forced_wrong_order() {
    let root = debian_0_27_0();
    let dir = std::env::temp_dir().join(format!("ggml-lowbit-prebuilt-neg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let host = host(&dir);
    let (out, text) = run(
        &root,
        &host,
        "x64",
        &[
            ("GGML_LOWBIT_SERVE_ALL", "1"),
            ("GGML_LOWBIT_MATCH", "haswell"),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains(" cases, ") && !l.ends_with(", 0 mismatches")),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
