//! llama.cpp's RPC workers with the library: Debian's llama.cpp 0.7.0 (`ggml-rpc-server` from
//! llama.cpp-tools-extra and the RPC backend of libggml0-backend-rpc, over ggml 0.27.0, fetched by
//! `scripts/prebuilt-ggml.sh`) and the pinned tree's `haswell-rpc` build compute a tiny model's layers on two
//! local workers. The greedy text (and, through `e2e --rpc`, the per-chunk perplexity) is the same in one plain
//! process, over plain workers, over preloaded workers and with the host preloaded too; each preloaded worker's
//! log shows the library serving there. A worker that dies mid-run makes the host fail, and nothing hangs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ggml_lowbit::ab::e2e::{self, Preload};
use ggml_lowbit::ab::rpc::Worker;

fn library() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ggml-lowbit-ab"))
        .parent()
        .unwrap()
        .join("libggml_lowbit.so")
}

fn tools() -> Option<PathBuf> {
    if !std::arch::is_x86_feature_detected!("avx2") {
        println!("SKIPPED: Debian's tools run with the CPU variant a release picks, haswell at least here");
        return None;
    }
    Some(
        e2e::tools_dir(e2e::DEBIAN_TOOLS)
            .unwrap_or_else(|e| panic!("{} (scripts/prebuilt-ggml.sh): {e}", e2e::DEBIAN_TOOLS)),
    )
}

fn tiny_model(dir: &Path, wtype: &str) -> PathBuf {
    let model = dir.join(format!("tiny-{wtype}.gguf"));
    let made = Command::new(env!("CARGO_BIN_EXE_ggml-lowbit-ab"))
        .args(["model", "--preset", "tiny", "--type", wtype, "--out"])
        .arg(&model)
        .output()
        .expect("run the harness");
    assert!(made.status.success());
    model
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ggml-lowbit-rpc-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn rpc_workers_with_the_library_keep_the_text_of_one_plain_process() {
    let Some(tools) = tools() else { return };
    let dir = scratch("text");
    let lib = library();
    for wtype in ["q2_0", "q1_0"] {
        let model = tiny_model(&dir, wtype);
        let base = e2e::completion_args(&model, 1, 24);
        let complete = |rpc: Option<String>, preload_host: bool| {
            let mut args = base.clone();
            if let Some(endpoints) = rpc {
                // -v: the log names the devices each layer went to.
                args.extend([
                    "--rpc".into(),
                    endpoints,
                    "-ngl".into(),
                    "99".into(),
                    "-v".into(),
                ]);
            }
            let preload = preload_host.then_some(Preload {
                lib: Some(&lib),
                env: e2e::WITH_HOOK,
            });
            e2e::run_tool(&tools, "llama-completion", &args, preload, false)
                .unwrap_or_else(|e| panic!("{wtype}: {e}"))
        };
        let alone = complete(None, false);
        assert!(!alone.stdout.trim().is_empty(), "{}", alone.stderr);
        for (workers_preloaded, host_preloaded) in [(false, false), (true, false), (true, true)] {
            let workers: Vec<Worker> = (0..2)
                .map(|i| {
                    let name = format!("{wtype}-{workers_preloaded}-{host_preloaded}-{i}");
                    Worker::start(&tools, &dir, &name, workers_preloaded.then_some(&*lib), 1)
                        .unwrap_or_else(|e| panic!("{e}"))
                })
                .collect();
            let endpoints: Vec<String> = workers.iter().map(Worker::endpoint).collect();
            let run = complete(Some(endpoints.join(",")), host_preloaded);
            let what = format!(
                "{wtype}, workers preloaded {workers_preloaded}, host preloaded {host_preloaded}"
            );
            assert!(
                endpoints
                    .iter()
                    .all(|e| run.stderr.contains(&format!("[{e}] model buffer size"))),
                "{what}: the layers did not go to the workers: {}",
                run.stderr
            );
            assert_eq!(run.stdout, alone.stdout, "{what}: {}", run.stderr);
            for w in &workers {
                let text = w.text();
                assert_eq!(
                    text.contains("ggml-lowbit: float order "),
                    workers_preloaded,
                    "{what}: {text}"
                );
                if workers_preloaded {
                    assert!(
                        text.contains("mul_mat hook on (ggml 0.27.0)"),
                        "{what}: {text}"
                    );
                }
            }
            println!("{what}: identical text ({:?})", run.stdout.trim());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_worker_that_dies_mid_run_makes_the_host_fail_without_hanging() {
    let Some(tools) = tools() else { return };
    let dir = scratch("dies");
    let model = tiny_model(&dir, "q1_0");
    let lib = library();
    let worker =
        Worker::start(&tools, &dir, "dying", Some(&lib), 1).unwrap_or_else(|e| panic!("{e}"));
    let mut args = e2e::completion_args(&model, 1, 100_000);
    args.extend([
        "--rpc".into(),
        worker.endpoint(),
        "-ngl".into(),
        "99".into(),
        "--ignore-eos".into(),
    ]);
    args.extend(["-c".into(), "100000".into()]);
    let mut host = Command::new(tools.join("llama-completion"))
        .args(&args)
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("host.err")).unwrap())
        .spawn()
        .expect("start llama-completion");
    // Let the host reach its generation loop on the worker, then stop the worker.
    let start = Instant::now();
    while !std::fs::read_to_string(dir.join("host.err"))
        .unwrap_or_default()
        .contains("generate:")
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the host never started generating"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    drop(worker);
    let status = loop {
        if let Some(status) = host.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(90) {
            let _ = host.kill();
            panic!("the host hung after its worker died");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = std::fs::read_to_string(dir.join("host.err")).unwrap_or_default();
    println!("host after its worker died: {status}");
    assert!(
        !status.success(),
        "the host finished as if nothing happened: {err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ggml-lowbit-ab e2e --rpc 2` over the pinned tree's `haswell-rpc` build (compiled on first use): tiny Q2_0 and
/// Q1_0 models, greedy text and per-chunk perplexity at micro-batches 1 and 33, identical in all four columns
/// (one plain process, plain workers, preloaded workers, preloaded workers and host); every worker took every
/// run and the library served in the preloaded ones only (the harness checks both and exits 1 otherwise).
#[test]
fn e2e_over_two_workers_of_the_pinned_tree_is_identical_in_every_column() {
    let dir = scratch("e2e");
    for wtype in ["q2_0", "q1_0"] {
        let model = tiny_model(&dir, wtype);
        let out = Command::new(env!("CARGO_BIN_EXE_ggml-lowbit-ab"))
            .args(["e2e", "--build", "haswell-rpc", "--rpc", "2", "--no-bench"])
            .args(["--ubatch", "1,33", "--model"])
            .arg(&model)
            .output()
            .expect("run the harness");
        let stdout = String::from_utf8_lossy(&out.stdout);
        println!("{wtype}:\n{stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{wtype}: {stdout}");
        assert_eq!(stdout.matches("identical text").count(), 1, "{stdout}");
        assert_eq!(
            stdout.matches("identical per-chunk values").count(),
            2,
            "{stdout}"
        );
        assert!(
            stdout.contains("every worker took every run; served in the preloaded ones only"),
            "{stdout}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
