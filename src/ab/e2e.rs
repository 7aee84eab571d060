//! End to end: the stock llama.cpp tools run on a model with and without `LD_PRELOAD=libggml_lowbit.so`, side
//! by side: greedy completion text, perplexity per chunk, llama-bench throughput, and the machine's read
//! bandwidth with the decode ceiling it implies.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::model::{GGML_TYPE_PQ2_0, GGML_TYPE_PTQ1_0};

/// Weight types the library accelerates; a model whose matrices are all something else is refused.
pub const SUPPORTED_WEIGHT_TYPES: [(u32, &str); 11] = [
    (42, "q2_0"),
    (41, "q1_0"),
    (34, "tq1_0"),
    (35, "tq2_0"),
    (16, "iq2_xxs"),
    (17, "iq2_xs"),
    (22, "iq2_s"),
    (18, "iq3_xxs"),
    (21, "iq3_s"),
    (GGML_TYPE_PQ2_0, "pq2_0"),
    (GGML_TYPE_PTQ1_0, "ptq1_0"),
];

/// PrismML's fork formats: only the stand-in fork (`scripts/patched-llama.sh fork-*`) loads them.
pub const FORK_WEIGHT_TYPES: [u32; 2] = [GGML_TYPE_PQ2_0, GGML_TYPE_PTQ1_0];

/// What `check_model` found: whether the model needs a build that knows the fork's types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelKind {
    Mainline,
    Fork,
}

