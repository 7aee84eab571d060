//! Old CPUs for real: the library run under QEMU's user-mode emulator (`qemu-x86_64 -cpu MODEL`, Debian's
//! qemu-user, installed by `scripts/qemu-user.sh`), whose CPUID reports the model's features and whose TCG raises
//! SIGILL for an instruction the model lacks. `Nehalem` has SSE4.2 and no AVX; `Haswell` has AVX2, FMA and F16C
//! and no AVX-512 (QEMU 7.2 emulates no AVX-512 at all). Under each: the tier the library picks, the bit
//! comparison through the built `libggml_lowbit.so` against the stock builds that model can run, and a tiny
//! model preloaded into stock llama-completion, whose text must be the text it gives natively.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn qemu() -> PathBuf {
    ggml_lowbit::stock::run_build_script("qemu-user.sh", "x86_64", "qemu-x86_64")
        .expect("qemu-user (scripts/qemu-user.sh)")
        .join("qemu-x86_64")
}

fn lib() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/libggml_lowbit.so")
}

/// `program args` under QEMU emulating `cpu`, with `guest_env` set in the emulated process only (`-E`; the
/// emulator itself must not load the library).
fn under(cpu: &str, program: &Path, args: &[&str], guest_env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(qemu());
    c.args(["-cpu", cpu]);
    for (k, v) in guest_env {
        c.arg("-E").arg(format!("{k}={v}"));
    }
    c.arg(program)
        .args(args)
        .env_remove("LD_PRELOAD")
        .env_remove("GGML_LOWBIT_ISA")
        .output()
        .unwrap_or_else(|e| panic!("run {} under qemu: {e}", program.display()))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `run()` again until its output holds llama-completion's last log line (at most 16 runs): llama.cpp logs, the
/// generated text included, from a thread of its own that can lose its tail at exit on a busy machine.
fn whole_output(run: impl Fn() -> Output) -> Output {
    let marker = ggml_lowbit::ab::e2e::completion_marker("llama-completion").expect("a marker");
    for _ in 0..16 {
        let out = run();
        if !out.status.success() || String::from_utf8_lossy(&out.stderr).contains(marker) {
            return out;
        }
    }
    panic!("llama-completion lost the end of its output 16 times in a row");
}

/// The emulated CPU models and what the library must pick under each: instruction set, and the float order of
/// the build a release llama.cpp loads there.
const MODELS: [(&str, &str, &str); 2] =
    [("Nehalem", "scalar", "x64"), ("Haswell", "avx2", "haswell")];

#[test]
fn under_emulated_old_cpus_the_library_picks_the_tier_they_have() {
    let ab = Path::new(env!("CARGO_BIN_EXE_ggml-lowbit-ab"));
    let lib = lib();
    for (cpu, isa, order) in MODELS {
        let out = under(cpu, ab, &["config", "--lib", lib.to_str().unwrap()], &[]);
        let t = text(&out);
        println!("{cpu}: {t}");
        assert!(out.status.success(), "{cpu}: {t}");
        assert!(
            t.contains(&format!("instruction set: {isa}\n")),
            "{cpu}: {t}"
        );
        assert!(t.contains(&format!("): {order}\n")), "{cpu}: {t}");
    }
}

/// `bits` through the cdylib and the rlib under each model, against the stock builds that model runs (x64
/// everywhere; the haswell build needs AVX2): 3,000 random and adversarial cases per symbol, 0 mismatches, no
/// SIGILL. Under Nehalem that is the scalar path on a CPU without AVX; under Haswell the AVX2 kernels on one
/// without AVX-512.
#[test]
fn under_emulated_old_cpus_the_bits_are_stocks() {
    let ab = Path::new(env!("CARGO_BIN_EXE_ggml-lowbit-ab"));
    let lib = lib();
    for (cpu, _, _) in MODELS {
        let build = if cpu == "Nehalem" { "x64" } else { "all" };
        let args = [
            "bits",
            "--build",
            build,
            "--cases",
            "3000",
            "--lib",
            lib.to_str().unwrap(),
        ];
        let out = under(cpu, ab, &args, &[]);
        let t = text(&out);
        let totals: Vec<&str> = t.lines().filter(|l| l.starts_with("bits: ")).collect();
        println!("{cpu} ({build}): {totals:?}");
        assert!(!t.contains("Illegal instruction"), "{cpu}: {t}");
        assert!(out.status.success(), "{cpu}: {t}");
        assert!(
            totals.len() == 1 && totals[0].ends_with(" comparisons, 0 mismatches"),
            "{cpu}: {t}"
        );
        let subjects: Vec<&str> = t
            .lines()
            .filter(|l| l.contains("ggml_vec_dot_q2_0_q8_0"))
            .collect();
        assert!(
            subjects.iter().any(|l| l.contains("cdylib")),
            "{cpu}: the cdylib was not compared: {t}"
        );
        if cpu == "Nehalem" {
            assert!(
                !subjects.iter().any(|l| l.contains("rlib/avx2")),
                "{cpu}: an AVX2 subject ran on a CPU without AVX2: {t}"
            );
        } else {
            assert!(subjects.iter().any(|l| l.contains("rlib/avx2")), "{t}");
        }
    }
}

/// A tiny Q2_0 model through stock llama-completion, preloaded, under each model (the x64 build under Nehalem,
/// the haswell build under Haswell): the text it gives natively without the library, no SIGILL, the library's
/// log naming the tier, and whole products taken by the hook.
#[test]
fn under_emulated_old_cpus_a_preloaded_model_keeps_its_text() {
    let dir = std::env::temp_dir().join(format!("ggml-lowbit-qemu-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = dir.join("tiny.gguf");
    let out = Command::new(env!("CARGO_BIN_EXE_ggml-lowbit-ab"))
        .args(["model", "--preset", "tiny", "--seed", "11", "--out"])
        .arg(&model)
        .output()
        .expect("model");
    assert!(out.status.success(), "{}", text(&out));
    let lib = lib();
    for (cpu, isa, _) in MODELS {
        let build = if cpu == "Nehalem" { "x64" } else { "haswell" };
        let tools = ggml_lowbit::stock::ensure_built_variant(build).expect("stock build");
        let completion = tools.join("llama-completion");
        let args = [
            "-m",
            model.to_str().unwrap(),
            "-p",
            "The quick brown fox",
            "-n",
            "8",
            "--temp",
            "0",
            "-t",
            "2",
            "-no-cnv",
            "--no-warmup",
        ];
        let native = whole_output(|| {
            Command::new(&completion)
                .args(args)
                .env_remove("LD_PRELOAD")
                .output()
                .expect("llama-completion")
        });
        assert!(native.status.success(), "{}", text(&native));
        let emulated = whole_output(|| {
            under(
                cpu,
                &completion,
                &args,
                &[
                    ("LD_PRELOAD", lib.to_str().unwrap()),
                    ("GGML_LOWBIT_LOG", "1"),
                ],
            )
        });
        let log = String::from_utf8_lossy(&emulated.stderr);
        assert!(!log.contains("Illegal instruction"), "{cpu}: {log}");
        assert!(emulated.status.success(), "{cpu}: {log}");
        assert_eq!(
            String::from_utf8_lossy(&emulated.stdout),
            String::from_utf8_lossy(&native.stdout),
            "{cpu}: the text differs from the native run's"
        );
        assert!(
            log.contains(&format!("instruction set {isa}")),
            "{cpu}: {log}"
        );
        let products = log
            .lines()
            .find_map(|l| {
                l.strip_prefix("ggml-lowbit: ")?
                    .split(" of them whole MUL_MAT products")
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .unwrap_or(0);
        println!("{cpu}: identical text, {products} whole products");
        assert!(products > 0, "{cpu}: no whole products: {log}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
