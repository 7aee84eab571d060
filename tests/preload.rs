//! Tier 3: the built `libggml_lowbit.so` preloaded (`LD_PRELOAD`) into a real llama.cpp program of each pinned
//! stock build: llama.cpp's own `test-quantize-fns`. Checks that the library is really called, that it chooses
//! the right float order by probing the stock symbols, that its results equal stock's on every call
//! (`GGML_LOWBIT_VERIFY`), that a wrong kernel is caught, and that `GGML_LOWBIT_DISABLE` passes every call on.

use std::path::PathBuf;
use std::process::{Command, Output};

use ggml_lowbit::FloatOrder;

fn library() -> PathBuf {
    // The harness refuses a stale library; the preload below must test the current sources.
    let out = Command::new(env!("CARGO_BIN_EXE_ggml-lowbit-ab"))
        .arg("config")
        .output()
        .expect("run harness");
    assert!(
        out.status.success(),
        "libggml_lowbit.so missing or stale (run cargo build --release): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_ggml-lowbit-ab"));
    exe.parent().unwrap().join("libggml_lowbit.so")
}

fn run_preloaded(order: FloatOrder, env: &[(&str, &str)]) -> (Output, String) {
    let dir = ggml_lowbit::stock::ensure_built(order).expect("stock build");
    let mut cmd = Command::new(dir.join("test-quantize-fns"));
    cmd.arg("-v"); // prints "N tests failed" at the end
    cmd.current_dir(&dir).env("LD_PRELOAD", library());
    for var in [
        "GGML_LOWBIT_MATCH",
        "GGML_LOWBIT_ISA",
        "GGML_LOWBIT_LOG",
        "GGML_LOWBIT_VERIFY",
        "GGML_LOWBIT_DISABLE",
        "GGML_LOWBIT_SERVE_ALL",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run test-quantize-fns");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{} {env:?}:\n{text}", order.name());
    (out, text)
}

