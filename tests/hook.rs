//! The preloaded `mul_mat` hook (`src/hook.rs`): its mirror of ggml's structs against the pinned headers, the
//! MUL_MAT_ID expert path (preloaded and patched), and the cases where it must stay out of the way (a ggml
//! version it does not know, `GGML_LOWBIT_MULMAT=0`, verify mode) while the vec_dot exports still serve and the
//! outputs stay identical. That the hook serves and gives stock's bits on every build, thread count and batch
//! size is `tests/e2e.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;

use ggml_lowbit::ab::e2e::{self, Preload};

fn lib() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ggml-lowbit-ab"))
        .parent()
        .unwrap()
        .join("libggml_lowbit.so")
}

/// A folder of its own for every call (the tests run in parallel).
fn scratch(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "ggml-lowbit-hook-{}-{name}-{n}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn cc(args: &[String], out: &Path) {
    let compiler = ggml_lowbit::ab::fork::default_compiler();
    let status = Command::new(&compiler)
        .args(args)
        .arg("-o")
        .arg(out)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", compiler.display()));
    assert!(status.success(), "{} {args:?} failed", compiler.display());
}

/// `tests/c/{name}.c` built with `defines` into a shared library in `dir`, to preload after ours.
fn fake_lib(dir: &Path, name: &str, defines: &[&str]) -> PathBuf {
    let fake = dir.join(format!("lib{name}.so"));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let mut args: Vec<String> = vec!["-shared".into(), "-fPIC".into(), "-O2".into()];
    args.extend(defines.iter().map(|d| d.to_string()));
    args.push(src.display().to_string());
    cc(&args, &fake);
    fake
}

fn tiny_model(dir: &Path) -> PathBuf {
    model(dir, "tiny", "q2_0")
}

/// A synthetic model of `preset` with weights of `wtype` (`ggml-lowbit-ab model`).
fn model(dir: &Path, preset: &str, wtype: &str) -> PathBuf {
    let path = dir.join(format!("{preset}-{wtype}.gguf"));
    let out = Command::new(env!("CARGO_BIN_EXE_ggml-lowbit-ab"))
        .args([
            "model", "--preset", preset, "--type", wtype, "--seed", "5", "--out",
        ])
        .arg(&path)
        .output()
        .expect("run harness");
    assert!(out.status.success());
    path
}

