//! The exports as users get them: the built `libggml_lowbit.so`, loaded with libloading by the harness binary,
//! against both stock builds, at every instruction set (capped through `GGML_LOWBIT_ISA`). Also the harness's
//! command-line contract: bad input is one line and exit code 2.

use std::process::Command;

fn harness() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ggml-lowbit-ab"))
}

fn run_bits(isa: &str, cases: &str) {
    let out = harness()
        .args(["bits", "--via", "cdylib", "--cases", cases])
        .env("GGML_LOWBIT_ISA", isa)
        .output()
        .expect("run harness");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "bits via cdylib at {isa} failed");
    assert!(stdout.contains(" 0 mismatches"), "{stdout}");
    for build in ["haswell", "x64"] {
        for sym in ggml_lowbit::ab::bits::SYMBOLS {
            assert!(
                stdout
                    .lines()
                    .any(|l| l.contains(build) && l.contains(sym) && l.contains("cdylib")),
                "no {build} {sym} line"
            );
        }
    }
}

#[test]
fn cdylib_best_isa_is_bit_exact_with_both_stock_builds() {
    run_bits("avx512", "200000");
}

#[test]
fn cdylib_avx2_is_bit_exact_with_both_stock_builds() {
    run_bits("avx2", "50000");
}

#[test]
fn cdylib_scalar_is_bit_exact_with_both_stock_builds() {
    run_bits("scalar", "20000");
}

fn expect_usage_error(args: &[&str], needle: &str) {
    let out = harness().args(args).output().expect("run harness");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(needle), "{args:?}: {stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr}"
    );
}

#[test]
fn cli_rejects_bad_input_with_exit_code_2() {
    expect_usage_error(
        &["bits", "--symbol", "ggml_vec_dot_q9_0_q8_0"],
        "unknown symbol",
    );
    expect_usage_error(&["speed", "--shapes", "4096x100"], "bad shape");
    expect_usage_error(&["speed", "--shapes", "axb"], "bad shape");
    // ggml passes the row length as an int.
    expect_usage_error(&["speed", "--shapes", "4x4294967296"], "bad shape");
    // A matrix this machine cannot hold is a message, not an allocation-failure abort.
    expect_usage_error(
        &[
            "speed",
            "--symbol",
            "ggml_vec_dot_q1_0_q8_0",
            "--threads",
            "1",
            "--reps",
            "1",
            "--shapes",
            "99999999999x4096",
        ],
        "this machine has",
    );
    // Every symbol's rows are whole blocks of its format: the tile exports' too (they used to panic), and the
    // quantizers' (q8_K used to skip such a shape and report nothing).
    for (symbol, block) in [
        ("ggml_lowbit_mul_mat_q1_0_q8_0", "128"),
        ("ggml_lowbit_mul_mat_tq1_0_q8_K", "256"),
        ("quantize_row_q8_K", "256"),
    ] {
        expect_usage_error(
            &[
                "speed",
                "--symbol",
                symbol,
                "--shapes",
                "3x64",
                "--threads",
                "1",
            ],
            &format!("{symbol} needs columns in whole blocks of {block}"),
        );
    }
    // The timing threads spin: more than the machine runs at once would time the scheduler.
    expect_usage_error(&["speed", "--threads", "1,4096"], "--threads 4096");
    // Counts that would make a check compare nothing are refused.
    expect_usage_error(&["bits", "--cases", "0"], "--cases");
    expect_usage_error(
        &["e2e", "--model", "m.gguf", "--n-predict", "0"],
        "--n-predict",
    );
    expect_usage_error(&["e2e", "--model", "m.gguf", "--ubatch", "1,0"], "--ubatch");
    expect_usage_error(&["e2e", "--model", "m.gguf", "--pp", "0"], "--pp");
    expect_usage_error(
        &["e2e", "--model", "m.gguf", "--bench-rounds", "0"],
        "--bench-rounds",
    );
    expect_usage_error(
        &[
            "bits",
            "--via",
            "cdylib",
            "--lib",
            "/nonexistent/libggml_lowbit.so",
        ],
        "library not found",
    );
    expect_usage_error(&["frobnicate"], "unrecognized subcommand");
    // A library that is not ours (or is ours but stale) is refused, not measured.
    let stock =
        ggml_lowbit::stock::ensure_built(ggml_lowbit::FloatOrder::Haswell).expect("stock haswell");
    let foreign = stock.join("libggml-base.so");
    expect_usage_error(
        &["config", "--lib", foreign.to_str().unwrap()],
        "not a ggml-lowbit library",
    );
}

