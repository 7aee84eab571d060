//! Prebuilt ggml builds from the package registries (`scripts/prebuilt-ggml.sh`), where their files lie, how their
//! programs start, and the graph-level check over each (`ggml-lowbit-ab graph`): `tests/c/graph_host.c` computes
//! MUL_MAT products of every low-bit type through ggml's public API with and without the library preloaded and
//! compares every result's bits, then times a Bonsai-1.7B-shaped Q2_0 product both ways, interleaved.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A prebuilt ggml: its name for `scripts/prebuilt-ggml.sh` and where its files lie in the fetched tree.
pub struct PrebuiltGgml {
    pub name: &'static str,
    /// `ggml_version()` of the build.
    pub ggml: &'static str,
    /// The fetched loader's libraries (builds with `own_loader`).
    pub lib_dir: &'static str,
    /// libggml-base, in the fetched tree.
    pub base: &'static str,
    /// A CPU module in the fetched tree, `{}` standing for the variant (a linked build has one module).
    pub module: &'static str,
    /// The variant a linked build's one module was built for; `None` for a build that loads one of many.
    pub linked: Option<&'static str>,
    /// Whether its programs need the fetched loader (glibc 2.38).
    pub own_loader: bool,
}

/// The pinned tree's two builds (`scripts/stock-llama.sh`, compiled once into the cache), described like the
/// prebuilt ones so that `graph` runs them in the same table: ggml 0.25.3, its CPU backend linked.
pub const PINNED_GGML: [PrebuiltGgml; 2] = [
    PrebuiltGgml {
        name: "pinned-haswell",
        ggml: "0.25.3",
        lib_dir: "",
        base: "libggml-base.so",
        module: "libggml-cpu.so",
        linked: Some("haswell"),
        own_loader: false,
    },
    PrebuiltGgml {
        name: "pinned-x64",
        ggml: "0.25.3",
        lib_dir: "",
        base: "libggml-base.so",
        module: "libggml-cpu.so",
        linked: Some("x64"),
        own_loader: false,
    },
];

/// Every prebuilt ggml the project checks, oldest ggml last.
pub const PREBUILT_GGML: [PrebuiltGgml; 6] = [
    PrebuiltGgml {
        name: "debian-libggml1-1.1.1",
        ggml: "1.1.1",
        lib_dir: "usr/lib/x86_64-linux-gnu",
        base: "usr/lib/x86_64-linux-gnu/libggml-base.so.1",
        module: "usr/lib/x86_64-linux-gnu/ggml/backends1/libggml-cpu-{}.so",
        linked: None,
        own_loader: true,
    },
    PrebuiltGgml {
        name: "debian-libggml0-0.27.0",
        ggml: "0.27.0",
        lib_dir: "usr/lib/x86_64-linux-gnu",
        base: "usr/lib/x86_64-linux-gnu/libggml-base.so.0",
        module: "usr/lib/x86_64-linux-gnu/ggml/backends0/libggml-cpu-{}.so",
        linked: None,
        own_loader: true,
    },
    // Upstream b11739, linked for AVX2 + FMA, with the same AVX2 Q2_0 kernel as Debian's 0.27.0.
    PrebuiltGgml {
        name: "llama-cpp-py-sync-0.11739",
        ggml: "0.27.0",
        lib_dir: "usr/lib/x86_64-linux-gnu",
        base: "llama_cpp_py_sync/libggml-base.so.0",
        module: "llama_cpp_py_sync/libggml-cpu.so.0",
        linked: Some("haswell"),
        own_loader: true,
    },
    PrebuiltGgml {
        name: "node-llama-cpp-3.22.1",
        ggml: "0.25.1",
        lib_dir: "package/bins/linux-x64",
        base: "package/bins/linux-x64/libggml-base.so",
        module: "package/bins/linux-x64/libggml-cpu-{}.so",
        linked: None,
        own_loader: false,
    },
    PrebuiltGgml {
        name: "node-llama-cpp-3.21.1",
        ggml: "0.23.0",
        lib_dir: "package/bins/linux-x64",
        base: "package/bins/linux-x64/libggml-base.so",
        module: "package/bins/linux-x64/libggml-cpu-{}.so",
        linked: None,
        own_loader: false,
    },
    // Linked for AVX2, its Q2_0 loop not contracted into FMAs (the x64 order's bits) while every other kernel
    // and the quantizer are the haswell order's.
    PrebuiltGgml {
        name: "libggml-python-0.20.2",
        ggml: "0.20.2",
        lib_dir: "libggml/lib64",
        base: "libggml/lib64/libggml-base.so",
        module: "libggml/lib64/libggml-cpu.so",
        linked: Some("haswell"),
        own_loader: false,
    },
];