/// The number before `word` in the line that contains `marker`.
fn count_before(text: &str, marker: &str, word: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("no line with {marker:?}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| w.starts_with(word))
        .unwrap_or_else(|| panic!("no {word:?} in {line:?}"));
    words[at - 1]
        .parse()
        .unwrap_or_else(|_| panic!("no count before {word:?} in {line:?}"))
}

#[test]
fn test_quantize_fns_passes_and_the_probe_picks_each_builds_order() {
    for order in FloatOrder::ALL {
        let (out, text) = run_preloaded(order, &[("GGML_LOWBIT_LOG", "1")]);
        assert!(
            out.status.success(),
            "test-quantize-fns failed under the preload"
        );
        assert!(text.contains("0 tests failed"), "{text}");
        let want = format!(
            "float order {} (probed against the stock library)",
            order.name()
        );
        assert!(text.contains(&want), "expected {want:?}");
        assert!(
            count_before(&text, "calls served by ggml-lowbit", "calls") > 0,
            "the library was not called"
        );
        // Every symbol test-quantize-fns calls was checked against its stock one, and agreed.
        assert!(!text.contains("gives other bits"), "{text}");
    }
}

#[test]
fn verify_compares_every_call_with_stock_and_finds_no_difference() {
    for order in FloatOrder::ALL {
        let (out, text) = run_preloaded(order, &[("GGML_LOWBIT_VERIFY", "1")]);
        assert!(out.status.success());
        let compared = count_before(&text, "ggml-lowbit verify:", "calls");
        assert!(compared > 0, "nothing compared");
        assert_eq!(
            count_before(&text, "ggml-lowbit verify:", "mismatches"),
            0,
            "{text}"
        );
    }
}

#[test]
fn verify_catches_a_wrong_kernel() {
    // Forcing the other build's float order is a wrong kernel for this stock library.
    let (out, text) = run_preloaded(
        FloatOrder::Haswell,
        &[("GGML_LOWBIT_VERIFY", "1"), ("GGML_LOWBIT_MATCH", "x64")],
    );
    assert!(out.status.success());
    assert!(
        count_before(&text, "ggml-lowbit verify:", "mismatches") > 0,
        "{text}"
    );
    let (out, text) = run_preloaded(
        FloatOrder::X64,
        &[
            ("GGML_LOWBIT_VERIFY", "abort"),
            ("GGML_LOWBIT_MATCH", "haswell"),
        ],
    );
    assert!(
        !out.status.success(),
        "verify=abort must abort on a difference"
    );
    assert!(
        text.contains("GGML_LOWBIT_VERIFY=abort:") && text.contains("differs from stock"),
        "{text}"
    );
}

#[test]
fn disable_passes_every_call_to_stock() {
    let (out, text) = run_preloaded(
        FloatOrder::Haswell,
        &[("GGML_LOWBIT_DISABLE", "1"), ("GGML_LOWBIT_LOG", "1")],
    );
    assert!(out.status.success());
    assert!(text.contains("0 tests failed"));
    assert_eq!(
        count_before(&text, "calls served by ggml-lowbit", "calls"),
        0,
        "{text}"
    );
    assert!(
        count_before(&text, "passed to stock", "passed") > 0,
        "{text}"
    );
}

#[test]
fn contradictory_settings_abort_with_a_message() {
    let (out, text) = run_preloaded(
        FloatOrder::Haswell,
        &[("GGML_LOWBIT_DISABLE", "1"), ("GGML_LOWBIT_VERIFY", "1")],
    );
    assert!(!out.status.success());
    assert!(
        text.contains("GGML_LOWBIT_DISABLE and GGML_LOWBIT_VERIFY exclude each other"),
        "{text}"
    );
}

#[test]
fn a_host_without_ggml_is_not_disturbed() {
    // Preloaded into a program that never calls a ggml symbol: the library stays inert and changes nothing; with
    // logging on it says so in one line at exit, and nothing without. (`true`: a program that leaves through
    // `exit` with stderr open; one that calls `_exit`, as dash does, or closes stderr in its own exit handler, as
    // coreutils' echo does, gets no line.)
    for log in ["0", "1"] {
        let out = Command::new("true")
            .env("LD_PRELOAD", library())
            .env("GGML_LOWBIT_LOG", log)
            .output()
            .expect("run true");
        assert!(out.status.success());
        assert!(out.stdout.is_empty());
        let stderr = String::from_utf8_lossy(&out.stderr);
        if log == "0" {
            assert!(stderr.is_empty(), "{stderr}");
        } else {
            assert_eq!(stderr.lines().count(), 1, "{stderr}");
            assert!(
                stderr.starts_with("ggml-lowbit: loaded, but no ggml call reached it"),
                "{stderr}"
            );
        }
    }
}

/// Compiles `tests/c/q2_0_host.c` with `args` (the C compiler's own arguments) into `dir/name`.
fn build_q2_0_host(dir: &std::path::Path, name: &str, args: &[&str]) -> PathBuf {
    build_c(
        dir,
        "q2_0_host",
        name,
        &[&["-ffp-contract=off"], args].concat(),
    )
}

/// Compiles `tests/c/{source}.c` with `-O2` and `args` into `dir/name`.
fn build_c(dir: &std::path::Path, source: &str, name: &str, args: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let status = Command::new(ggml_lowbit::ab::fork::default_compiler())
        .arg("-O2")
        .arg(root.join(format!("tests/c/{source}.c")))
        .args(args)
        .arg("-o")
        .arg(&out)
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "cannot build {name}");
    out
}