/// Checks that `model` is a GGUF whose matrices include a type this library serves, and says whether it has
/// fork types (PQ2_0, PTQ1_0), which only the stand-in fork builds load.
pub fn check_model(model: &Path) -> Result<ModelKind, String> {
    if model.is_dir() {
        return Err(format!(
            "{}: a folder, not a GGUF model file",
            model.display()
        ));
    }
    if !model.is_file() {
        return Err(format!("model not found: {}", model.display()));
    }
    let types = crate::gguf::tensor_types(model)?;
    if types
        .iter()
        .any(|(_, t)| SUPPORTED_WEIGHT_TYPES.iter().any(|(s, _)| s == t))
    {
        let fork = types.iter().any(|(_, t)| FORK_WEIGHT_TYPES.contains(t));
        return Ok(if fork {
            ModelKind::Fork
        } else {
            ModelKind::Mainline
        });
    }
    let mut seen: Vec<u32> = types.iter().map(|(_, t)| *t).collect();
    seen.sort_unstable();
    seen.dedup();
    Err(format!(
        "{}: no tensor of a type ggml-lowbit serves (it has ggml types {seen:?}; supported: {})",
        model.display(),
        SUPPORTED_WEIGHT_TYPES
            .iter()
            .map(|(t, n)| format!("{n} = {t}"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// One run of a stock tool, with or without the preload; stdout and stderr are kept.
pub struct ToolRun {
    pub stdout: String,
    pub stderr: String,
    pub seconds: f64,
}

/// How a tool runs with our library: preloaded (`lib`) or linked in (the patched build: `None`), with these
/// extra environment variables.
#[derive(Clone, Copy, Debug)]
pub struct Preload<'a> {
    pub lib: Option<&'a Path>,
    pub env: &'a [(&'a str, &'a str)],
}

/// The two ways of preloading the e2e compares with stock: the vec_dot exports only (`GGML_LOWBIT_MULMAT=0`),
/// and with the `mul_mat` hook taking over whole products (the default).
pub const VEC_DOT_ONLY: &[(&str, &str)] = &[("GGML_LOWBIT_MULMAT", "0")];
pub const WITH_HOOK: &[(&str, &str)] = &[];

/// One run of `tool` (see `run_tool`).
fn run_once(
    dir: &Path,
    tool: &str,
    args: &[String],
    preload: Option<Preload<'_>>,
    quiet: bool,
) -> Result<ToolRun, String> {
    let exe = dir.join(tool);
    if !exe.is_file() {
        return Err(format!(
            "{tool} not found in {} (scripts/stock-llama.sh builds it)",
            dir.display()
        ));
    }
    let mut cmd = Command::new(&exe);
    cmd.args(args).current_dir(dir).stdin(Stdio::null());
    for var in [
        "GGML_LOWBIT_MATCH",
        "GGML_LOWBIT_VERIFY",
        "GGML_LOWBIT_DISABLE",
        "GGML_LOWBIT_LOG",
        "GGML_LOWBIT_MULMAT",
        "LD_PRELOAD",
    ] {
        cmd.env_remove(var);
    }
    if let Some(p) = preload {
        if let Some(lib) = p.lib {
            cmd.env("LD_PRELOAD", lib);
        }
        cmd.envs(p.env.iter().copied());
        if !quiet {
            cmd.env("GGML_LOWBIT_LOG", "1");
        }
    }
    let start = Instant::now();
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    let run = ToolRun {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        seconds: start.elapsed().as_secs_f64(),
    };
    if !out.status.success() {
        let tail: Vec<&str> = run.stderr.lines().rev().take(5).collect();
        return Err(format!(
            "{tool} failed ({}): {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ));
    }
    Ok(run)
}

/// The line a tool prints last, after everything compared: llama.cpp's logger is asynchronous and never
/// flushed at exit, so under load a run can lose its final lines; such a run is repeated rather than compared.
pub fn completion_marker(tool: &str) -> Option<&'static str> {
    match tool {
        "llama-completion" => Some("common_perf_print:"),
        "llama-perplexity" => Some("Final estimate:"),
        _ => None,
    }
}

/// How many times a run that lost its tail is tried. The pinned llama-completion lost its last lines in 4 to 13 %
/// of runs on an idle two-core machine here (2026-12-01, 70 runs) and CI once saw four losses in a row; sixteen
/// makes a spurious failure negligible while a tool that never prints its marker still fails.
const MARKER_ATTEMPTS: usize = 16;

/// Runs `tool` from `dir`; with `preload`, under `LD_PRELOAD` of our library with `GGML_LOWBIT_LOG=1` (call
/// counts at exit) unless `quiet` (for timings, which should not pay for counting). A run whose output lacks the
/// tool's completion marker is repeated, up to `MARKER_ATTEMPTS` runs.
pub fn run_tool(
    dir: &Path,
    tool: &str,
    args: &[String],
    preload: Option<Preload<'_>>,
    quiet: bool,
) -> Result<ToolRun, String> {
    let Some(marker) = completion_marker(tool) else {
        return run_once(dir, tool, args, preload, quiet);
    };
    for attempt in 1..=MARKER_ATTEMPTS {
        let run = run_once(dir, tool, args, preload, quiet)?;
        if run.stdout.contains(marker) || run.stderr.contains(marker) {
            return Ok(run);
        }
        eprintln!(
            "ggml-lowbit-ab: {tool} lost the end of its output (run {attempt}); running it again"
        );
    }
    Err(format!(
        "{tool} lost the end of its output in {MARKER_ATTEMPTS} runs in a row (llama.cpp's asynchronous log is \
         not flushed at exit)"
    ))
}

/// The library's exit-line counts in a preloaded run's log (`N calls served by ggml-lowbit, M passed to stock`,
/// from `GGML_LOWBIT_LOG`): `(served, passed)`, `(0, 0)` if none was printed. The line is looked for anywhere in
/// a line of the log: llama.cpp's log thread may still be writing at exit.
pub fn exit_counts_in(log: &str) -> (u64, u64) {
    const TAG: &str = "ggml-lowbit: ";
    log.lines()
        .filter_map(|l| l.find(TAG).map(|i| &l[i + TAG.len()..]))
        .find(|rest| rest.contains(" calls served by ggml-lowbit"))
        .map_or((0, 0), |rest| {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let served = words.first().and_then(|w| w.parse().ok()).unwrap_or(0);
            let passed = words
                .windows(2)
                .find(|w| w[1] == "passed")
                .and_then(|w| w[0].parse().ok())
                .unwrap_or(0);
            (served, passed)
        })
}

/// Calls our library served in a preloaded run, 0 if it printed no exit line (`exit_counts_in`).
pub fn served_calls(run: &ToolRun) -> u64 {
    exit_counts_in(&run.stderr).0
}

/// Calls the library passed to a stock kernel in a preloaded run, 0 without an exit line (`exit_counts_in`).
pub fn passed_calls(run: &ToolRun) -> u64 {
    exit_counts_in(&run.stderr).1
}

pub const PROMPT: &str = "The quick brown fox";

pub fn completion_args(model: &Path, threads: usize, n_predict: usize) -> Vec<String> {
    let m = model.display().to_string();
    [
        "-m",
        &m,
        "-p",
        PROMPT,
        "-n",
        &n_predict.to_string(),
        "--temp",
        "0",
        "--seed",
        "1",
        "-no-cnv",
        "-t",
        &threads.to_string(),
    ]
    .map(String::from)
    .to_vec()
}

/// A fixed English text for perplexity (the tokenizer falls back to bytes where the vocabulary has no piece).
pub fn perplexity_text() -> String {
    let para = "The quick brown fox jumps over the lazy dog. People often write about the weather, the water and \
                the land, because each day is different from the one before. Children asked their mother and \
                father many things about the world, and the answers were not always the same. ";
    para.repeat(24)
}

/// Whole MUL_MAT products the hook took in a preloaded run (its `GGML_LOWBIT_LOG` exit line), 0 if none.
pub fn whole_products(run: &ToolRun) -> u64 {
    whole_products_in(&run.stderr)
}

/// The whole products a log of the library counts ("N of them whole MUL_MAT products …" per process).
pub fn whole_products_in(log: &str) -> u64 {
    const TAG: &str = "ggml-lowbit: ";
    log.lines()
        .filter_map(|l| l.find(TAG).map(|i| &l[i + TAG.len()..]))
        .filter(|rest| rest.contains(" whole MUL_MAT products"))
        .filter_map(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Whether a preloaded run's log shows the `mul_mat` hook serving products.
pub fn hook_on(run: &ToolRun) -> bool {
    run.stderr.contains("ggml-lowbit: mul_mat hook on")
}

/// llama-perplexity over `chunks` chunks of 128 tokens, evaluated in micro-batches of `ubatch` tokens (1: one
/// token at a time, as in decode; 128: the whole chunk at once).
pub fn perplexity_args(
    model: &Path,
    text: &Path,
    threads: usize,
    chunks: usize,
    ubatch: usize,
) -> Vec<String> {
    let (m, f) = (model.display().to_string(), text.display().to_string());
    let (chunks, threads, ub) = (chunks.to_string(), threads.to_string(), ubatch.to_string());
    let args = [
        "-m", &m, "-f", &f, "-c", "128", "-b", "128", "-ub", &ub, "--chunks", &chunks, "-t",
        &threads,
    ];
    args.map(String::from).to_vec()
}

/// The per-chunk values `[1]x,[2]y,…` and the final estimate of a llama-perplexity run.
pub fn perplexity_values(run: &ToolRun) -> (Vec<String>, Option<String>) {
    let all = format!("{}\n{}", run.stdout, run.stderr);
    let chunks = all
        .split([',', '\n'])
        .map(str::trim)
        .filter(|t| t.starts_with('[') && t.contains(']'))
        .filter(|t| {
            t[1..]
                .split(']')
                .next()
                .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()) && !n.is_empty())
        })
        .map(String::from)
        .collect();
    let fin = all
        .lines()
        .find_map(|l| l.split("Final estimate: ").nth(1))
        .map(|s| s.trim().to_string());
    (chunks, fin)
}

/// llama-bench's arguments: `pp` prompt tokens and `tg` generated ones, 3 repetitions, JSON out.
/// A reference model's name in the report: its file name and weight type (the type most of its matrices have),
/// e.g. `bonsai-1.7b-q4_0.gguf (Q4_0)`. Fails when the file is not a GGUF model.
pub fn reference_label(path: &Path) -> Result<String, String> {
    let types = crate::gguf::tensor_types(path)?;
    let mut counts: Vec<(u32, usize)> = Vec::new();
    for (name, ty) in &types {
        if name.ends_with("norm.weight") {
            continue;
        }
        match counts.iter_mut().find(|(t, _)| t == ty) {
            Some((_, n)) => *n += 1,
            None => counts.push((*ty, 1)),
        }
    }
    let ty = counts
        .iter()
        .max_by_key(|(_, n)| *n)
        .map(|(t, _)| *t)
        .ok_or_else(|| format!("{}: no weight matrices", path.display()))?;
    let type_name = crate::model::WeightType::ALL
        .into_iter()
        .find(|w| w.ggml_type() == ty)
        .map_or_else(|| format!("ggml type {ty}"), |w| w.name().to_uppercase());
    let file = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    Ok(format!("{file} ({type_name})"))
}

pub fn bench_args(model: &Path, threads: usize, pp: usize, tg: usize) -> Vec<String> {
    let m = model.display().to_string();
    [
        "-m",
        &m,
        "-p",
        &pp.to_string(),
        "-n",
        &tg.to_string(),
        "-r",
        "3",
        "-t",
        &threads.to_string(),
        "-o",
        "json",
    ]
    .map(String::from)
    .to_vec()
}

/// (prompt tok/s, generation tok/s) from llama-bench's JSON output.
pub fn bench_rates(run: &ToolRun) -> Result<(f64, f64), String> {
    let v: serde_json::Value = serde_json::from_str(&run.stdout)
        .map_err(|e| format!("llama-bench printed no JSON: {e}"))?;
    let rows = v.as_array().ok_or("llama-bench JSON is not a list")?;
    let rate = |prompt: bool| {
        rows.iter()
            .find(|r| {
                (r["n_prompt"].as_u64().unwrap_or(0) > 0) == prompt
                    && (r["n_gen"].as_u64().unwrap_or(0) > 0) != prompt
            })
            .and_then(|r| r["avg_ts"].as_f64())
            .ok_or(format!(
                "llama-bench gave no {} rate",
                if prompt { "prompt" } else { "generation" }
            ))
    };
    Ok((rate(true)?, rate(false)?))
}

/// Read bandwidth in GB/s over a 2 GiB buffer with `threads` threads (median of 5 passes).
pub fn read_bandwidth(threads: usize) -> f64 {
    let words = (2usize << 30) / 8;
    let buf: Vec<u64> = (0..words as u64).collect();
    let chunk = words.div_ceil(threads.max(1));
    let mut samples = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        let sum: u64 = std::thread::scope(|s| {
            let handles: Vec<_> = buf
                .chunks(chunk)
                .map(|c| s.spawn(move || c.iter().fold(0u64, |a, &x| a.wrapping_add(x))))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(0))
                .fold(0u64, u64::wrapping_add)
        });
        std::hint::black_box(sum);
        samples.push((words * 8) as f64 / start.elapsed().as_secs_f64() / 1e9);
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    samples[samples.len() / 2]
}

/// Debian's llama.cpp 0.7.0 (upstream b11669 over Debian's ggml 0.27.0), fetched as packages by
/// `scripts/prebuilt-ggml.sh`: the newest llama.cpp a user gets without compiling, whose Q2_0 has ggml's own
/// AVX2 kernel.
pub const DEBIAN_TOOLS: &str = "debian-llama.cpp-0.7.0";

/// The tools Debian's llama.cpp 0.7.0 runs, fetched on first use: a folder of small wrappers (one per tool,
/// `lowbit-bin-VARIANT/` in the fetched tree) that start each program through unstable's loader (it needs
/// glibc 2.43) with the CPU variant a release ggml picks on this CPU (`release_cpu_variant`) as its backend.
/// `LD_PRELOAD` reaches the program through the loader, so the wrappers run like any other build's tools.
/// `ggml-rpc-server` (llama.cpp-tools-extra) is among them: an RPC worker over the same ggml.
fn debian_tools_dir() -> Result<PathBuf, String> {
    let root = crate::stock::run_build_script(
        "prebuilt-ggml.sh",
        DEBIAN_TOOLS,
        "usr/bin/llama-perplexity",
    )?;
    let variant = release_cpu_variant();
    let dir = root.join(format!("lowbit-bin-{variant}"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let lib = root.join("usr/lib/x86_64-linux-gnu");
    for tool in [
        "llama-completion",
        "llama-perplexity",
        "llama-bench",
        "ggml-rpc-server",
    ] {
        let bin = if tool == "ggml-rpc-server" {
            root.join("usr/libexec/x86_64-linux-gnu/llama/bin")
                .join(tool)
        } else {
            root.join("usr/bin").join(tool)
        };
        let script = format!(
            "#!/bin/sh\n# Debian's {tool} through unstable's loader, CPU backend variant {variant} (ggml-lowbit-ab)\n\
             L='{lib}'\nGGML_BACKEND_PATH=\"$L/ggml/backends0/libggml-cpu-{variant}.so\" \
             exec \"$L/ld-linux-x86-64.so.2\" --library-path \"$L:$L/llama\" '{bin}' \"$@\"\n",
            lib = lib.display(),
            bin = bin.display(),
        );
        let path = dir.join(tool);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(script.as_str()) {
            use std::os::unix::fs::PermissionsExt;
            let tmp = dir.join(format!(".{tool}.tmp"));
            std::fs::write(&tmp, &script).map_err(|e| format!("{}: {e}", tmp.display()))?;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
                .and_then(|()| std::fs::rename(&tmp, &path))
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(dir)
}

/// The CPU backend variant a release ggml (14 x86 variants, `GGML_BACKEND_DL`) loads on this CPU: the one
/// with the most of the features its build needs, all present (ggml scores each variant and takes the best).
pub fn release_cpu_variant() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let haswell = has!("avx2") && has!("fma") && has!("f16c") && has!("bmi2");
        let skylakex = haswell
            && has!("avx512f")
            && has!("avx512cd")
            && has!("avx512bw")
            && has!("avx512dq")
            && has!("avx512vl");
        let icelake = skylakex && has!("avx512vnni") && has!("avx512vbmi");
        let zen4 = icelake && has!("avx512bf16");
        // AMX is not detectable from stable Rust's macro; the kernel's flags say it.
        let amx = std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| {
            c.lines()
                .find(|l| l.starts_with("flags"))
                .is_some_and(|l| l.split_whitespace().any(|f| f == "amx_int8"))
        });
        if zen4 && amx {
            "sapphirerapids"
        } else if zen4 {
            "zen4"
        } else if icelake {
            "icelake"
        } else if skylakex {
            "skylakex"
        } else if haswell && has!("avxvnni") {
            "alderlake"
        } else if haswell {
            "haswell"
        } else if has!("avx") {
            "sandybridge"
        } else if has!("sse4.2") {
            "sse42"
        } else {
            "x64"
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    "x64"
}

/// Where the tools of one "stock" build variant are: the pinned stock builds (`haswell`, `x64`, `haswell-dl`,
/// `scripts/stock-llama.sh`) or the stand-in fork (`fork-haswell`, `fork-x64`: the pinned tree with
/// `ggml-patch/fork-types.patch`, `scripts/patched-llama.sh`), built on first use.
pub fn tools_dir(variant: &str) -> Result<PathBuf, String> {
    if variant == DEBIAN_TOOLS {
        return debian_tools_dir();
    }
    if variant.starts_with("fork-") {
        crate::stock::run_build_script("patched-llama.sh", variant, "llama-completion")
    } else {
        crate::stock::ensure_built_variant(variant)
    }
}

/// Where the tools of the patched build (`ggml-patch/cpu.patch`, linked against this checkout's library) of a
/// variant are, building them on first use (`scripts/patched-llama.sh`; for the stand-in fork both patches);
/// `None` for a variant without one (`haswell-dl`).
pub fn patched_tools_dir(variant: &str) -> Result<Option<PathBuf>, String> {
    let patched = match variant {
        "haswell" | "x64" => variant.to_string(),
        "fork-haswell" | "fork-x64" => format!("fork-lowbit-{}", &variant["fork-".len()..]),
        _ => return Ok(None),
    };
    crate::stock::run_build_script("patched-llama.sh", &patched, "llama-completion").map(Some)
}