impl PrebuiltGgml {
    /// The build called `name` (a prebuilt one, or one of the pinned tree's).
    pub fn named(name: &str) -> Result<&'static PrebuiltGgml, String> {
        let all = || PREBUILT_GGML.iter().chain(&PINNED_GGML);
        all().find(|b| b.name == name).ok_or_else(|| {
            let names: Vec<&str> = all().map(|b| b.name).collect();
            format!("no ggml build {name:?} (known: {})", names.join(", "))
        })
    }

    /// Fetches the build into the cache (once; the pinned ones are built) and returns its tree.
    pub fn fetch(&self) -> Result<PathBuf, String> {
        if let Some(variant) = self.name.strip_prefix("pinned-") {
            return crate::stock::ensure_built_variant(variant);
        }
        let first = self.module.replace("{}", self.linked.unwrap_or("x64"));
        crate::stock::run_build_script("prebuilt-ggml.sh", self.name, &first)
    }

    /// Whether the build has a module for `variant`.
    pub fn has(&self, variant: &str) -> bool {
        self.linked.is_none_or(|v| v == variant)
    }

    /// `variant`'s CPU module in the fetched tree `root`.
    pub fn module_path(&self, root: &Path, variant: &str) -> PathBuf {
        root.join(self.module.replace("{}", variant))
    }

    /// The variant a user of this build runs on this CPU: the linked one, or the one a release ggml picks.
    pub fn variant_here(&self) -> &'static str {
        self.linked.unwrap_or_else(super::e2e::release_cpu_variant)
    }

    /// A command that runs `program` over the build (through the fetched loader where it needs one), with `lib`
    /// preloaded when given; `LD_PRELOAD` is cleared otherwise.
    pub fn command(&self, root: &Path, program: &Path, lib: Option<&Path>) -> Command {
        let mut cmd = if self.own_loader {
            let dir = root.join(self.lib_dir);
            let mut cmd = Command::new(dir.join("ld-linux-x86-64.so.2"));
            cmd.arg("--library-path")
                .arg(format!("{}:/usr/lib/x86_64-linux-gnu", dir.display()));
            if let Some(lib) = lib {
                cmd.arg("--preload").arg(lib);
            }
            cmd.arg(program);
            cmd
        } else {
            let mut cmd = Command::new(program);
            if let Some(lib) = lib {
                cmd.env("LD_PRELOAD", lib);
            }
            cmd
        };
        if self.own_loader || lib.is_none() {
            cmd.env_remove("LD_PRELOAD");
        }
        cmd
    }
}

/// Whether this CPU runs `variant`'s module (each is compiled for its instruction sets; ggml names them).
pub fn runs_here(variant: &str) -> bool {
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
        match variant {
            "x64" => true,
            "sse42" => has!("sse4.2"),
            "sandybridge" => has!("avx"),
            "haswell" | "alderlake" => haswell,
            "skylakex" => skylakex,
            "icelake" => skylakex && has!("avx512vnni") && has!("avx512vbmi"),
            "zen4" => skylakex && has!("avx512vnni") && has!("avx512vbmi") && has!("avx512bf16"),
            _ => false,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = variant;
        false
    }
}

/// `tests/c/graph_host.c`, compiled once into the cache (keyed by its text).
pub fn graph_host() -> Result<PathBuf, String> {
    const SOURCE: &str = include_str!("../../tests/c/graph_host.c");
    let key = SOURCE.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let dir = crate::stock::cache_dir().join("programs");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let exe = dir.join(format!("graph_host-{key:016x}"));
    if exe.is_file() {
        return Ok(exe);
    }
    let src = dir.join(format!("graph_host-{key:016x}.c"));
    std::fs::write(&src, SOURCE).map_err(|e| format!("{}: {e}", src.display()))?;
    let compiler = super::fork::default_compiler();
    super::fork::compile(
        &compiler,
        &["-O2".into(), src.display().to_string(), "-ldl".into()],
        &exe,
    )?;
    Ok(exe)
}