/// Runs `program` alone and preloaded with `GGML_LOWBIT_LOG=1` plus `env`: its stdout (every result's bits)
/// must be the same; returns the preloaded run's stderr.
fn same_output_preloaded(program: &std::path::Path, env: &[(&str, &str)]) -> String {
    let alone = Command::new(program).output().expect("run the program");
    assert!(alone.status.success());
    let mut cmd = Command::new(program);
    cmd.env("LD_PRELOAD", library()).env("GGML_LOWBIT_LOG", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let preloaded = cmd.output().expect("run the program preloaded");
    let stderr = String::from_utf8_lossy(&preloaded.stderr).into_owned();
    assert!(preloaded.status.success(), "{stderr}");
    assert_eq!(alone.stdout.len(), 2000 * 9, "one line of bits per row");
    let differing = String::from_utf8_lossy(&alone.stdout)
        .lines()
        .zip(String::from_utf8_lossy(&preloaded.stdout).lines())
        .filter(|(a, b)| a != b)
        .count();
    assert_eq!(
        differing, 0,
        "results whose bits differ preloaded; {stderr}"
    );
    stderr
}

/// A program with ggml linked in (a static build: `ggml_vec_dot_q2_0_q8_0` inside the executable, exported
/// too): its calls bind inside it, so the library is never called; the same results, and the one line.
#[test]
fn a_ggml_linked_into_the_program_is_left_alone() {
    let dir = std::env::temp_dir().join(format!("ggml-lowbit-test-{}-static", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let host = build_q2_0_host(
        &dir,
        "static_host",
        &["-DWITH_DOT", "-DWITH_MAIN", "-fPIE", "-pie", "-rdynamic"],
    );
    let stderr = same_output_preloaded(&host, &[]);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("no ggml call reached it"), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A ggml with one of the symbols (`ggml_vec_dot_q2_0_q8_0` as a generic C our compiler built, NaN operand order
/// its own) and none of the others: the library serves that symbol with the same bits on every row, NaN results
/// included (2,000 rows, most with an infinite or NaN scale), at each instruction set and under verify.
#[test]
fn a_ggml_with_only_some_symbols_gets_its_own_bits() {
    let dir = std::env::temp_dir().join(format!("ggml-lowbit-test-{}-partial", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    build_q2_0_host(
        &dir,
        "libpartialggml.so",
        &["-DWITH_DOT", "-shared", "-fPIC"],
    );
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let libdir = format!("-L{}", dir.display());
    let host = build_q2_0_host(
        &dir,
        "partial_host",
        &["-DWITH_MAIN", &libdir, "-lpartialggml", &rpath],
    );
    for isa in ["scalar", "avx2", "avx512"] {
        let stderr = same_output_preloaded(&host, &[("GGML_LOWBIT_ISA", isa)]);
        assert!(
            stderr.contains("2000 calls served by ggml-lowbit"),
            "{isa}: {stderr}"
        );
    }
    let stderr = same_output_preloaded(&host, &[("GGML_LOWBIT_VERIFY", "1")]);
    assert!(
        stderr.contains("2000 calls compared with stock, 0 mismatches"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Builds `tests/c/{name}.c` with `defines` into a shared library in `dir`.
fn build_fake(dir: &std::path::Path, name: &str, defines: &[&str]) -> PathBuf {
    let fake = dir.join(format!("lib{name}.so"));
    let compiler = ggml_lowbit::ab::fork::default_compiler();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let status = Command::new(&compiler)
        .args(["-shared", "-fPIC", "-O2"])
        .args(defines)
        .arg(root.join(format!("tests/c/{name}.c")))
        .arg("-o")
        .arg(&fake)
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "cannot build {name}");
    fake
}

/// Stock symbols that give other bits than ours (the real TQ1_0 dot product, q8_K quantizer and Q2_0
/// dequantizer, each with one bit of its output flipped, `tests/c/fake_other_bits.c`, preloaded after the
/// library) keep their calls: the library still probes the haswell order from the other symbols, names the
/// three that differ, and passes exactly their calls to stock: as many more calls passed, and as many fewer
/// served, as in the run without the fakes.
#[test]
fn stock_symbols_with_other_bits_keep_their_calls() {
    let dir = std::env::temp_dir().join(format!("ggml-lowbit-test-{}-agree", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fake = build_fake(&dir, "fake_other_bits", &[]);
    // Every symbol ours can serve is served (on a CPU where stock's TQ1_0 kernel is the faster one, its calls
    // would otherwise pass to stock before its bits are ever compared).
    let all = ("GGML_LOWBIT_SERVE_ALL", "1");
    let (_, plain) = run_preloaded(FloatOrder::Haswell, &[("GGML_LOWBIT_LOG", "1"), all]);
    let preload = format!("{}:{}", library().display(), fake.display());
    let (out, text) = run_preloaded(
        FloatOrder::Haswell,
        &[("LD_PRELOAD", &preload), ("GGML_LOWBIT_LOG", "1"), all],
    );
    assert!(out.status.success(), "test-quantize-fns failed: {text}");
    assert!(
        text.contains("float order haswell (probed against the stock library)"),
        "{text}"
    );
    for named in [
        "ggml_vec_dot_tq1_0_q8_K: the stock library gives other bits than this library's haswell kernel",
        "quantize_row_q8_K: the stock library gives other bits than this library's haswell quantizer",
        "dequantize_row_q2_0: the stock library gives other bits than this library's haswell dequantizer",
    ] {
        assert!(text.contains(named), "{named:?} missing in:\n{text}");
    }
    assert_eq!(text.matches("gives other bits").count(), 3, "{text}");
    let counts = |t: &str| {
        (
            count_before(t, "calls served by ggml-lowbit", "calls"),
            count_before(t, "calls served by ggml-lowbit", "passed"),
        )
    };
    let ((served0, passed0), (served1, passed1)) = (counts(&plain), counts(&text));
    assert!(passed1 >= passed0 + 3, "{plain}\n{text}");
    assert_eq!(served0 - served1, passed1 - passed0, "{plain}\n{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs test-quantize-fns over the haswell build with `tests/c/fake_vec_dot_order.c` standing in for `symbol` (a
/// stock vec_dot whose result has its lowest bit flipped: an order neither modelled build has) preloaded after
/// the library, and checks that the
/// library passes exactly that format to stock: it still probes the haswell order, names `symbol` once as
/// following neither modelled order, serves every other call (as many fewer served, and as many more passed,
/// as in the run without the fake), and test-quantize-fns passes. Both runs serve every symbol ours can
/// (`GGML_LOWBIT_SERVE_ALL=1`), so the format is passed for its bits, not because stock's kernel is faster here.
fn one_unmatched_format_goes_to_stock_alone(symbol: &str) {
    let dir =
        std::env::temp_dir().join(format!("ggml-lowbit-test-{}-{symbol}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fake = build_fake(
        &dir,
        "fake_vec_dot_order",
        &[&format!("-DFAKE_VEC_DOT={symbol}")],
    );
    let all = ("GGML_LOWBIT_SERVE_ALL", "1");
    let (_, plain) = run_preloaded(FloatOrder::Haswell, &[("GGML_LOWBIT_LOG", "1"), all]);
    let preload = format!("{}:{}", library().display(), fake.display());
    let (out, text) = run_preloaded(
        FloatOrder::Haswell,
        &[("LD_PRELOAD", &preload), ("GGML_LOWBIT_LOG", "1"), all],
    );
    assert!(out.status.success(), "test-quantize-fns failed: {text}");
    assert!(
        text.contains("float order haswell (probed against the stock library)"),
        "{text}"
    );
    let named = format!(
        "{symbol}: the stock kernel follows neither modelled float order of the haswell build"
    );
    assert_eq!(
        text.matches(&named).count(),
        1,
        "{named:?} once in:\n{text}"
    );
    assert!(!text.contains("every call is passed to stock"), "{text}");
    assert!(!text.contains("gives other bits"), "{text}");
    let counts = |t: &str| {
        (
            count_before(t, "calls served by ggml-lowbit", "calls"),
            count_before(t, "calls served by ggml-lowbit", "passed"),
        )
    };
    let ((served0, passed0), (served1, passed1)) = (counts(&plain), counts(&text));
    assert!(served1 > 0, "{text}");
    assert!(passed1 > passed0, "{plain}\n{text}");
    assert_eq!(served0 - served1, passed1 - passed0, "{plain}\n{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Q1_0's stock kernel has a different order in every x86 build, so the probe checks it against the build's
/// order too.
#[test]
fn a_stock_q1_0_in_an_unmodelled_order_keeps_its_calls_and_the_rest_is_served() {
    one_unmatched_format_goes_to_stock_alone("ggml_vec_dot_q1_0_q8_0");
}

/// ggml ≥ 0.27.0 has its own AVX2 Q2_0 kernel in another order; its stand-in is the chain the probe runs first: the build's order then comes from the quantizer, and Q2_0 alone keeps
/// stock's kernel.
#[test]
fn a_stock_q2_0_in_an_unmodelled_order_keeps_its_calls_and_the_rest_is_served() {
    one_unmatched_format_goes_to_stock_alone("ggml_vec_dot_q2_0_q8_0");
}

/// Many threads make their first calls at once: `tests/c/vec_dot_host.c race` releases 32 threads together into
/// every vec_dot of a stock CPU module loaded as a release llama.cpp loads it, with the library preloaded, so its
/// configuration, the probe of stock and each symbol's direct path are first built under contention; then 100
/// rows per thread and format, each result against stock's. Five fresh processes per stock build, with the
/// library's own choices and with every format served (`GGML_LOWBIT_SERVE_ALL=1`, so every kernel runs).
#[test]
fn first_calls_from_many_threads_at_once_give_stocks_bits() {
    let dir = std::env::temp_dir().join(format!("ggml-lowbit-test-{}-race", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let host = build_c(
        &dir,
        "vec_dot_host",
        "vec_dot_host",
        &["-pthread", "-ldl", "-lm"],
    );
    for order in FloatOrder::ALL {
        let module = ggml_lowbit::stock::ensure_built(order)
            .expect("stock build")
            .join("libggml-cpu.so");
        for serve_all in ["0", "1"] {
            for run in 0..5 {
                let out = Command::new(&host)
                    .arg(&module)
                    .args(["100", "race", "32"])
                    .env("LD_PRELOAD", library())
                    .env("GGML_LOWBIT_LOG", "1")
                    .env("GGML_LOWBIT_SERVE_ALL", serve_all)
                    .env_remove("GGML_LOWBIT_MATCH")
                    .env_remove("GGML_LOWBIT_ISA")
                    .output()
                    .expect("run vec_dot_host");
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                let what = format!("{} serve-all {serve_all} run {run}", order.name());
                assert!(out.status.success(), "{what}: {text}");
                assert!(
                    text.contains("race: 32 threads, 28800 calls, 0 mismatches"),
                    "{what}: {text}"
                );
                assert!(
                    count_before(&text, "calls served by ggml-lowbit", "calls") > 0,
                    "{what}: nothing served: {text}"
                );
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}
