//! `ggml-lowbit-ab`: the A/B harness. Our symbols against the pinned stock llama.cpp's, on the same inputs.
//!
//! - `bits`: random and adversarial cases per symbol against each stock build; exits 1 on any mismatch.
//! - `speed`: side-by-side, interleaved timing on the Bonsai-8B shapes; writes `target/ab/speed.{md,json,svg}`.
//!
//! Errors (a missing library, an unknown symbol, a bad shape, a matrix larger than the machine's memory, a zero
//! count) print one line and exit with code 2.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use ggml_lowbit::ab::bits::{self, CSymbols, KFormat, MulMatFn, Subject, SymbolReport};
use ggml_lowbit::ab::fork;
use ggml_lowbit::ab::results::{E2eLine, E2eReport};
use ggml_lowbit::ab::speed::{self, MatVec, SpeedRow, BONSAI2_SHAPES, BONSAI_8B_SHAPES};
use ggml_lowbit::model::WeightType;
use ggml_lowbit::stock::StockLib;
use ggml_lowbit::stock::VecDotFn;
use ggml_lowbit::FloatOrder;
use indicatif::{ProgressBar, ProgressStyle};
use tabled::settings::Style;
use tabled::{Table, Tabled};

#[derive(Parser)]
#[command(
    name = "ggml-lowbit-ab",
    version,
    about = "A/B harness: ggml-lowbit against the pinned stock llama.cpp"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Build {
    Haswell,
    X64,
    All,
}

impl Build {
    fn orders(self) -> Vec<FloatOrder> {
        match self {
            Build::Haswell => vec![FloatOrder::Haswell],
            Build::X64 => vec![FloatOrder::X64],
            Build::All => FloatOrder::ALL.to_vec(),
        }
    }
}

/// Stock builds for `e2e`: the two float orders, and the haswell build as release binaries load it
/// (`GGML_BACKEND_DL=ON`: ggml dlopens the CPU backend); for PQ2_0 / PTQ1_0 models the stand-in fork
/// (`ggml-patch/fork-types.patch`) in the two float orders.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum E2eBuild {
    Haswell,
    X64,
    HaswellDl,
    ForkHaswell,
    ForkX64,
    /// Every build that loads the model: the three stock builds, or the two stand-in forks for a fork model.
    All,
    /// Debian's llama.cpp 0.7.0 (ggml 0.27.0, whose Q2_0 has its own AVX2 kernel), fetched as packages and run
    /// through unstable's loader with the CPU variant a release picks here.
    #[value(name = "debian-llama.cpp-0.7.0")]
    DebianLlamaCpp,
    /// The matrix: the pinned tree's haswell, DL and x64 builds, then Debian's llama.cpp 0.7.0.
    Matrix,
    /// The pinned tree built for this CPU (`GGML_NATIVE=ON`): the strongest stock build a user can make here,
    /// compiled on first use (minutes), the yardstick for `--reference` models.
    Native,
    /// The pinned tree's haswell build with llama.cpp's RPC backend and `ggml-rpc-server` (`GGML_RPC=ON`,
    /// compiled on first use), for `--rpc`.
    HaswellRpc,
}

impl E2eBuild {
    fn variants(self, kind: ggml_lowbit::ab::e2e::ModelKind) -> Result<Vec<&'static str>> {
        use ggml_lowbit::ab::e2e::ModelKind;
        let fork = kind == ModelKind::Fork;
        Ok(match self {
            E2eBuild::All if fork => vec!["fork-haswell", "fork-x64"],
            E2eBuild::All => vec!["haswell", "x64", "haswell-dl"],
            E2eBuild::ForkHaswell => vec!["fork-haswell"],
            E2eBuild::ForkX64 => vec!["fork-x64"],
            _ if fork => {
                return Err(
                    "the model has PrismML-fork types (PQ2_0 = 142, PTQ1_0 = 143), which the pinned stock llama.cpp \
                     cannot load: use --build fork-haswell, fork-x64 or all (the stand-in fork, docs/fork.md)"
                        .into(),
                )
            }
            E2eBuild::Haswell => vec!["haswell"],
            E2eBuild::X64 => vec!["x64"],
            E2eBuild::HaswellDl => vec!["haswell-dl"],
            E2eBuild::Native => vec!["native"],
            E2eBuild::HaswellRpc => vec!["haswell-rpc"],
            E2eBuild::DebianLlamaCpp => vec![ggml_lowbit::ab::e2e::DEBIAN_TOOLS],
            E2eBuild::Matrix => vec![
                "haswell",
                "haswell-dl",
                "x64",
                ggml_lowbit::ab::e2e::DEBIAN_TOOLS,
            ],
        })
    }
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Via {
    /// The rlib's kernels, at every instruction set this CPU has.
    Rlib,
    /// The built libggml_lowbit.so, loaded with libloading.
    Cdylib,
    All,
}

/// A count given on the command line that must be positive.
fn at_least_one() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
}

#[derive(Subcommand)]
enum Command {
    /// Bit comparison against the stock library: every mismatch is reported, any mismatch exits 1.
    Bits {
        /// Cases per symbol per stock build (at least 1: a run that compares nothing is no check).
        #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..))]
        cases: u64,
        #[arg(long, default_value_t = 0x5eed)]
        seed: u64,
        #[arg(long, value_enum, default_value_t = Build::All)]
        build: Build,
        #[arg(long, value_enum, default_value_t = Via::All)]
        via: Via,
        /// Path of libggml_lowbit.so (default: next to this binary).
        #[arg(long)]
        lib: Option<PathBuf>,
        /// Only report these symbols (comma-separated).
        #[arg(long, value_delimiter = ',')]
        symbol: Vec<String>,
        /// A prebuilt ggml as the stock side instead of the pinned builds (a name of `ggml-lowbit-ab graph`,
        /// e.g. debian-libggml0-0.27.0): the library's kernels for what its probe finds there, at every
        /// instruction set, against that build's own (through its loader where it needs glibc 2.38).
        #[arg(long)]
        prebuilt: Option<String>,
        /// The prebuilt build's CPU variant (default: the one its users get on this CPU).
        #[arg(long, requires = "prebuilt")]
        variant: Option<String>,
    },
    /// Speed side by side with stock: median ratios over interleaved repetitions.
    Speed {
        /// Shapes as ROWSxCOLS, comma-separated (default: the Bonsai-8B shapes).
        #[arg(long, value_delimiter = ',')]
        shapes: Vec<String>,
        #[arg(long, default_value_t = 7)]
        reps: usize,
        /// Thread counts, comma-separated ("all" = every core).
        #[arg(long, value_delimiter = ',', default_value = "1,all")]
        threads: Vec<String>,
        #[arg(long, value_enum, default_value_t = Build::Haswell)]
        build: Build,
        #[arg(long)]
        lib: Option<PathBuf>,
        /// Only these symbols (comma-separated).
        #[arg(long, value_delimiter = ',')]
        symbol: Vec<String>,
        /// Report folder.
        #[arg(long, default_value = "target/ab")]
        out: PathBuf,
        /// A prebuilt ggml as the stock side instead of the pinned build (a name of `ggml-lowbit-ab graph`, e.g.
        /// debian-libggml0-0.27.0): its own kernels against this crate's exports configured by the library's
        /// probe of that build, as the preload serves over it (the fork's formats are not in these builds).
        #[arg(long, conflicts_with_all = ["build", "lib"])]
        prebuilt: Option<String>,
        /// The prebuilt build's CPU variant (default: the one its users get on this CPU).
        #[arg(long, requires = "prebuilt")]
        variant: Option<String>,
    },
    /// Writes a synthetic llama-architecture GGUF model with random low-bit weights shaped like a real one.
    Model {
        /// tiny, tiny-moe, bonsai-1.7b, bonsai-8b or bonsai2-27b.
        #[arg(long, default_value = "tiny")]
        preset: String,
        /// Weight type: q2_0, q1_0, tq2_0, tq1_0, iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, the PrismML fork's
        /// pq2_0 (142) / ptq1_0 (143), which only the fork loads, or q4_0, which the library does not serve (the
        /// reference of `e2e --reference`).
        #[arg(long = "type", default_value = "q2_0")]
        wtype: String,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Output file.
        #[arg(long)]
        out: PathBuf,
    },
    /// Runs the stock llama.cpp tools on a model with and without the preload, side by side: greedy completion
    /// text, perplexity per chunk, llama-bench throughput, and the read-bandwidth ceiling for decode.
    E2e {
        #[arg(long)]
        model: PathBuf,
        #[arg(long, value_enum, default_value_t = E2eBuild::Haswell)]
        build: E2eBuild,
        /// Threads for the tools (default: every core).
        #[arg(long, value_parser = at_least_one())]
        threads: Option<usize>,
        /// Tokens of greedy completion (at least 1: no text compares equal to no text).
        #[arg(long, default_value_t = 32, value_parser = at_least_one())]
        n_predict: usize,
        /// Perplexity chunks of 128 tokens (0 skips perplexity: useful for big models on slow stock builds).
        #[arg(long, default_value_t = 8)]
        ppl_chunks: usize,
        /// Micro-batch sizes for the perplexity runs (comma-separated; 1 evaluates token by token, like decode).
        #[arg(long, value_delimiter = ',', default_value = "128", value_parser = at_least_one())]
        ubatch: Vec<usize>,
        /// Skip llama-bench and the bandwidth measurement.
        #[arg(long)]
        no_bench: bool,
        /// llama-bench's prompt length (its ppN test).
        #[arg(long, default_value_t = 512, value_parser = at_least_one())]
        pp: usize,
        /// llama-bench's generated tokens (its tgN test).
        #[arg(long, default_value_t = 128, value_parser = at_least_one())]
        tg: usize,
        /// llama-bench rounds: stock, the preloads and the patched build run in turn this many times, each with
        /// llama-bench's own 3 repetitions, and each column reports its median round.
        #[arg(long, default_value_t = 3, value_parser = at_least_one())]
        bench_rounds: usize,
        /// Reference models (comma-separated GGUF files, e.g. `model --type q4_0` of the same preset): what a
        /// user would otherwise run. Each is benchmarked on the same stock build in every llama-bench round,
        /// without the library, and the model's columns are given as multiples of it.
        #[arg(long, value_delimiter = ',')]
        reference: Vec<PathBuf>,
        /// Run every check through this many local `ggml-rpc-server` workers (`--build haswell-rpc` or
        /// `debian-llama.cpp-0.7.0`), `--threads` threads each (default 1): one plain process, plain workers,
        /// preloaded workers, and preloaded workers with a preloaded host, compared (`docs/rpc.md`).
        #[arg(long, value_parser = at_least_one())]
        rpc: Option<usize>,
        #[arg(long)]
        lib: Option<PathBuf>,
    },
    /// The graph-level check over prebuilt ggml builds from the registries (no libllama needed): MUL_MAT
    /// products of every low-bit type through ggml's public API with and without the library, compared bit for
    /// bit, then a Bonsai-1.7B-shaped Q2_0 product timed both ways, interleaved (`tests/c/graph_host.c`). Each
    /// build runs the CPU variant its users get here. Exits 1 on any differing product.
    Graph {
        /// A build of `scripts/prebuilt-ggml.sh` (debian-libggml1-1.1.1, debian-libggml0-0.27.0,
        /// llama-cpp-py-sync-0.11739, node-llama-cpp-3.22.1, node-llama-cpp-3.21.1, libggml-python-0.20.2), the
        /// pinned tree's pinned-haswell or pinned-x64, or "all" (every one of them).
        #[arg(long, default_value = "all")]
        build: String,
        #[arg(long, default_value_t = 2, value_parser = at_least_one())]
        threads: usize,
        /// Column counts of the timed product (comma-separated; 1 is decode, more a prompt's micro-batch).
        #[arg(long, value_delimiter = ',', default_value = "1,16,64", value_parser = at_least_one())]
        columns: Vec<usize>,
        /// Processes each way per column count, alternating (5 timed repetitions each).
        #[arg(long, default_value_t = 3, value_parser = at_least_one())]
        rounds: usize,
        #[arg(long)]
        lib: Option<PathBuf>,
    },
    /// The Metal kernels (src/metal/) on the SIMT emulator: counted operations per weight in each kernel's hot
    /// loop, ours against the pinned tree's (docs/METAL.md). Needs g++ (`$CXX`, default `c++`).
    Metal,
    /// What libggml_lowbit.so chooses on this machine with this environment (instruction set, float order).
    Config {
        #[arg(long)]
        lib: Option<PathBuf>,
    },
    /// Regenerates the results tables marked in markdown files from their `speed` reports
    /// (`<!-- results: PATH.json -->` … `<!-- /results -->`, PATH relative to the file); without `--write`,
    /// exits 1 when a table differs from what its report gives.
    Tables {
        /// Rewrite the files instead of checking them.
        #[arg(long)]
        write: bool,
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

type Result<T> = std::result::Result<T, String>;

fn main() -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        eprintln!("ggml-lowbit-ab: internal error: {info}");
    }));
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Bits {
            cases,
            seed,
            prebuilt: Some(name),
            variant,
            via,
            symbol,
            ..
        } => cmd_bits_prebuilt(cases, seed, &name, variant.as_deref(), via, &symbol),
        Command::Bits {
            cases,
            seed,
            build,
            via,
            lib,
            symbol,
            ..
        } => cmd_bits(cases, seed, build, via, lib, &symbol),
        Command::Speed {
            shapes,
            reps,
            threads,
            build,
            lib,
            symbol,
            out,
            prebuilt,
            variant,
        } => {
            let stock = match &prebuilt {
                Some(name) => SpeedStock::Prebuilt(name, variant.as_deref()),
                None => SpeedStock::Pinned(build, lib),
            };
            cmd_speed(&shapes, reps, &threads, stock, &symbol, &out)
        }
        Command::Config { lib } => cmd_config(lib),
        Command::Tables { write, files } => cmd_tables(write, &files),
        Command::Metal => cmd_metal(),
        Command::Graph {
            build,
            threads,
            columns,
            rounds,
            lib,
        } => cmd_graph(&build, threads, &columns, rounds, lib),
        Command::E2e {
            model,
            build,
            threads,
            n_predict,
            ppl_chunks,
            ubatch,
            no_bench,
            pp,
            tg,
            bench_rounds,
            reference,
            rpc,
            lib,
        } => {
            let bench = (!no_bench).then_some(BenchPlan {
                pp,
                tg,
                rounds: bench_rounds,
            });
            match rpc {
                Some(_) if !reference.is_empty() => {
                    Err("--reference does not go with --rpc".into())
                }
                Some(workers) => cmd_e2e_rpc(
                    &model,
                    build,
                    (workers, threads.unwrap_or(1)),
                    (n_predict, ppl_chunks, &ubatch),
                    bench,
                    lib,
                ),
                None => cmd_e2e(
                    &model, build, threads, n_predict, ppl_chunks, &ubatch, bench, &reference, lib,
                ),
            }
        }
        Command::Model {
            preset,
            wtype,
            seed,
            out,
        } => cmd_model(&preset, &wtype, seed, &out),
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ggml-lowbit-ab: {e}");
            ExitCode::from(2)
        }
    }
}