/// What `graph` found over one build.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GraphRow {
    pub build: String,
    pub ggml: String,
    pub variant: String,
    /// Products compared (one hash line each) and how many differ.
    pub products: usize,
    pub mismatches: usize,
    /// Whole MUL_MAT products the library took in the check run.
    pub whole_products: u64,
    /// The library's first log line (float order, Q2_0's kernel).
    pub order: String,
    /// Median µs of the timed Q2_0 product per column count: (columns, stock, with the library).
    pub timings: Vec<(usize, f64, f64)>,
}

/// Bonsai-1.7B's widest projection: 2048 inputs, 6144 outputs (the FFN's gate and up).
pub const TIMED_SHAPE: (usize, usize) = (2048, 6144);

/// The graph check over `build` on `threads` threads with `lib` preloaded, then the Q2_0 product of
/// `TIMED_SHAPE` at each of `columns`, `rounds` interleaved processes each way of `reps` repetitions.
pub fn graph_check(
    build: &PrebuiltGgml,
    lib: &Path,
    threads: usize,
    columns: &[usize],
    rounds: usize,
) -> Result<GraphRow, String> {
    let root = build.fetch()?;
    let host = graph_host()?;
    let variant = build.variant_here();
    let module = build.module_path(&root, variant);
    if !module.is_file() {
        return Err(format!("{} has no {variant} module", build.name));
    }
    let base = root.join(build.base);
    // The check runs log (the library's choice, the whole products it counts); the timed ones do not, since
    // counting sends every call through the configuration.
    let run = |args: &[String], preload: bool| -> Result<(String, String), String> {
        let timed = args.len() > 1;
        let out = build
            .command(&root, &host, preload.then_some(lib))
            .arg(&base)
            .arg(&module)
            .args(args)
            .env("GGML_LOWBIT_LOG", if timed { "0" } else { "1" })
            .output()
            .map_err(|e| format!("cannot run {}: {e}", host.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            return Err(format!(
                "graph_host over {} ({}): {}",
                build.name,
                out.status,
                stderr.trim_end()
            ));
        }
        Ok((stdout, stderr))
    };
    let threads_arg = threads.to_string();
    let (stock, _) = run(std::slice::from_ref(&threads_arg), false)?;
    let (ours, log) = run(std::slice::from_ref(&threads_arg), true)?;
    let stock: Vec<&str> = stock.lines().collect();
    let ours: Vec<&str> = ours.lines().collect();
    if stock.is_empty() || stock.len() != ours.len() {
        return Err(format!(
            "graph_host over {}: {} products alone, {} with the library",
            build.name,
            stock.len(),
            ours.len()
        ));
    }
    let mismatches = stock.iter().zip(&ours).filter(|(a, b)| a != b).count();
    let order = log
        .lines()
        .find(|l| l.contains("float order"))
        .map(|l| {
            let l = l
                .trim_start_matches("ggml-lowbit: ")
                .replace(" (probed against the stock library)", "");
            l.split(", mode ").next().unwrap_or_default().to_string()
        })
        .unwrap_or_else(|| "the library did not start".into());
    let whole_products = super::e2e::whole_products_in(&log);

    let (k, rows) = TIMED_SHAPE;
    let mut timings = Vec::new();
    for &cols in columns {
        let args = [
            threads_arg.clone(),
            crate::model::GGML_TYPE_Q2_0.to_string(),
            k.to_string(),
            rows.to_string(),
            cols.to_string(),
            "5".into(),
        ];
        let (mut alone, mut with) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            for (preload, times) in [(false, &mut alone), (true, &mut with)] {
                let (out, _) = run(&args, preload)?;
                times.extend(out.split_whitespace().filter_map(|w| w.parse::<f64>().ok()));
            }
        }
        timings.push((cols, median(&mut alone)?, median(&mut with)?));
    }
    Ok(GraphRow {
        build: build.name.into(),
        ggml: build.ggml.into(),
        variant: variant.into(),
        products: stock.len(),
        mismatches,
        whole_products,
        order,
        timings,
    })
}

fn median(times: &mut [f64]) -> Result<f64, String> {
    if times.is_empty() {
        return Err("graph_host printed no times".into());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}