#[test]
fn struct_layouts_match_the_pinned_headers() {
    use ggml_lowbit::hook::{ComputeParams, GgmlTensor};
    use std::mem::{offset_of, size_of};
    let tools = e2e::tools_dir("haswell").expect("stock haswell build");
    let ggml = tools.parent().unwrap().join("src/llama.cpp/ggml");
    let dir = scratch("layout");
    let exe = dir.join("ggml_layout");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let inc = |p: &str| format!("-I{}", ggml.join(p).display());
    cc(
        &[
            root.join("tests/c/ggml_layout.c").display().to_string(),
            inc("include"),
            inc("src"),
            inc("src/ggml-cpu"),
            format!("-L{}", tools.display()),
            "-lggml-base".into(),
            format!("-Wl,-rpath,{}", tools.display()),
        ],
        &exe,
    );
    let out = Command::new(&exe).output().expect("run layout probe");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let value = |name: &str| -> usize {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing from {text}"))
    };
    assert_eq!(value("ggml_tensor"), size_of::<GgmlTensor>());
    assert_eq!(value("ggml_tensor.type"), offset_of!(GgmlTensor, type_));
    assert_eq!(value("ggml_tensor.ne"), offset_of!(GgmlTensor, ne));
    assert_eq!(value("ggml_tensor.nb"), offset_of!(GgmlTensor, nb));
    assert_eq!(value("ggml_tensor.src"), offset_of!(GgmlTensor, src));
    assert_eq!(value("ggml_tensor.data"), offset_of!(GgmlTensor, data));
    assert_eq!(value("ggml_compute_params"), size_of::<ComputeParams>());
    assert_eq!(
        value("ggml_compute_params.ith"),
        offset_of!(ComputeParams, ith)
    );
    assert_eq!(
        value("ggml_compute_params.nth"),
        offset_of!(ComputeParams, nth)
    );
    assert_eq!(
        value("ggml_compute_params.wsize"),
        offset_of!(ComputeParams, wsize)
    );
    assert_eq!(
        value("ggml_compute_params.wdata"),
        offset_of!(ComputeParams, wdata)
    );
    assert_eq!(
        value("ggml_compute_params.threadpool"),
        offset_of!(ComputeParams, threadpool)
    );
    assert_eq!(
        value("ggml_compute_params.use_ref"),
        offset_of!(ComputeParams, use_ref)
    );
    assert_eq!(value("GGML_TYPE_Q2_0"), 42);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs llama-completion on the tiny model, stock and preloaded with `env`; returns the preloaded run after
/// checking the text is stock's and that our library served calls.
fn completion_with(env: &[(&str, &str)]) -> e2e::ToolRun {
    let dir = scratch("run");
    let model = tiny_model(&dir);
    let tools = e2e::tools_dir("haswell").expect("stock haswell build");
    let args = e2e::completion_args(&model, 2, 8);
    let lib = lib();
    let stock = e2e::run_tool(&tools, "llama-completion", &args, None, false).expect("stock run");
    let ours = e2e::run_tool(
        &tools,
        "llama-completion",
        &args,
        Some(Preload {
            lib: Some(&lib),
            env,
        }),
        false,
    )
    .expect("preloaded run");
    assert_eq!(stock.stdout, ours.stdout, "{}", ours.stderr);
    assert!(e2e::served_calls(&ours) > 0, "{}", ours.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    ours
}

#[test]
fn a_ggml_version_the_hook_does_not_know_gets_vec_dot_interposition_only() {
    let dir = scratch("fake");
    let fake = fake_lib(&dir, "fake_ggml_version", &[]);
    let preload = format!("{}:{}", lib().display(), fake.display());
    let run = completion_with(&[("LD_PRELOAD", &preload)]);
    assert!(
        run.stderr
            .contains("mul_mat hook off (ggml 0.0.0-fake is not a version the hook knows)"),
        "{}",
        run.stderr
    );
    assert!(!e2e::hook_on(&run));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A ggml whose layout the hook's self-test does not recognise (a `ggml_op_name` that does not call the test's
/// product MUL_MAT): the hook stays off with one log line, the vec_dot exports serve, the text is stock's.
#[test]
fn a_layout_the_self_test_does_not_recognise_keeps_the_hook_off() {
    let dir = scratch("layout");
    let fake = fake_lib(&dir, "fake_ggml_op_name", &[]);
    let preload = format!("{}:{}", lib().display(), fake.display());
    let run = completion_with(&[("LD_PRELOAD", &preload)]);
    let off: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("mul_mat hook off"))
        .collect();
    assert_eq!(off.len(), 1, "{}", run.stderr);
    assert!(
        off[0].contains("layout self-test: the product's op ")
            && off[0].contains(" is FAKE to ggml_op_name"),
        "{}",
        run.stderr
    );
    assert!(!e2e::hook_on(&run));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A stock Q2_0 kernel in an order the library does not model (as ggml ≥ 0.27.0's own AVX2 kernel is; the
/// stand-in `tests/c/fake_vec_dot_order.c` flips the real result's lowest bit): whole Q2_0 products stay with
/// ggml and its kernel, while the hook stays on for the formats that keep the modelled bits. The text is the
/// one that kernel gives without the library.
#[test]
fn a_q2_0_kernel_in_another_order_keeps_its_whole_products_with_stock() {
    let dir = scratch("q2order");
    let fake = fake_lib(
        &dir,
        "fake_vec_dot_order",
        &["-DFAKE_VEC_DOT=ggml_vec_dot_q2_0_q8_0"],
    );
    let model = tiny_model(&dir);
    let tools = e2e::tools_dir("haswell").expect("stock haswell build");
    let args = e2e::completion_args(&model, 2, 8);
    let fake_path = fake.display().to_string();
    let alone = e2e::run_tool(
        &tools,
        "llama-completion",
        &args,
        Some(Preload {
            lib: None,
            env: &[("LD_PRELOAD", &fake_path)],
        }),
        false,
    )
    .expect("run with the fake kernel alone");
    let preload = format!("{}:{}", lib().display(), fake.display());
    let ours = e2e::run_tool(
        &tools,
        "llama-completion",
        &args,
        Some(Preload {
            lib: None,
            env: &[("LD_PRELOAD", &preload)],
        }),
        false,
    )
    .expect("preloaded run");
    assert_eq!(alone.stdout, ours.stdout, "{}", ours.stderr);
    assert!(
        ours.stderr.contains(
            "ggml_vec_dot_q2_0_q8_0: the stock kernel follows neither modelled float order of the haswell build"
        ),
        "{}",
        ours.stderr
    );
    // The formats the hook takes: "mul_mat hook on (ggml V): A, B products through …".
    let taken = |run: &e2e::ToolRun| -> Vec<String> {
        let line = run
            .stderr
            .lines()
            .find(|l| l.contains("mul_mat hook on"))
            .unwrap_or_else(|| panic!("hook off: {}", run.stderr));
        let list = line
            .split("): ")
            .nth(1)
            .unwrap()
            .split(" products")
            .next()
            .unwrap();
        list.split(", ").map(str::to_string).collect()
    };
    assert!(
        !taken(&ours).contains(&"Q2_0".to_string()),
        "{}",
        ours.stderr
    );
    let plain = completion_with(e2e::WITH_HOOK);
    assert!(
        taken(&plain).contains(&"Q2_0".to_string()),
        "{}",
        plain.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn mulmat_0_and_verify_mode_keep_the_hook_out() {
    let run = completion_with(e2e::VEC_DOT_ONLY);
    assert!(
        run.stderr
            .contains("mul_mat hook off (GGML_LOWBIT_MULMAT=0)"),
        "{}",
        run.stderr
    );
    let run = completion_with(&[("GGML_LOWBIT_VERIFY", "1")]);
    assert!(
        run.stderr.contains("mul_mat hook off (mode Verify"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains(" 0 mismatches"), "{}", run.stderr);
    let run = completion_with(e2e::WITH_HOOK);
    assert!(e2e::hook_on(&run), "{}", run.stderr);
}

/// The hook's two ways of sharing rows between threads: chunks from ggml's counter (the default) and a fixed
/// share per thread (`GGML_LOWBIT_FORMS=chunks=0`, what a ggml without the counter's functions gets): both give stock's
/// text with the hook on, and the log says which ran.
#[test]
fn row_chunks_and_fixed_shares_give_stock_text() {
    let run = completion_with(e2e::WITH_HOOK);
    assert!(e2e::hook_on(&run), "{}", run.stderr);
    assert!(
        run.stderr.contains("rows in chunks from ggml's counter"),
        "{}",
        run.stderr
    );
    let run = completion_with(&[("GGML_LOWBIT_FORMS", "chunks=0")]);
    assert!(e2e::hook_on(&run), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("a fixed share of the rows per thread (GGML_LOWBIT_FORMS=chunks=0)"),
        "{}",
        run.stderr
    );
}

/// MUL_MAT_ID: the preload's per-expert hook and the patched build's expert entry compute the experts (Q2_0,
/// and TQ2_0 against q8_K columns; `GGML_LOWBIT_SERVE_ALL=1` so that TQ2_0 is taken on every CPU): their exit
/// line counts the expert products, and the text is stock's.
#[test]
fn moe_experts_go_through_the_tile_kernels_with_stock_text() {
    let dir = scratch("moe");
    let serve_all: &[(&str, &str)] = &[("GGML_LOWBIT_SERVE_ALL", "1")];
    let stock_tools = e2e::tools_dir("haswell").expect("stock haswell build");
    let patched_tools = e2e::patched_tools_dir("haswell")
        .expect("patched build")
        .expect("haswell has a patched build");
    let lib = lib();
    for (wtype, env) in [("q2_0", e2e::WITH_HOOK), ("tq2_0", serve_all)] {
        let model = model(&dir, "tiny-moe", wtype);
        let args = e2e::completion_args(&model, 2, 8);
        let stock =
            e2e::run_tool(&stock_tools, "llama-completion", &args, None, false).expect("stock run");
        let preloaded = Preload {
            lib: Some(&lib),
            env,
        };
        let linked = Preload { lib: None, env };
        for (tools, how) in [(&stock_tools, preloaded), (&patched_tools, linked)] {
            let run =
                e2e::run_tool(tools, "llama-completion", &args, Some(how), false).expect("run");
            assert_eq!(stock.stdout, run.stdout, "{wtype}: {}", run.stderr);
            assert!(
                run.stderr
                    .contains("MUL_MAT_ID expert products through the tile kernels"),
                "{wtype}: {}",
                run.stderr
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Many threads and wide batches: `tests/c/graph_host.c` over the pinned builds computes Q2_0, Q1_0, TQ2_0,
/// TQ1_0 and IQ products of 96 rows against 1, 7, 33, 128 and 600 columns on 16 threads (haswell) and 3 (x64),
/// where the hook cuts the columns as well as the rows (96 rows make two 64-row chunks, too few for the
/// threads) and takes 16-row chunks for one column. Every product's bits are the build's alone, as dispatched
/// and serving every format, and the hook took the whole products of every format it serves.
#[test]
fn many_threads_and_wide_batches_keep_the_builds_bits() {
    let host = ggml_lowbit::ab::prebuilt::graph_host().expect("graph_host");
    for (order, threads) in [
        (ggml_lowbit::FloatOrder::Haswell, "16"),
        (ggml_lowbit::FloatOrder::X64, "3"),
    ] {
        let stock = ggml_lowbit::stock::ensure_built(order).expect("stock build");
        let run = |env: &[(&str, &str)], preload: bool| {
            let mut cmd = Command::new(&host);
            cmd.arg(stock.join("libggml-base.so"))
                .arg(stock.join("libggml-cpu.so"))
                .args([threads, "1,7,33,128,600"])
                .env("LD_LIBRARY_PATH", &stock)
                .envs(env.iter().copied());
            if preload {
                cmd.env("LD_PRELOAD", lib()).env("GGML_LOWBIT_LOG", "1");
            }
            let out = cmd.output().expect("run graph_host");
            let (stdout, stderr) = (
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
            assert!(out.status.success(), "{order:?} {env:?}: {stderr}");
            (stdout, stderr)
        };
        let (alone, _) = run(&[], false);
        assert_eq!(alone.lines().count(), 45, "{alone}");
        for (env, formats) in [(&[][..], 1), (&[("GGML_LOWBIT_SERVE_ALL", "1")][..], 4)] {
            let (ours, log) = run(env, true);
            assert_eq!(ours, alone, "{order:?} {threads} threads {env:?}: {log}");
            let products = e2e::whole_products_in(&log);
            assert!(
                products >= 5 * formats,
                "{order:?} {env:?}: {products} whole products\n{log}"
            );
        }
    }
}