fn check_symbols(wanted: &[String], known: &[&str]) -> Result<()> {
    for w in wanted {
        if !known.contains(&w.as_str()) {
            return Err(format!(
                "unknown symbol {w:?} (known: {})",
                known.join(", ")
            ));
        }
    }
    Ok(())
}

fn default_lib(lib: Option<PathBuf>) -> Result<PathBuf> {
    let path = match lib {
        Some(p) => p,
        None => std::env::current_exe()
            .map_err(|e| e.to_string())?
            .parent()
            .ok_or("cannot locate this binary's folder")?
            .join("libggml_lowbit.so"),
    };
    if !path.is_file() {
        return Err(format!(
            "library not found: {} (build it with cargo build --release)",
            path.display()
        ));
    }
    Ok(path)
}

/// Refuses a libggml_lowbit.so built from other sources than this binary (cargo rebuilds the cdylib only on
/// `cargo build`, so a test run can leave a stale one behind).
fn check_fresh(l: &libloading::Library, path: &Path) -> Result<()> {
    // SAFETY: `ggml_lowbit_source_hash` returns a static NUL-terminated string.
    let theirs = unsafe {
        let f = l
            .get::<unsafe extern "C" fn() -> *const std::ffi::c_char>(b"ggml_lowbit_source_hash\0")
            .map_err(|e| format!("{}: not a ggml-lowbit library: {e}", path.display()))?;
        std::ffi::CStr::from_ptr(f()).to_string_lossy().into_owned()
    };
    if theirs != ggml_lowbit::SOURCE_HASH {
        return Err(format!(
            "{} is stale (built from other sources than this harness): run cargo build --release",
            path.display()
        ));
    }
    Ok(())
}

/// Loads a private copy of our cdylib configured for `order`: each copy has its own once-read configuration,
/// so both float orders can be checked in one process. The copy reports the order it chose, which must match.
fn load_ours(lib: &Path, order: FloatOrder, scratch: &Path) -> Result<libloading::Library> {
    let copy = scratch.join(format!("libggml_lowbit-{}.so", order.name()));
    std::fs::copy(lib, &copy).map_err(|e| format!("cannot copy {}: {e}", lib.display()))?;
    std::env::set_var("GGML_LOWBIT_MATCH", order.name());
    // Our kernels for every symbol, also those the library passes to stock when serving in front of it: the
    // comparisons are about our code.
    std::env::set_var("GGML_LOWBIT_SERVE_ALL", "1");
    // SAFETY: loading our own library runs no initialisers with preconditions.
    let l = unsafe { libloading::Library::new(&copy) }
        .map_err(|e| format!("cannot load {}: {e}", copy.display()))?;
    check_fresh(&l, lib)?;
    // SAFETY: `ggml_lowbit_float_order` returns a static NUL-terminated string.
    let chosen = unsafe {
        let f = l
            .get::<unsafe extern "C" fn() -> *const std::ffi::c_char>(b"ggml_lowbit_float_order\0")
            .map_err(|e| e.to_string())?;
        std::ffi::CStr::from_ptr(f()).to_string_lossy().into_owned()
    };
    std::env::remove_var("GGML_LOWBIT_MATCH");
    std::env::remove_var("GGML_LOWBIT_SERVE_ALL");
    if chosen != order.name() {
        return Err(format!(
            "{} chose float order {chosen}, expected {}",
            copy.display(),
            order.name()
        ));
    }
    Ok(l)
}