#[test]
fn configuration_is_read_from_the_environment_and_bad_values_abort() {
    let out = harness()
        .args(["config"])
        .env("GGML_LOWBIT_MATCH", "x64")
        .env("GGML_LOWBIT_ISA", "avx2")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("float order (stock build matched): x64"),
        "{stdout}"
    );
    let best = ggml_lowbit::dispatch::detected_isa();
    let want = best.min(ggml_lowbit::dispatch::Isa::Avx2).name();
    assert!(
        stdout.contains(&format!("instruction set: {want}")),
        "{stdout}"
    );

    // An unknown value must not silently pick a build: the library says so and aborts.
    config_aborts_on(
        "GGML_LOWBIT_MATCH",
        "skylake",
        "GGML_LOWBIT_MATCH=\"skylake\" is not one of haswell, x64",
    );

    // The per-CPU kernel forms are forced by one variable, read with the rest: every name, alone and together,
    // is accepted and shows in the forms the library reports; a bad list aborts with a message naming the fault.
    let forms = |spec: &str| {
        let out = harness()
            .args(["config"])
            .env("GGML_LOWBIT_FORMS", spec)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "GGML_LOWBIT_FORMS={spec}: {stdout}");
        stdout
    };
    for name in ggml_lowbit::dispatch::FORM_NAMES {
        for v in ["0", "1"] {
            forms(&format!("{name}={v}"));
        }
    }
    let all_on: Vec<String> = ggml_lowbit::dispatch::FORM_NAMES
        .iter()
        .map(|n| format!("{n}=1"))
        .collect();
    forms(&all_on.join(","));
    if best == ggml_lowbit::dispatch::Isa::Avx512 {
        let on = forms("iq-gather=1,scale-gather=1,q1-lookups=1,q1-masked-loads=1");
        assert!(
            on.contains("kernel forms: IQ2_XS and IQ2_S grid entries by gathers, Q1_0 tile quants by masked loads, q8_0 scales by gathers, Q1_0 decode by nibble tables"),
            "{on}"
        );
        let off =
            forms("iq-gather=0,iq2s-permutes=0,scale-gather=0,q1-lookups=0,q1-masked-loads=0");
        assert!(
            off.contains("kernel forms: IQ2_XS and IQ2_S grid entries by lookups (IQ2_S's by loads), Q1_0 tile quants by masked moves, q8_0 scales by permutes, Q1_0 decode by tiles"),
            "{off}"
        );
    } else {
        assert!(forms("iq-gather=1").contains("kernel forms: none"));
    }
    for (spec, message) in [
        ("iq-gather=yes", "iq-gather=\"yes\" is not one of 0, 1"),
        ("gathers=1", "\"gathers\" is not one of iq-gather, iq2s-permutes, q1-masked-loads, scale-gather, q1-lookups, chunks, q2-vnni-tiles"),
        ("iq-gather", "\"iq-gather\" is not name=0|1"),
        ("chunks=0,chunks=1", "chunks is given twice"),
        ("iq-gather=1,", "\"\" is not name=0|1"),
    ] {
        config_aborts_on(
            "GGML_LOWBIT_FORMS",
            spec,
            &format!("GGML_LOWBIT_FORMS={spec:?}: {message}"),
        );
    }
    // The single-form variables are not settings: setting one aborts and names the list entry to use instead.
    for (var, name) in [
        ("GGML_LOWBIT_IQ_GATHER", "iq-gather"),
        ("GGML_LOWBIT_IQ2S_PERMUTES", "iq2s-permutes"),
        ("GGML_LOWBIT_Q1_MASKED_LOADS", "q1-masked-loads"),
        ("GGML_LOWBIT_SCALE_GATHER", "scale-gather"),
        ("GGML_LOWBIT_Q1_LOOKUPS", "q1-lookups"),
        ("GGML_LOWBIT_CHUNKS", "chunks"),
    ] {
        config_aborts_on(
            var,
            "1",
            &format!(
                "{var} is not a setting: kernel forms are forced by GGML_LOWBIT_FORMS={name}=0|1"
            ),
        );
    }
}

/// `config` with `var=value` must fail, saying `message` on stderr.
fn config_aborts_on(var: &str, value: &str, message: &str) {
    let out = harness().args(["config"]).env(var, value).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains(message), "{stderr}");
}