fn cmd_model(preset: &str, wtype: &str, seed: u64, out: &Path) -> Result<ExitCode> {
    let names: Vec<&str> = ggml_lowbit::model::PRESETS.iter().map(|p| p.name).collect();
    let p = ggml_lowbit::model::preset(preset)
        .ok_or_else(|| format!("unknown preset {preset:?} (known: {})", names.join(", ")))?;
    let t = ggml_lowbit::model::WeightType::parse(wtype).ok_or_else(|| {
        let known: Vec<&str> = ggml_lowbit::model::WeightType::ALL
            .iter()
            .map(|t| t.name())
            .collect();
        format!(
            "unsupported weight type {wtype:?} (supported: {})",
            known.join(", ")
        )
    })?;
    let start = std::time::Instant::now();
    let info = ggml_lowbit::model::write_model(out, p, t, seed)?;
    // GiB for the big presets, MiB for the tiny ones (which would read "0.00 GiB").
    let size = |b: u64| {
        if b >= 1 << 30 {
            format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
        } else {
            format!("{:.2} MiB", b as f64 / (1u64 << 20) as f64)
        }
    };
    println!(
        "wrote {} ({} preset, {wtype}): {}, {} of weights, in {:.1} s",
        out.display(),
        info.preset,
        size(info.bytes),
        size(info.weight_bytes),
        start.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

fn short(s: &str, n: usize) -> String {
    let t: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if t.chars().count() > n {
        format!("{}…", t.chars().take(n).collect::<String>())
    } else {
        t
    }
}

#[allow(clippy::too_many_arguments)]
/// What `e2e` asks of llama-bench: `pp` prompt tokens, `tg` generated ones, `rounds` interleaved rounds.
#[derive(Clone, Copy)]
struct BenchPlan {
    pp: usize,
    tg: usize,
    rounds: usize,
}

#[allow(clippy::too_many_arguments)]
fn cmd_e2e(
    model: &Path,
    build: E2eBuild,
    threads: Option<usize>,
    n_predict: usize,
    ppl_chunks: usize,
    ubatch: &[usize],
    bench: Option<BenchPlan>,
    references: &[PathBuf],
    lib: Option<PathBuf>,
) -> Result<ExitCode> {
    let no_bench = bench.is_none();
    use ggml_lowbit::ab::e2e::{self, Preload, ToolRun};
    let variants = build.variants(e2e::check_model(model)?)?;
    let model = std::fs::canonicalize(model).map_err(|e| format!("{}: {e}", model.display()))?;
    if !references.is_empty() && no_bench {
        return Err("--reference models are compared by llama-bench: drop --no-bench".into());
    }
    let references: Vec<(PathBuf, String)> = references
        .iter()
        .map(|r| {
            let path = std::fs::canonicalize(r).map_err(|e| format!("{}: {e}", r.display()))?;
            let label = e2e::reference_label(&path)?;
            Ok((path, label))
        })
        .collect::<Result<_>>()?;
    let lib = default_lib(lib)?;
    {
        // SAFETY: loading our own library runs no initialisers with preconditions.
        let l = unsafe { libloading::Library::new(&lib) }
            .map_err(|e| format!("cannot load {}: {e}", lib.display()))?;
        check_fresh(&l, &lib)?;
    }
    let lib = std::fs::canonicalize(&lib).map_err(|e| e.to_string())?;
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let threads = threads.unwrap_or(cores).max(1);
    let scratch = std::env::temp_dir().join(format!("ggml-lowbit-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
    let text = scratch.join("perplexity.txt");
    std::fs::write(&text, e2e::perplexity_text()).map_err(|e| e.to_string())?;
    let mut lines = Vec::new();
    let mut ok = true;
    let mut tg_rates: Option<(f64, f64, Option<f64>)> = None;
    // Bandwidth is measured before and after the runs and the higher value kept: on a shared machine it moves
    // (33–55 GB/s here), and the higher ceiling is the stricter yardstick for decode.
    let bw_before = (!no_bench).then(|| e2e::read_bandwidth(threads));
    for variant in variants {
        let dir = e2e::tools_dir(variant)?;
        let patched_dir = e2e::patched_tools_dir(variant)?;
        let b = if variant == e2e::DEBIAN_TOOLS {
            format!("{variant} (ggml 0.27.0, {})", e2e::release_cpu_variant())
        } else {
            format!("{variant} (ggml 0.25.3)")
        };
        // Stock, preloaded with the vec_dot exports only, preloaded with the mul_mat hook on as well, and the
        // patched build (where there is one).
        let four = |tool: &str, args: &[String]| -> Result<[Option<ToolRun>; 4]> {
            let timing = tool == "llama-bench";
            let with = |env| {
                Some(Preload {
                    lib: Some(lib.as_path()),
                    env,
                })
            };
            let stock = e2e::run_tool(&dir, tool, args, None, timing)?;
            let vec_dot = e2e::run_tool(&dir, tool, args, with(e2e::VEC_DOT_ONLY), timing)?;
            let hook = e2e::run_tool(&dir, tool, args, with(e2e::WITH_HOOK), timing)?;
            let linked = Some(Preload {
                lib: None,
                env: &[],
            });
            let patched = match &patched_dir {
                Some(p) => Some(e2e::run_tool(p, tool, args, linked, timing)?),
                None => None,
            };
            if !timing {
                let ours = [
                    ("the preload", Some(&vec_dot)),
                    ("the preload", Some(&hook)),
                    ("the patched build", patched.as_ref()),
                ];
                // Served or passed to a faster stock kernel: either way the call went through the library.
                for (what, run) in ours {
                    if run.is_some_and(|r| e2e::served_calls(r) + e2e::passed_calls(r) == 0) {
                        return Err(format!("{tool} with {what} made no call into ggml-lowbit"));
                    }
                }
                if !e2e::hook_on(&hook) || patched.as_ref().is_some_and(|r| !e2e::hook_on(r)) {
                    return Err(format!(
                        "{tool}: the whole-product path did not switch on over the {variant} build (GGML_LOWBIT_LOG=1 says why)"
                    ));
                }
            }
            Ok([Some(stock), Some(vec_dot), Some(hook), patched])
        };
        let none = || "-".to_string();
        let verdict = |same: bool, what: &str| {
            if same {
                what.to_string()
            } else {
                "DIFFERENT".to_string()
            }
        };
        let [s, v, h, pt] = four(
            "llama-completion",
            &e2e::completion_args(&model, threads, n_predict),
        )?;
        let (s, v, h) = (s.expect("ran"), v.expect("ran"), h.expect("ran"));
        let same = s.stdout == v.stdout
            && s.stdout == h.stdout
            && pt.as_ref().is_none_or(|p| p.stdout == s.stdout);
        ok &= same;
        let calls = |r: &ToolRun| {
            format!(
                "{} ({} calls, {} whole products)",
                short(&r.stdout, 24),
                e2e::served_calls(r),
                e2e::whole_products(r)
            )
        };
        lines.push(E2eLine {
            build: b.clone(),
            check: format!("llama-completion, greedy, {n_predict} tokens, {threads} thread(s)"),
            stock: short(&s.stdout, 24),
            vec_dot: calls(&v),
            hook: calls(&h),
            patched: pt.as_ref().map_or_else(none, calls),
            result: verdict(same, "identical text"),
        });
        for &ub in if ppl_chunks > 0 { ubatch } else { &[] } {
            let args = e2e::perplexity_args(&model, &text, threads, ppl_chunks, ub);
            let runs = four("llama-perplexity", &args)?;
            let values: Vec<Option<(Vec<String>, Option<String>)>> = runs
                .iter()
                .map(|r| r.as_ref().map(e2e::perplexity_values))
                .collect();
            let (sv, sf) = values[0].clone().expect("ran");
            let same = !sv.is_empty() && values.iter().flatten().all(|(v, f)| *v == sv && *f == sf);
            ok &= same;
            let est = |i: usize| match &values[i] {
                Some((_, f)) => f.clone().unwrap_or_else(|| "no estimate".into()),
                None => none(),
            };
            lines.push(E2eLine {
                build: b.clone(),
                check: format!(
                    "llama-perplexity, {} chunks of 128, ubatch {ub}, {threads} thread(s)",
                    sv.len()
                ),
                stock: est(0),
                vec_dot: est(1),
                hook: est(2),
                patched: est(3),
                result: verdict(same, "identical per-chunk values"),
            });
        }
        if let Some(plan) = bench.filter(|_| dir.join("llama-bench").is_file()) {
            let args = e2e::bench_args(&model, threads, plan.pp, plan.tg);
            // Every column once per round, in turn, then each reference on stock; each column's median round
            // (by each rate alone).
            let mut rounds: Vec<Vec<Option<(f64, f64)>>> = Vec::new();
            let mut reference_rounds: Vec<Vec<(f64, f64)>> = vec![Vec::new(); references.len()];
            for _ in 0..plan.rounds {
                let runs = four("llama-bench", &args)?;
                rounds.push(
                    runs.iter()
                        .map(|r| r.as_ref().map(e2e::bench_rates).transpose())
                        .collect::<Result<_>>()?,
                );
                for ((path, _), rates) in references.iter().zip(&mut reference_rounds) {
                    let args = e2e::bench_args(path, threads, plan.pp, plan.tg);
                    let run = e2e::run_tool(&dir, "llama-bench", &args, None, true)?;
                    rates.push(e2e::bench_rates(&run)?);
                }
            }
            // The middle round of some rates (the upper one of an even count), each rate on its own.
            let middle = |mut v: Vec<f64>| -> Option<f64> {
                v.sort_by(f64::total_cmp);
                (!v.is_empty()).then(|| v[v.len() / 2])
            };
            let median = |column: usize, generation: bool| -> Option<f64> {
                middle(
                    rounds
                        .iter()
                        .filter_map(|r| r[column].map(|(p, g)| if generation { g } else { p }))
                        .collect(),
                )
            };
            let rates: Vec<Option<(f64, f64)>> = (0..4)
                .map(|c| Some((median(c, false)?, median(c, true)?)))
                .collect();
            let (sp, sg) = rates[0].expect("ran");
            let (pp_test, tg_test) = (format!("pp{}", plan.pp), format!("tg{}", plan.tg));
            for (test, generation, stock) in [(&pp_test, false, sp), (&tg_test, true, sg)] {
                let cell = |i: usize| match rates[i] {
                    Some((p, g)) => {
                        let v = if generation { g } else { p };
                        format!("{v:.2} tok/s ({:.2}x)", v / stock)
                    }
                    None => none(),
                };
                lines.push(E2eLine {
                    build: b.clone(),
                    check: format!(
                        "llama-bench {test}, {threads} thread(s), median of {} round(s)",
                        plan.rounds
                    ),
                    stock: format!("{stock:.2} tok/s"),
                    vec_dot: cell(1),
                    hook: cell(2),
                    patched: cell(3),
                    result: "speed".into(),
                });
            }
            for ((_, label), of_reference) in references.iter().zip(reference_rounds) {
                let median_of = |generation: bool| {
                    middle(
                        of_reference
                            .iter()
                            .map(|&(p, g)| if generation { g } else { p })
                            .collect(),
                    )
                    .expect("one rate per round, at least one round")
                };
                let (rp, rg) = (median_of(false), median_of(true));
                for (test, generation, reference) in [(&pp_test, false, rp), (&tg_test, true, rg)] {
                    let times = |i: usize| match rates[i] {
                        Some((p, g)) => {
                            let v = if generation { g } else { p };
                            format!("{:.2}x it", v / reference)
                        }
                        None => none(),
                    };
                    lines.push(E2eLine {
                        build: b.clone(),
                        check: format!(
                            "llama-bench {test}, reference {label} on this stock build, {threads} thread(s), \
                             median of {} round(s)",
                            plan.rounds
                        ),
                        stock: format!("{reference:.2} tok/s (the model: {})", times(0)),
                        vec_dot: times(1),
                        hook: times(2),
                        patched: times(3),
                        result: "speed against the reference".into(),
                    });
                }
            }
            tg_rates.get_or_insert((
                rates[1].expect("ran").1,
                rates[2].expect("ran").1,
                rates[3].map(|r| r.1),
            ));
        }
    }
    if !no_bench {
        let bw = e2e::read_bandwidth(threads).max(bw_before.unwrap_or(0.0));
        let bytes = std::fs::metadata(&model).map(|m| m.len()).unwrap_or(0) as f64;
        let ceiling = bw * 1e9 / bytes;
        let share = |tg: Option<f64>| match tg {
            Some(t) => format!(
                "tg{} at {:.0} % of it",
                bench.map_or(0, |b| b.tg),
                100.0 * t / ceiling
            ),
            None => "-".into(),
        };
        lines.push(E2eLine {
            build: "-".into(),
            check: format!(
                "read bandwidth, {threads} thread(s), 2 GiB, best of before/after: {bw:.1} GB/s"
            ),
            stock: format!("decode ceiling {ceiling:.2} tok/s"),
            vec_dot: share(tg_rates.map(|r| r.0)),
            hook: share(tg_rates.map(|r| r.1)),
            patched: share(tg_rates.and_then(|r| r.2)),
            result: format!("model {:.2} GiB", bytes / (1u64 << 30) as f64),
        });
    }
    let _ = std::fs::remove_dir_all(&scratch);
    println!("model: {}", model.display());
    println!("{}", Table::new(&lines).with(Style::markdown()));
    let report = E2eReport {
        date: speed::utc_date_today(),
        cpu: speed::cpu_model_name(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        model: model
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        lines,
    };
    std::fs::create_dir_all("target/ab").map_err(|e| format!("cannot create target/ab: {e}"))?;
    std::fs::write(
        "target/ab/e2e.json",
        serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("cannot write target/ab/e2e.json: {e}"))?;
    println!("report: target/ab/e2e.json");
    println!(
        "e2e: {}",
        if ok {
            "identical outputs with and without ggml-lowbit"
        } else {
            "OUTPUTS DIFFER"
        }
    );
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[derive(Tabled)]
struct RpcLine {
    check: String,
    #[tabled(rename = "one plain process")]
    alone: String,
    #[tabled(rename = "plain workers")]
    plain: String,
    #[tabled(rename = "preloaded workers")]
    workers: String,
    #[tabled(rename = "preloaded workers and host")]
    all: String,
    result: String,
}

/// `e2e --rpc N`: each check in one plain process (with N × `threads` threads), then through N local workers
/// of `threads` threads each: plain, preloaded, and preloaded with a preloaded host. The text, the per-chunk
/// perplexity and (unless `bench` is `None`) llama-bench's rates, interleaved by rounds; the tiny model's decode
/// over the same workers measures what the RPC path costs per token. Exit 1 on any difference.
fn cmd_e2e_rpc(
    model: &Path,
    build: E2eBuild,
    (workers, threads): (usize, usize),
    (n_predict, ppl_chunks, ubatch): (usize, usize, &[usize]),
    bench: Option<BenchPlan>,
    lib: Option<PathBuf>,
) -> Result<ExitCode> {
    use ggml_lowbit::ab::e2e::{self, Preload, ToolRun};
    use ggml_lowbit::ab::rpc;
    let variant = match build {
        E2eBuild::HaswellRpc => "haswell-rpc",
        E2eBuild::DebianLlamaCpp => e2e::DEBIAN_TOOLS,
        _ => return Err(
            "--rpc needs a build with ggml-rpc-server: --build haswell-rpc (the pinned tree with \
                        GGML_RPC=ON, compiled on first use) or debian-llama.cpp-0.7.0"
                .into(),
        ),
    };
    if e2e::check_model(model)? == e2e::ModelKind::Fork {
        return Err("--rpc runs mainline models (the stand-in fork has no RPC build)".into());
    }
    let model = std::fs::canonicalize(model).map_err(|e| format!("{}: {e}", model.display()))?;
    let lib = default_lib(lib)?;
    {
        // SAFETY: loading our own library runs no initialisers with preconditions.
        let l = unsafe { libloading::Library::new(&lib) }
            .map_err(|e| format!("cannot load {}: {e}", lib.display()))?;
        check_fresh(&l, &lib)?;
    }
    let lib = std::fs::canonicalize(&lib).map_err(|e| e.to_string())?;
    let dir = e2e::tools_dir(variant)?;
    let scratch = std::env::temp_dir().join(format!("ggml-lowbit-rpc-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
    let text = scratch.join("perplexity.txt");
    std::fs::write(&text, e2e::perplexity_text()).map_err(|e| e.to_string())?;
    let (plain, plain_at) = rpc::start_workers(&dir, &scratch, "plain", (workers, threads), None)?;
    let (ours, ours_at) =
        rpc::start_workers(&dir, &scratch, "preloaded", (workers, threads), Some(&lib))?;
    let alone_threads = workers * threads;
    // The four columns of one check; `args(t)` the tool's arguments for `t` threads.
    let four =
        |tool: &str, args: &dyn Fn(usize) -> Vec<String>, timing: bool| -> Result<[ToolRun; 4]> {
            let host = || {
                Some(Preload {
                    lib: Some(lib.as_path()),
                    env: e2e::WITH_HOOK,
                })
            };
            Ok([
                e2e::run_tool(&dir, tool, &args(alone_threads), None, timing)?,
                e2e::run_tool(
                    &dir,
                    tool,
                    &rpc::over_workers(&args(threads), &plain_at),
                    None,
                    timing,
                )?,
                e2e::run_tool(
                    &dir,
                    tool,
                    &rpc::over_workers(&args(threads), &ours_at),
                    None,
                    timing,
                )?,
                e2e::run_tool(
                    &dir,
                    tool,
                    &rpc::over_workers(&args(threads), &ours_at),
                    host(),
                    timing,
                )?,
            ])
        };
    let verdict = |same: bool, what: &str| {
        if same {
            what.to_string()
        } else {
            "DIFFERENT".to_string()
        }
    };
    let mut lines = Vec::new();
    let mut ok = true;
    let runs = four(
        "llama-completion",
        &|t| e2e::completion_args(&model, t, n_predict),
        false,
    )?;
    let same = runs.iter().all(|r| r.stdout == runs[0].stdout);
    ok &= same;
    let cell = |r: &ToolRun| short(&r.stdout, 24);
    lines.push(RpcLine {
        check: format!("llama-completion, greedy, {n_predict} tokens"),
        alone: cell(&runs[0]),
        plain: cell(&runs[1]),
        workers: cell(&runs[2]),
        all: format!(
            "{} ({} calls on the host)",
            cell(&runs[3]),
            e2e::served_calls(&runs[3])
        ),
        result: verdict(same, "identical text"),
    });
    for &ub in if ppl_chunks > 0 { ubatch } else { &[] } {
        let runs = four(
            "llama-perplexity",
            &|t| e2e::perplexity_args(&model, &text, t, ppl_chunks, ub),
            false,
        )?;
        let values: Vec<_> = runs.iter().map(e2e::perplexity_values).collect();
        let same = !values[0].0.is_empty() && values.iter().all(|v| *v == values[0]);
        ok &= same;
        let est = |i: usize| values[i].1.clone().unwrap_or_else(|| "no estimate".into());
        lines.push(RpcLine {
            check: format!(
                "llama-perplexity, {} chunks of 128, ubatch {ub}",
                values[0].0.len()
            ),
            alone: est(0),
            plain: est(1),
            workers: est(2),
            all: est(3),
            result: verdict(same, "identical per-chunk values"),
        });
    }
    // Each worker's log: it took every run's connection (the host computed on it), and the library configured
    // itself in the preloaded ones only.
    let runs = 1 + if ppl_chunks > 0 { ubatch.len() } else { 0 };
    let took_every_run = plain.iter().all(|w| w.connections() >= runs)
        && ours.iter().all(|w| w.connections() >= 2 * runs);
    let on: Vec<bool> = plain
        .iter()
        .chain(&ours)
        .map(rpc::Worker::library_on)
        .collect();
    let logs_right =
        took_every_run && on[..workers].iter().all(|&o| !o) && on[workers..].iter().all(|&o| o);
    ok &= logs_right;
    lines.push(RpcLine {
        check: format!("the library in the workers' logs ({workers} per column)"),
        alone: "-".into(),
        plain: format!(
            "{} of {workers}",
            on[..workers].iter().filter(|&&o| o).count()
        ),
        workers: format!(
            "{} of {workers}",
            on[workers..].iter().filter(|&&o| o).count()
        ),
        all: "(the same workers)".into(),
        result: verdict(
            logs_right,
            "every worker took every run; served in the preloaded ones only",
        ),
    });
    if let Some(plan) = bench {
        // Rounds of the four columns in turn, then the tiny model alone and over the plain workers (the cost of
        // the RPC path per token: its compute is negligible). Medians per column.
        let tiny = scratch.join("tiny.gguf");
        let tiny_preset = ggml_lowbit::model::preset("tiny").expect("a preset");
        ggml_lowbit::model::write_model(
            &tiny,
            tiny_preset,
            ggml_lowbit::model::WeightType::Q2_0,
            7,
        )?;
        let mut rates: Vec<[(f64, f64); 4]> = Vec::new();
        let mut tiny_rates: Vec<(f64, f64)> = Vec::new();
        for _ in 0..plan.rounds {
            let runs = four(
                "llama-bench",
                &|t| e2e::bench_args(&model, t, plan.pp, plan.tg),
                true,
            )?;
            let r: Vec<(f64, f64)> = runs.iter().map(e2e::bench_rates).collect::<Result<_>>()?;
            rates.push([r[0], r[1], r[2], r[3]]);
            let args = e2e::bench_args(&tiny, threads, plan.pp, plan.tg);
            let alone = e2e::run_tool(&dir, "llama-bench", &args, None, true)?;
            let over = e2e::run_tool(
                &dir,
                "llama-bench",
                &rpc::over_workers(&args, &plain_at),
                None,
                true,
            )?;
            tiny_rates.push((e2e::bench_rates(&alone)?.1, e2e::bench_rates(&over)?.1));
        }
        let middle = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let median = |c: usize, tg: bool| {
            middle(
                rates
                    .iter()
                    .map(|r| if tg { r[c].1 } else { r[c].0 })
                    .collect(),
            )
        };
        for (test, tg) in [
            (format!("pp{}", plan.pp), false),
            (format!("tg{}", plan.tg), true),
        ] {
            let base = median(1, tg);
            let cell =
                |c: usize| format!("{:.2} tok/s ({:.2}x)", median(c, tg), median(c, tg) / base);
            lines.push(RpcLine {
                check: format!("llama-bench {test}, median of {} round(s)", plan.rounds),
                alone: format!("{:.2} tok/s, {alone_threads} thread(s)", median(0, tg)),
                plain: format!("{:.2} tok/s", base),
                workers: cell(2),
                all: cell(3),
                result: "speed (x: against plain workers)".into(),
            });
        }
        // Per token: the tiny model's decode over workers against alone is the RPC path's own cost; the model's
        // gap between plain workers and one process, how much of it that cost is.
        let (tiny_alone, tiny_over) = (
            middle(tiny_rates.iter().map(|r| r.0).collect()),
            middle(tiny_rates.iter().map(|r| r.1).collect()),
        );
        let per_token_ms = 1e3 * (1.0 / tiny_over - 1.0 / tiny_alone);
        let gap_ms = 1e3 * (1.0 / median(1, true) - 1.0 / median(0, true));
        lines.push(RpcLine {
            check: format!("RPC cost per token: tiny model tg{} over {workers} plain workers vs alone", plan.tg),
            alone: format!("{tiny_alone:.1} tok/s"),
            plain: format!("{tiny_over:.1} tok/s: {per_token_ms:.2} ms per token"),
            workers: "-".into(),
            all: "-".into(),
            result: if gap_ms > 0.0 {
                format!(
                    "the model's gap to one process: {gap_ms:.2} ms per token, {:.0} % of it the RPC path",
                    100.0 * per_token_ms / gap_ms
                )
            } else {
                format!("no gap to one process ({gap_ms:.2} ms per token)")
            },
        });
    }
    drop((plain, ours));
    let _ = std::fs::remove_dir_all(&scratch);
    println!(
        "model: {}; {variant}; {workers} worker(s) on 127.0.0.1, {threads} thread(s) each",
        model.display()
    );
    println!("{}", Table::new(&lines).with(Style::markdown()));
    println!(
        "e2e --rpc: {}",
        if ok {
            "identical outputs in every column"
        } else {
            "OUTPUTS DIFFER"
        }
    );
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[derive(Tabled)]
struct GraphLine {
    build: String,
    #[tabled(rename = "ggml, variant")]
    variant: String,
    #[tabled(rename = "products (bits)")]
    products: String,
    #[tabled(rename = "whole products")]
    whole: u64,
    #[tabled(rename = "Q2_0 2048×6144: stock µs / with library µs (stock ÷ ours)")]
    speed: String,
    #[tabled(rename = "the library's choice")]
    order: String,
}

fn cmd_graph(
    build: &str,
    threads: usize,
    columns: &[usize],
    rounds: usize,
    lib: Option<PathBuf>,
) -> Result<ExitCode> {
    use ggml_lowbit::ab::prebuilt::{graph_check, PrebuiltGgml, PINNED_GGML, PREBUILT_GGML};
    let lib = default_lib(lib)?;
    let builds: Vec<&PrebuiltGgml> = if build == "all" {
        PINNED_GGML.iter().chain(&PREBUILT_GGML).collect()
    } else {
        vec![PrebuiltGgml::named(build)?]
    };
    let mut rows = Vec::new();
    let mut lines = Vec::new();
    for b in builds {
        eprintln!("graph: {} ...", b.name);
        let row = graph_check(b, &lib, threads, columns, rounds)?;
        lines.push(GraphLine {
            build: row.build.clone(),
            variant: format!("{}, {}", row.ggml, row.variant),
            products: if row.mismatches == 0 {
                format!("{} identical", row.products)
            } else {
                format!("{} of {} DIFFER", row.mismatches, row.products)
            },
            whole: row.whole_products,
            speed: row
                .timings
                .iter()
                .map(|&(cols, stock, ours)| {
                    format!("{cols} col: {stock:.0} / {ours:.0} ({:.2}×)", stock / ours)
                })
                .collect::<Vec<_>>()
                .join("; "),
            order: row.order.clone(),
        });
        rows.push(row);
    }
    println!(
        "{threads} thread(s), medians of {rounds} alternating processes each way × 5 repetitions; {}",
        speed::cpu_model_name()
    );
    println!("{}", Table::new(&lines).with(Style::markdown()));
    std::fs::create_dir_all("target/ab").map_err(|e| format!("cannot create target/ab: {e}"))?;
    std::fs::write(
        "target/ab/graph.json",
        serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("cannot write target/ab/graph.json: {e}"))?;
    println!("report: target/ab/graph.json");
    let ok = rows.iter().all(|r| r.mismatches == 0);
    println!(
        "graph: {}",
        if ok {
            "every product identical with and without ggml-lowbit"
        } else {
            "PRODUCTS DIFFER"
        }
    );
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn cmd_tables(write: bool, files: &[PathBuf]) -> Result<ExitCode> {
    let mut stale = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let root = file.parent().unwrap_or(Path::new("."));
        let fresh = ggml_lowbit::ab::results::regenerate(&text, root)
            .map_err(|e| format!("{}: {e}", file.display()))?;
        if fresh != text {
            if write {
                std::fs::write(file, &fresh)
                    .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
                println!("tables: rewrote {}", file.display());
            } else {
                stale.push(file.display().to_string());
            }
        }
    }
    if stale.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "tables: {} differ from their reports; run: ggml-lowbit-ab tables --write {}",
            stale.join(", "),
            stale.join(" ")
        );
        Ok(ExitCode::from(1))
    }
}

fn cmd_config(lib: Option<PathBuf>) -> Result<ExitCode> {
    let lib = default_lib(lib)?;
    // SAFETY: loading our own library runs no initialisers with preconditions.
    let l = unsafe { libloading::Library::new(&lib) }
        .map_err(|e| format!("cannot load {}: {e}", lib.display()))?;
    check_fresh(&l, &lib)?;
    type Getter = unsafe extern "C" fn() -> *const std::ffi::c_char;
    let get = |name: &[u8]| -> Result<String> {
        // SAFETY: both getters return static NUL-terminated strings.
        unsafe {
            let f = l.get::<Getter>(name).map_err(|e| e.to_string())?;
            Ok(std::ffi::CStr::from_ptr(f()).to_string_lossy().into_owned())
        }
    };
    println!("library: {}", lib.display());
    println!("instruction set: {}", get(b"ggml_lowbit_isa\0")?);
    println!(
        "float order (stock build matched): {}",
        get(b"ggml_lowbit_float_order\0")?
    );
    println!("kernel forms: {}", get(b"ggml_lowbit_kernel_forms\0")?);
    Ok(ExitCode::SUCCESS)
}

#[derive(Tabled)]
struct BitsLine {
    build: String,
    symbol: String,
    subject: String,
    cases: u64,
    mismatches: u64,
    #[tabled(rename = "of which NaN bits")]
    nan_mismatches: u64,
    #[tabled(rename = "NaN results equal")]
    nan_equal: u64,
}

fn cmd_bits(
    cases: u64,
    seed: u64,
    build: Build,
    via: Via,
    lib: Option<PathBuf>,
    only: &[String],
) -> Result<ExitCode> {
    check_symbols(only, &bits::SYMBOLS)?;
    let lib = if via != Via::Rlib {
        Some(default_lib(lib)?)
    } else {
        None
    };
    let scratch = std::env::temp_dir().join(format!("ggml-lowbit-ab-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
    let mut all: Vec<SymbolReport> = Vec::new();
    let mut keep_libs = Vec::new();
    for order in build.orders() {
        let stock = StockLib::load(order)?;
        let mut subjects = Vec::new();
        if via != Via::Cdylib {
            subjects.extend(bits::rlib_subjects(order));
        }
        if let Some(lib) = &lib {
            let l = load_ours(lib, order, &scratch)?;
            let symbols = CSymbols::from_library(&l)?;
            subjects.push(Subject::C {
                name: "cdylib".into(),
                symbols,
            });
            keep_libs.push(l);
        }
        let bar = ProgressBar::new(cases).with_message(format!("bits vs stock {}", order.name()));
        bar.set_style(
            ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} cases ({eta})")
                .map_err(|e| e.to_string())?
                .progress_chars("=> "),
        );
        let reports = bits::run(&stock, &subjects, cases, seed, || bar.inc(1))?;
        bar.finish_and_clear();
        all.extend(
            reports
                .into_iter()
                .filter(|r| only.is_empty() || only.contains(&r.symbol)),
        );
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(report_bits(&all))
}

/// The variable that marks a `bits --prebuilt` run already started through the build's own loader.
const UNDER_LOADER: &str = "GGML_LOWBIT_AB_UNDER_LOADER";

/// `bits` against a prebuilt ggml: its module loaded as the stock side, the library's probe run on it, and the
/// rlib's tables for what the probe finds (order, Q2_0's kernel) compared symbol by symbol; the symbols the
/// probe passes to stock alone are named and not compared. A build that needs glibc 2.38 runs this command
/// again through its own loader.
fn cmd_bits_prebuilt(
    cases: u64,
    seed: u64,
    name: &str,
    variant: Option<&str>,
    via: Via,
    only: &[String],
) -> Result<ExitCode> {
    check_symbols(only, &bits::SYMBOLS)?;
    if via == Via::Cdylib {
        return Err(
            "over a prebuilt build bits compares the rlib's kernels; the built library is checked \
                    preloaded over each build, as users run it (tests/prebuilt.rs)"
                .into(),
        );
    }
    let PrebuiltStock {
        stock,
        probed,
        label,
    } = match open_prebuilt(name, variant)? {
        Ok(opened) => opened,
        Err(rerun) => return Ok(rerun),
    };
    use ggml_lowbit::dispatch::{Isa, Kernels};
    let best = ggml_lowbit::dispatch::detected_isa();
    let subjects: Vec<Subject> = Isa::ALL
        .into_iter()
        .filter(|&i| i <= best)
        .flat_map(|i| Kernels::every_variant(i, probed.order))
        .map(|k| Subject::Kernels(probed.apply(k)))
        .collect();
    let bar = ProgressBar::new(cases).with_message(format!("bits vs {label}"));
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} cases ({eta})")
            .map_err(|e| e.to_string())?
            .progress_chars("=> "),
    );
    let reports = bits::run(&stock, &subjects, cases, seed, || bar.inc(1))?;
    bar.finish_and_clear();
    let all: Vec<SymbolReport> = reports
        .into_iter()
        .filter(|r| only.is_empty() || only.contains(&r.symbol))
        // A format whose vec_dot the probe passes to stock keeps its whole products with stock too.
        .filter(|r| {
            !probed.unmatched.iter().any(|u| {
                let format = u.trim_start_matches("ggml_vec_dot_");
                r.symbol == *u || r.symbol == format!("ggml_lowbit_mul_mat_{format}")
            })
        })
        .collect();
    let code = report_bits(&all);
    if all.iter().any(|r| r.mismatches > 0) {
        println!(
            "(the library checks each symbol against the build on its agreement rows before serving it and \
             passes one that gives other bits to stock: GGML_LOWBIT_LOG=1 names them)"
        );
    }
    Ok(code)
}

/// A prebuilt build's CPU variant opened as the stock side, and what the library's probe finds in it.
struct PrebuiltStock {
    stock: StockLib,
    probed: ggml_lowbit::interpose::ProbedStock,
    /// "NAME VARIANT".
    label: String,
}

/// Opens `name`'s `variant` (default: the one its users get on this CPU) and probes it as the library does,
/// printing what the probe finds. A build that needs glibc 2.38 is opened by this command run again through
/// the build's own loader: then `Err` holds that run's exit code.
fn open_prebuilt(
    name: &str,
    variant: Option<&str>,
) -> Result<std::result::Result<PrebuiltStock, ExitCode>> {
    use ggml_lowbit::ab::prebuilt::{runs_here, PrebuiltGgml};
    let build = PrebuiltGgml::named(name)?;
    let variant = variant.unwrap_or_else(|| build.variant_here());
    if !build.has(variant) {
        return Err(format!("{name} has no {variant} variant"));
    }
    if !runs_here(variant) {
        return Err(format!("this CPU cannot run {name}'s {variant} variant"));
    }
    let root = build.fetch()?;
    if build.own_loader && std::env::var_os(UNDER_LOADER).is_none() {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let status = build
            .command(&root, &exe, None)
            .args(std::env::args_os().skip(1))
            .env(UNDER_LOADER, "1")
            .status()
            .map_err(|e| format!("cannot run {} through {name}'s loader: {e}", exe.display()))?;
        return Ok(Err(ExitCode::from(status.code().map_or(2, |c| c as u8))));
    }
    let label = format!("{name} {variant}");
    let mut stock = StockLib::open_files(
        &label,
        FloatOrder::Haswell,
        &root.join(build.base),
        &build.module_path(&root, variant),
    )?;
    let next = ggml_lowbit::interpose::Next::find_with(|n| stock.address(n));
    let probed = ggml_lowbit::interpose::probe_stock(&next)
        .map_err(|why| format!("the library would pass every call to stock over {label}: {why}"))?;
    stock.order = probed.order;
    println!(
        "{label}: float order {}, Q2_0 {:?}, q8_0 scales {:?}; passed to stock alone: {}",
        probed.order.name(),
        probed.q2_0_chain,
        probed.q8_0_scale,
        if probed.unmatched.is_empty() {
            "none".to_string()
        } else {
            probed.unmatched.join(", ")
        }
    );
    Ok(Ok(PrebuiltStock {
        stock,
        probed,
        label,
    }))
}

/// Prints `bits`' table, each mismatch and the totals; exit 1 on any mismatch.
fn report_bits(all: &[SymbolReport]) -> ExitCode {
    let lines: Vec<BitsLine> = all
        .iter()
        .map(|r| BitsLine {
            build: r.build.clone(),
            symbol: r.symbol.clone(),
            subject: r.subject.clone(),
            cases: r.cases,
            mismatches: r.mismatches,
            nan_mismatches: r.nan_mismatches,
            nan_equal: r.nan_equal,
        })
        .collect();
    println!("{}", Table::new(lines).with(Style::markdown()));
    let bad: Vec<&SymbolReport> = all.iter().filter(|r| r.mismatches > 0).collect();
    for r in &bad {
        println!(
            "MISMATCH {} {} {}: {}",
            r.build,
            r.symbol,
            r.subject,
            r.first_mismatch.as_deref().unwrap_or("")
        );
    }
    let total: u64 = all.iter().map(|r| r.cases).sum();
    let mism: u64 = all.iter().map(|r| r.mismatches).sum();
    println!("bits: {total} comparisons, {mism} mismatches");
    if bad.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The longest row `speed` takes: the largest multiple of 64 that fits ggml's `int n`.
const MAX_COLS: usize = i32::MAX as usize / 64 * 64;

fn parse_shape(s: &str) -> Result<(usize, usize)> {
    let bad = || {
        format!(
            "bad shape {s:?}: expected ROWSxCOLS with COLS a positive multiple of 64 of at most {MAX_COLS} \
             (ggml passes the row length as an int)"
        )
    };
    let (r, c) = s.split_once('x').ok_or_else(bad)?;
    let (r, c): (usize, usize) = (
        r.trim().parse().map_err(|_| bad())?,
        c.trim().parse().map_err(|_| bad())?,
    );
    if r == 0 || c == 0 || c % 64 != 0 || c > MAX_COLS {
        return Err(bad());
    }
    Ok((r, c))
}

#[derive(Tabled)]
struct SpeedLine {
    symbol: String,
    shape: String,
    threads: usize,
    baseline: String,
    #[tabled(rename = "ours ms (median)")]
    ours: String,
    #[tabled(rename = "baseline ms (median)")]
    stock: String,
    #[tabled(rename = "baseline / ours")]
    ratio: String,
    /// What the library does with the symbol over this build on this CPU.
    library: String,
}

/// One vec_dot timed by `speed`: our export against a baseline, on `shapes` of `format` weights.
struct SpeedJob {
    symbol: &'static str,
    format: WeightType,
    shapes: Vec<(usize, usize)>,
    ours: VecDotFn,
    baseline: VecDotFn,
    baseline_name: String,
}

/// One of our vec_dot exports from the loaded library.
fn lookup_vec_dot(lib: &libloading::Library, symbol: &str) -> Result<VecDotFn> {
    let name = format!("{symbol}\0");
    // SAFETY: every `ggml_vec_dot_*` export has ggml's vec_dot signature (`ffi.rs`).
    unsafe { lib.get::<VecDotFn>(name.as_bytes()) }
        .map(|f| *f)
        .map_err(|e| format!("{symbol}: {e}"))
}

/// The stock side of `speed`.
enum SpeedStock<'a> {
    /// A pinned build, against the built library (`--lib`) loaded with libloading.
    Pinned(Build, Option<PathBuf>),
    /// A prebuilt build and CPU variant, against this crate's exports configured in front of it.
    Prebuilt(&'a str, Option<&'a str>),
}

/// Whether the library serves `symbol` with its own kernel under `k` (the dispatcher's per-symbol choice),
/// rather than passing it to a stock kernel that is at least as fast.
fn served_by(k: &ggml_lowbit::dispatch::Kernels, symbol: &str) -> bool {
    use ggml_lowbit::formats::{iq2_s, iq2_xs, iq2_xxs, iq3_s, iq3_xxs};
    match symbol {
        "ggml_vec_dot_q2_0_q8_0" => k.serves_q2_0_rows_over_stock(),
        "ggml_lowbit_mul_mat_q2_0_q8_0" => k.serves_q2_0_tiles_over_stock(),
        "ggml_vec_dot_q1_0_q8_0" | "ggml_lowbit_mul_mat_q1_0_q8_0" => k.serves_q1_0_over_stock(),
        "ggml_vec_dot_tq2_0_q8_K" => k.serves_tq2_0_over_stock(),
        "ggml_lowbit_mul_mat_tq2_0_q8_K" => k.serves_tq2_0_tiles_over_stock(),
        "ggml_vec_dot_tq1_0_q8_K" | "ggml_lowbit_mul_mat_tq1_0_q8_K" => k.serves_tq1_0_over_stock(),
        "quantize_row_q8_K" => k.serves_q8_k_over_stock(),
        "quantize_row_q8_0" => k.serves_q8_0_quantizer_over_stock(),
        "ggml_vec_dot_iq2_xxs_q8_K" => k.serves_iq_over_stock::<iq2_xxs::BlockIQ2XXS>(),
        "ggml_vec_dot_iq2_xs_q8_K" => k.serves_iq_over_stock::<iq2_xs::BlockIQ2XS>(),
        "ggml_vec_dot_iq2_s_q8_K" => k.serves_iq_over_stock::<iq2_s::BlockIQ2S>(),
        "ggml_vec_dot_iq3_xxs_q8_K" => k.serves_iq_over_stock::<iq3_xxs::BlockIQ3XXS>(),
        "ggml_vec_dot_iq3_s_q8_K" => k.serves_iq_over_stock::<iq3_s::BlockIQ3S>(),
        _ => true,
    }
}

fn cmd_speed(
    shapes: &[String],
    reps: usize,
    threads: &[String],
    stock_side: SpeedStock<'_>,
    only: &[String],
    out: &Path,
) -> Result<ExitCode> {
    // Every symbol `speed` times, the weights per block its rows come in (the quantizers' q8_0 and q8_K blocks:
    // 32 and 256), and whether it runs on the fork's shapes (the Bonsai 2 ones by default) rather than the
    // Bonsai-8B ones.
    use WeightType as W;
    let weights = |t: W| t.block().0;
    let known: [(&str, usize, bool); 19] = [
        ("ggml_vec_dot_q2_0_q8_0", weights(W::Q2_0), false),
        ("ggml_lowbit_mul_mat_q2_0_q8_0", weights(W::Q2_0), false),
        ("quantize_row_q8_0", 32, false),
        ("quantize_row_q8_K", 256, false),
        ("ggml_vec_dot_q1_0_q8_0", weights(W::Q1_0), false),
        ("ggml_lowbit_mul_mat_q1_0_q8_0", weights(W::Q1_0), false),
        ("ggml_vec_dot_tq2_0_q8_K", weights(W::Tq2_0), false),
        ("ggml_lowbit_mul_mat_tq2_0_q8_K", weights(W::Tq2_0), false),
        ("ggml_vec_dot_tq1_0_q8_K", weights(W::Tq1_0), false),
        ("ggml_lowbit_mul_mat_tq1_0_q8_K", weights(W::Tq1_0), false),
        ("ggml_vec_dot_iq2_xxs_q8_K", weights(W::Iq2Xxs), false),
        ("ggml_vec_dot_iq2_xs_q8_K", weights(W::Iq2Xs), false),
        ("ggml_vec_dot_iq2_s_q8_K", weights(W::Iq2S), false),
        ("ggml_vec_dot_iq3_xxs_q8_K", weights(W::Iq3Xxs), false),
        ("ggml_vec_dot_iq3_s_q8_K", weights(W::Iq3S), false),
        ("ggml_vec_dot_pq2_0_q8_0", weights(W::Pq2_0), true),
        ("ggml_vec_dot_ptq1_0_q8_0", weights(W::Ptq1_0), true),
        ("ggml_lowbit_mul_mat_pq2_0_q8_0", weights(W::Pq2_0), true),
        ("ggml_lowbit_mul_mat_ptq1_0_q8_0", weights(W::Ptq1_0), true),
    ];
    let names: Vec<&str> = known.iter().map(|&(s, _, _)| s).collect();
    check_symbols(only, &names)?;
    let over_prebuilt = matches!(stock_side, SpeedStock::Prebuilt(..));
    let is_fork = |s: &str| known.iter().any(|&(k, _, fork)| fork && k == s);
    if let Some(s) = only.iter().find(|s| over_prebuilt && is_fork(s)) {
        return Err(format!("{s}: the prebuilt builds have no fork formats"));
    }
    if matches!(stock_side, SpeedStock::Pinned(Build::All, _)) {
        return Err(
            "speed compares against one stock build: --build haswell or --build x64".into(),
        );
    }
    if reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    let given: Option<Vec<(usize, usize)>> = if shapes.is_empty() {
        None
    } else {
        Some(
            shapes
                .iter()
                .map(|s| parse_shape(s))
                .collect::<Result<_>>()?,
        )
    };
    // Q2_0 defaults to the Bonsai-8B shapes, the fork's formats to the Bonsai 2 shapes.
    let shapes = given.clone().unwrap_or(BONSAI_8B_SHAPES.to_vec());
    let fork_shapes = given.unwrap_or(BONSAI2_SHAPES.to_vec());
    let wants = |s: &str| {
        (only.is_empty() || only.iter().any(|o| o == s)) && !(over_prebuilt && is_fork(s))
    };
    // Checked before anything is loaded or timed: a symbol's rows are whole blocks of its format.
    for &(symbol, block, on_fork_shapes) in known.iter().filter(|(s, _, _)| wants(s)) {
        let its_shapes = if on_fork_shapes {
            &fork_shapes
        } else {
            &shapes
        };
        if let Some((r, c)) = its_shapes.iter().find(|(_, c)| c % block != 0) {
            return Err(format!(
                "{r}x{c}: {symbol} needs columns in whole blocks of {block}"
            ));
        }
    }
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let threads: Vec<usize> = threads
        .iter()
        .map(|t| match t.as_str() {
            "all" => Ok(cores),
            t => t
                .parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or(format!("bad thread count {t:?}")),
        })
        .collect::<Result<_>>()?;
    // The timing team's threads wait for each other by spinning: more of them than cores would time the
    // scheduler, not the kernels.
    if let Some(t) = threads.iter().find(|&&t| t > cores) {
        return Err(format!(
            "--threads {t}: this machine runs {cores} threads at once; use at most that (or \"all\")"
        ));
    }
    let scratch = std::env::temp_dir().join(format!("ggml-lowbit-ab-{}", std::process::id()));
    // The stock library, our library where it is a loaded copy, our exports, and the symbols the library
    // passes to stock alone over this build (not timed: both sides would be stock's).
    let (stock, ours_lib, ours, alone) = match stock_side {
        SpeedStock::Pinned(build, lib) => {
            let lib = default_lib(lib)?;
            let stock = StockLib::load(build.orders()[0])?;
            std::fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
            let ours_lib = load_ours(&lib, stock.order, &scratch)?;
            let ours = CSymbols::from_library(&ours_lib)?;
            (stock, Some(ours_lib), ours, Vec::new())
        }
        SpeedStock::Prebuilt(name, variant) => {
            let opened = match open_prebuilt(name, variant)? {
                Ok(opened) => opened,
                Err(rerun) => return Ok(rerun),
            };
            // Our kernels for every symbol, as for a pinned build; the table says which the library serves.
            std::env::set_var("GGML_LOWBIT_SERVE_ALL", "1");
            let next = ggml_lowbit::interpose::Next::find_with(|n| opened.stock.address(n));
            ggml_lowbit::interpose::configure_in_front_of(next)?;
            std::env::remove_var("GGML_LOWBIT_SERVE_ALL");
            let mut alone: Vec<String> = Vec::new();
            for u in &opened.probed.unmatched {
                let format = u.trim_start_matches("ggml_vec_dot_");
                alone.push(u.to_string());
                alone.push(format!("ggml_lowbit_mul_mat_{format}"));
            }
            if !alone.is_empty() {
                println!("not timed (passed to stock alone): {}", alone.join(", "));
            }
            (opened.stock, None, CSymbols::from_rlib(), alone)
        }
    };
    let order = stock.order;
    let wants = |s: &str| wants(s) && !alone.iter().any(|a| a == s);
    let st = CSymbols::from_stock(&stock)?;
    let mut rows: Vec<SpeedRow> = Vec::new();
    let stock_name = if over_prebuilt {
        stock.build.clone()
    } else {
        format!("stock {}", order.name())
    };
    let fork_wanted: Vec<(&str, WeightType)> = [
        ("ggml_vec_dot_pq2_0_q8_0", WeightType::Pq2_0),
        ("ggml_vec_dot_ptq1_0_q8_0", WeightType::Ptq1_0),
    ]
    .into_iter()
    .filter(|(s, _)| wants(s))
    .collect();
    let fork_tiles_wanted: Vec<(&str, WeightType)> = [
        ("ggml_lowbit_mul_mat_pq2_0_q8_0", WeightType::Pq2_0),
        ("ggml_lowbit_mul_mat_ptq1_0_q8_0", WeightType::Ptq1_0),
    ]
    .into_iter()
    .filter(|(s, _)| wants(s))
    .collect();
    // The fork's formats have no stock build: their baseline is the fork's generic C compiled here the way the
    // fork is built (FMA for the haswell order, none for x64).
    let fma = order == FloatOrder::Haswell;
    let fork = if fork_wanted.is_empty() && fork_tiles_wanted.is_empty() {
        None
    } else {
        let root = std::env::current_dir().map_err(|e| e.to_string())?;
        if !root.join("bench/c/ptq1_0_generic.c").is_file() {
            return Err(
                "the fork's generic C (bench/c/) is not here: run speed from the repository root"
                    .into(),
            );
        }
        Some(fork::build(&fork::default_compiler(), &root, fma)?)
    };
    let fork_name = format!(
        "fork generic C (-O3 -mavx2{})",
        if fma { " -mfma" } else { " -mno-fma" }
    );
    let mut jobs: Vec<SpeedJob> = Vec::new();
    if wants("ggml_vec_dot_q2_0_q8_0") {
        jobs.push(SpeedJob {
            symbol: "ggml_vec_dot_q2_0_q8_0",
            format: WeightType::Q2_0,
            shapes: shapes.clone(),
            ours: ours.vec_dot_q2_0_q8_0,
            baseline: st.vec_dot_q2_0_q8_0,
            baseline_name: stock_name.clone(),
        });
    }
    for (format, kf) in [
        (WeightType::Tq2_0, KFormat::Tq2_0),
        (WeightType::Tq1_0, KFormat::Tq1_0),
        (WeightType::Iq2Xxs, KFormat::Iq(0)),
        (WeightType::Iq2Xs, KFormat::Iq(1)),
        (WeightType::Iq2S, KFormat::Iq(2)),
        (WeightType::Iq3Xxs, KFormat::Iq(3)),
        (WeightType::Iq3S, KFormat::Iq(4)),
    ] {
        let symbol = kf.vec_dot_symbol();
        if !wants(symbol) {
            continue;
        }
        jobs.push(SpeedJob {
            symbol,
            format,
            shapes: shapes.clone(),
            ours: ours.k_format(kf).0,
            baseline: st.k_format(kf).0,
            baseline_name: stock_name.clone(),
        });
    }
    if wants("ggml_vec_dot_q1_0_q8_0") {
        jobs.push(SpeedJob {
            symbol: "ggml_vec_dot_q1_0_q8_0",
            format: WeightType::Q1_0,
            shapes: shapes.clone(),
            ours: ours.vec_dot_q1_0_q8_0,
            baseline: st.vec_dot_q1_0_q8_0,
            baseline_name: stock_name.clone(),
        });
    }
    let fork_dot = |format: WeightType| {
        let reference = fork.as_ref().expect("built above");
        if format == WeightType::Pq2_0 {
            reference.vec_dot_pq2_0
        } else {
            reference.vec_dot_ptq1_0
        }
    };
    for (symbol, format) in fork_wanted {
        jobs.push(SpeedJob {
            symbol,
            format,
            shapes: fork_shapes.clone(),
            ours: lookup_vec_dot(ours_lib.as_ref().ok_or("no fork formats here")?, symbol)?,
            baseline: fork_dot(format),
            baseline_name: fork_name.clone(),
        });
    }
    let total: usize = jobs.iter().map(|j| j.shapes.len() * threads.len()).sum();
    let bar = ProgressBar::new(total as u64).with_message("speed");
    for job in &jobs {
        for &(r, c) in &job.shapes {
            let m = MatVec::new(job.format, r, c, 42)?;
            for &t in &threads {
                bar.set_message(format!("speed {} {r}x{c}, {t} thread(s)", job.symbol));
                let mut row = speed::time_vec_dot(job.symbol, &m, job.ours, job.baseline, t, reps)?;
                row.baseline = job.baseline_name.clone();
                rows.push(row);
                bar.inc(1);
            }
        }
    }
    let tile_jobs = [
        (
            "ggml_lowbit_mul_mat_q2_0_q8_0",
            WeightType::Q2_0,
            ours.mul_mat_q2_0_q8_0,
            st.vec_dot_q2_0_q8_0,
        ),
        (
            "ggml_lowbit_mul_mat_q1_0_q8_0",
            WeightType::Q1_0,
            ours.mul_mat_q1_0_q8_0,
            st.vec_dot_q1_0_q8_0,
        ),
        (
            "ggml_lowbit_mul_mat_tq2_0_q8_K",
            WeightType::Tq2_0,
            ours.mul_mat_tq2_0_q8_k,
            st.vec_dot_tq2_0_q8_k,
        ),
        (
            "ggml_lowbit_mul_mat_tq1_0_q8_K",
            WeightType::Tq1_0,
            ours.mul_mat_tq1_0_q8_k,
            st.vec_dot_tq1_0_q8_k,
        ),
    ];
    for (symbol, format, tiles, stock_dot) in tile_jobs {
        if !wants(symbol) {
            continue;
        }
        let tiles = tiles.ok_or("our library lacks the tile export")?;
        for &(r, c) in &shapes {
            let m = MatVec::new(format, r, c, 42)?;
            for &t in &threads {
                bar.set_message(format!("speed {symbol} {r}x{c}, {t} thread(s)"));
                let mut row = speed::time_mul_mat(symbol, &m, tiles, stock_dot, t, reps)?;
                row.baseline = format!("{stock_name}, vec_dot per row");
                rows.push(row);
            }
        }
    }
    for (symbol, format) in fork_tiles_wanted {
        let name = format!("{symbol}\0");
        // SAFETY: the tile exports all have the signature `MulMatFn` describes (`ffi.rs`).
        let tiles = unsafe {
            ours_lib
                .as_ref()
                .ok_or("no fork formats here")?
                .get::<MulMatFn>(name.as_bytes())
        }
        .map(|f| *f)
        .map_err(|e| format!("{symbol}: {e}"))?;
        for &(r, c) in &fork_shapes {
            let m = MatVec::new(format, r, c, 42)?;
            for &t in &threads {
                bar.set_message(format!("speed {symbol} {r}x{c}, {t} thread(s)"));
                let mut row = speed::time_mul_mat(symbol, &m, tiles, fork_dot(format), t, reps)?;
                row.baseline = format!("{fork_name}, vec_dot per row");
                rows.push(row);
            }
        }
    }
    bar.finish_and_clear();
    for (symbol, qk, ours_fn, stock_fn) in [
        (
            "quantize_row_q8_0",
            32,
            ours.quantize_row_q8_0,
            st.quantize_row_q8_0,
        ),
        (
            "quantize_row_q8_K",
            256,
            ours.quantize_row_q8_k,
            st.quantize_row_q8_k,
        ),
    ] {
        if !wants(symbol) {
            continue;
        }
        let mut cols: Vec<usize> = shapes.iter().map(|&(_, c)| c).collect();
        cols.sort_unstable();
        cols.dedup();
        for c in cols {
            debug_assert_eq!(c % qk, 0, "checked with the other symbols' blocks");
            let mut row = speed::time_quantize(symbol, c, ours_fn, stock_fn, reps)?;
            row.baseline = stock_name.clone();
            rows.push(row);
        }
    }
    drop(ours_lib);
    let _ = std::fs::remove_dir_all(&scratch);
    // The dispatcher's choices: over a prebuilt build this crate's own configuration in front of it; over a
    // pinned build the table the loaded library builds for its float order on this CPU.
    let serving = if over_prebuilt {
        *ggml_lowbit::interpose::active()
    } else {
        ggml_lowbit::dispatch::Kernels::new(ggml_lowbit::dispatch::detected_isa(), order)
    };
    for r in &mut rows {
        if !is_fork(&r.symbol) {
            r.served = Some(served_by(&serving, &r.symbol));
        }
    }

    let lines: Vec<SpeedLine> = rows
        .iter()
        .map(|r| SpeedLine {
            symbol: r.symbol.clone(),
            shape: r.shape.clone(),
            threads: r.threads,
            baseline: r.baseline.clone(),
            ours: format!("{:.4}", r.ours_median_ms),
            stock: format!("{:.4}", r.stock_median_ms),
            ratio: format!("{:.2}x", r.ratio),
            library: match r.served {
                Some(true) | None => "serves".into(),
                Some(false) => "passes to stock".into(),
            },
        })
        .collect();
    // The pinned builds by their float order (the results tables key on it), a prebuilt one by name and variant.
    let stock_build = if over_prebuilt {
        stock.build.clone()
    } else {
        order.name().to_string()
    };
    let active = ggml_lowbit::interpose::active();
    let isa = active.isa.name();
    // The AVX-512 kernels' per-CPU forms ("lookups": without gathers IQ2_XXS and IQ2_XS permute code tables and
    // IQ2_S loads its entries, `docs/iq.md`).
    let forms = active.forms_note();
    let header = format!(
        "Stock build: {}. Our instruction set: {isa}{forms}. {reps} interleaved repetitions per row, \
         medians.\n\n",
        stock_build
    );
    let table = Table::new(lines).with(Style::markdown()).to_string();
    // The summary first (one line per symbol); the full table goes to speed.md.
    println!("{header}");
    println!(
        "{:<40} {:>5} {:>10} {:>13}",
        "symbol", "rows", "min ratio", "median ratio"
    );
    for s in speed::summarize(&rows) {
        println!(
            "{:<40} {:>5} {:>9.2}x {:>12.2}x",
            s.symbol, s.rows, s.min_ratio, s.median_ratio
        );
    }
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    std::fs::write(out.join("speed.md"), format!("{header}{table}\n"))
        .map_err(|e| e.to_string())?;
    let json = serde_json::json!({
        "date": speed::utc_date_today(),
        "cpu": speed::cpu_model_name(),
        "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "stock_build": stock_build,
        "isa": isa,
        "forms": ggml_lowbit::interpose::active_forms().to_string_lossy(),
        "reps": reps,
        "rows": rows,
    });
    std::fs::write(
        out.join("speed.json"),
        serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    write_chart(&rows, &out.join("speed.svg"))?;
    println!(
        "full table: {}/speed.md (also speed.json, chart speed.svg)",
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// A bar per row: stock / ours, labelled with the row and the ratio, and the 1× line.
fn write_chart(rows: &[SpeedRow], path: &Path) -> Result<()> {
    use plotters::prelude::*;
    // Grouped by format: a symbol's rows next to each other, in the order the symbols were run.
    let mut grouped: Vec<&SpeedRow> = Vec::with_capacity(rows.len());
    for s in speed::summarize(rows) {
        grouped.extend(rows.iter().filter(|r| r.symbol == s.symbol));
    }
    let rows = grouped;
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let n = rows.len() as f64;
    let root = SVGBackend::new(path, (960, 100 + 34 * rows.len() as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    // Room on the right of the longest bar for its label.
    let max = rows.iter().map(|r| r.ratio).fold(1.0f64, f64::max) * 1.6;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "ggml-lowbit vs stock: speed-up (stock time / ours)",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(10)
        .build_cartesian_2d(0.0..max, 0.0..n)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .x_desc("speed-up (x)")
        .draw()
        .map_err(|x| e(&x))?;
    // Row 0 at the top.
    let y = |i: usize| n - 1.0 - i as f64;
    chart
        .draw_series(rows.iter().enumerate().map(|(i, r)| {
            let color = if r.ratio >= 1.0 {
                BLUE.mix(0.6)
            } else {
                RED.mix(0.6)
            };
            Rectangle::new([(0.0, y(i) + 0.15), (r.ratio, y(i) + 0.85)], color.filled())
        }))
        .map_err(|x| e(&x))?;
    chart
        .draw_series(rows.iter().enumerate().map(|(i, r)| {
            let label = format!(
                "{:.2}x  {} {}, {} thread(s)",
                r.ratio,
                r.symbol.trim_start_matches("ggml_vec_dot_"),
                r.shape,
                r.threads
            );
            Text::new(
                label,
                (r.ratio + max * 0.01, y(i) + 0.62),
                ("sans-serif", 13).into_font(),
            )
        }))
        .map_err(|x| e(&x))?;
    chart
        .draw_series(std::iter::once(PathElement::new(
            [(1.0, 0.0), (1.0, n)],
            BLACK,
        )))
        .map_err(|x| e(&x))?;
    chart
        .draw_series(std::iter::once(Text::new(
            "1x = stock",
            (1.0 + max * 0.005, n - 0.05),
            ("sans-serif", 12).into_font(),
        )))
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

fn cmd_metal() -> Result<ExitCode> {
    use ggml_lowbit::metal;
    let cxx = PathBuf::from(std::env::var("CXX").unwrap_or_else(|_| "c++".into()));
    let src = ggml_lowbit::stock::source_dir()?;
    let ours = metal::build(&cxx, &src, metal::Variant::Patched)?;
    let stock = metal::build(&cxx, &src, metal::Variant::Stock)?;
    let reports = metal::op_reports(&cxx, &src, &ours, &stock)?;
    println!("operations per weight in each kernel's hot loop (g++ -O2 GIMPLE; docs/METAL.md explains the count)");
    println!(
        "{:<10} {:>10} {:>10} {:>7} {:>12} {:>12}   ours by kind",
        "kernel", "stock ALU", "ours ALU", "ratio", "stock ld+st", "ours ld+st"
    );
    for r in &reports {
        let per = |n: usize| n as f64 / r.weights as f64;
        let o = r.ours;
        let kinds = format!(
            "fma {:.2}, float {:.2}, floor {:.2}, cvt {:.2}, int {:.2}, branch {:.2}",
            per(o.fma),
            per(o.float_arith),
            per(o.float_round),
            per(o.convert),
            per(o.int_arith),
            per(o.branches)
        );
        match r.stock {
            Some(s) => println!(
                "{:<10} {:>10.2} {:>10.2} {:>6.2}x {:>12.2} {:>12.2}   {kinds}",
                r.format,
                per(s.alu()),
                per(o.alu()),
                per(s.alu()) / per(o.alu()),
                per(s.loads + s.stores),
                per(o.loads + o.stores)
            ),
            None => println!(
                "{:<10} {:>10} {:>10.2} {:>7} {:>12} {:>12.2}   {kinds} (no stock kernel in the pinned tree)",
                r.format,
                "-",
                per(o.alu()),
                "-",
                "-",
                per(o.loads + o.stores)
            ),
        }
    }
    Ok(ExitCode::SUCCESS)
}
