//! The library preloaded over prebuilt ggml builds from the package registries, as their users get them
//! (`scripts/prebuilt-ggml.sh`): Debian's libggml0 0.27.0 and libggml1 1.1.1 and llama-cpp-py-sync 0.11739
//! (ggml 0.27.0), whose Q2_0 has a kernel of its own in another order and whose programs need glibc 2.38 (so the
//! host runs through trixie's loader from the same fetch), node-llama-cpp 3.21.1's and 3.22.1's CPU binaries
//! (ggml 0.23.0 and 0.25.1, 14 variants each) and libggml-python 0.20.2 (one CPU backend linked for AVX2, its
//! Q2_0 loop not contracted). `tests/c/vec_dot_host.c` loads one CPU module as a release llama.cpp does and
//! compares every low-bit vec_dot, as ggml's own relocations reach it (the preload) against the module's own
//! definition, bit for bit.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ggml_lowbit::ab::prebuilt::PrebuiltGgml;

const CASES: &str = "20000";
const SYMBOLS: usize = 9;
const Q2_0: &str = "ggml_vec_dot_q2_0_q8_0";
const Q1_0: &str = "ggml_vec_dot_q1_0_q8_0";

/// What the library must find over one prebuilt build (`ggml_lowbit::ab::prebuilt::PREBUILT_GGML`, which says
/// where its files lie): the variants checked here.
struct Prebuilt {
    name: &'static str,
    variants: &'static [Variant],
}

impl Prebuilt {
    /// Where the build's files lie and how its programs start.
    fn files(&self) -> &'static PrebuiltGgml {
        PrebuiltGgml::named(self.name).unwrap()
    }
}

/// What the library's first log line says of a build's Q2_0 kernel, besides the float order.
const Q2_0_GGML_AVX2: &str = "Q2_0 in ggml ≥ 0.27.0's own AVX2 order";
const Q2_0_UNFUSED: &str = "Q2_0 in the generic C without contraction";

/// One CPU variant and what the library must find in it: the probed order, Q2_0's kernel where it is not the
/// order's own (`Q2_0_GGML_AVX2`, `Q2_0_UNFUSED`, or ""), the vec_dot symbols whose kernels follow neither
/// modelled order (passed alone), and how many of the nine it serves when it may serve all.
struct Variant {
    name: &'static str,
    order: &'static str,
    q2_0: &'static str,
    unmatched: &'static [&'static str],
    served: usize,
}

/// The variants of Debian's libggml0 0.27.0 and libggml1 1.1.1, which agree: ggml's own AVX2 Q2_0 kernel in
/// haswell and the later variants.
const DEBIAN_VARIANTS: &[Variant] = &[
    // ggml's own AVX2 Q2_0 kernel, served in its own order.
    Variant {
        name: "haswell",
        order: "haswell",
        q2_0: Q2_0_GGML_AVX2,
        unmatched: &[],
        served: 9,
    },
    Variant {
        name: "x64",
        order: "x64",
        q2_0: "",
        unmatched: &[],
        served: 9,
    },
    // SSSE3 Q1_0 kernel, neither model's.
    Variant {
        name: "sse42",
        order: "x64",
        q2_0: "",
        unmatched: &[Q1_0],
        served: 8,
    },
    // AVX without FMA: the AVX quantizer with unfused chains. Q2_0 is the generic C without contraction, which
    // the x64 order's kernels give; Q1_0 is named, and the q8_K formats' kernels give other bits than the
    // haswell ones, so they keep stock's.
    Variant {
        name: "sandybridge",
        order: "haswell",
        q2_0: Q2_0_UNFUSED,
        unmatched: &[Q1_0],
        served: 1,
    },
];

/// node-llama-cpp's 14 variants (both releases agree): ggml's generic C Q2_0 in each order.
const NODE_LLAMA_CPP_VARIANTS: &[Variant] = &[
    Variant {
        name: "haswell",
        order: "haswell",
        q2_0: "",
        unmatched: &[],
        served: 9,
    },
    Variant {
        name: "x64",
        order: "x64",
        q2_0: "",
        unmatched: &[],
        served: 9,
    },
    Variant {
        name: "sse42",
        order: "x64",
        q2_0: "",
        unmatched: &[Q1_0],
        served: 8,
    },
    Variant {
        name: "sandybridge",
        order: "haswell",
        q2_0: Q2_0_UNFUSED,
        unmatched: &[Q1_0],
        served: 1,
    },
];

const PREBUILT: [Prebuilt; 6] = [
    Prebuilt {
        name: "debian-libggml0-0.27.0",
        variants: DEBIAN_VARIANTS,
    },
    Prebuilt {
        name: "debian-libggml1-1.1.1",
        variants: DEBIAN_VARIANTS,
    },
    Prebuilt {
        name: "llama-cpp-py-sync-0.11739",
        variants: &[Variant {
            name: "haswell",
            order: "haswell",
            q2_0: Q2_0_GGML_AVX2,
            unmatched: &[],
            served: 9,
        }],
    },
    Prebuilt {
        name: "node-llama-cpp-3.22.1",
        variants: NODE_LLAMA_CPP_VARIANTS,
    },
    Prebuilt {
        name: "node-llama-cpp-3.21.1",
        variants: NODE_LLAMA_CPP_VARIANTS,
    },
    Prebuilt {
        name: "libggml-python-0.20.2",
        variants: &[Variant {
            name: "haswell",
            order: "haswell",
            q2_0: Q2_0_UNFUSED,
            unmatched: &[],
            served: 9,
        }],
    },
];

/// llama.cpp's tools log asynchronously and lose their last lines at exit when the machine is busy (the harness
/// runs such a tool again, up to 16 times; on a loaded two-core machine that ran out): the test that runs them
/// takes this lock alone, every other test of this file shares it.
static TOOLS: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    TOOLS
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    TOOLS
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn library() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ggml-lowbit-ab"))
        .parent()
        .unwrap()
        .join("libggml_lowbit.so")
}

fn fetch(build: &Prebuilt) -> PathBuf {
    build
        .files()
        .fetch()
        .unwrap_or_else(|e| panic!("{} (scripts/prebuilt-ggml.sh): {e}", build.name))
}

/// `tests/c/{name}.c` built into `dir`.
fn c_program(dir: &Path, name: &str) -> PathBuf {
    let exe = dir.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let compiler = ggml_lowbit::ab::fork::default_compiler();
    let status = Command::new(&compiler)
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-ldl")
        .arg("-lm")
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "cannot build {}", src.display());
    exe
}

fn host(dir: &Path) -> PathBuf {
    c_program(dir, "vec_dot_host")
}

/// `program` over `build` (fetched into `root`) with `args`, the library preloaded (when `preload`) and `env`
/// set; through the fetched loader where the build needs it. Returns the output and its text.
fn run_program(
    build: &Prebuilt,
    root: &Path,
    program: &Path,
    args: &[&dyn AsRef<std::ffi::OsStr>],
    preload: bool,
    env: &[(&str, &str)],
) -> (Output, String) {
    let lib = library();
    let mut cmd = build
        .files()
        .command(root, program, preload.then_some(lib.as_path()));
    cmd.args(args.iter().map(|a| a.as_ref()));
    for var in [
        "GGML_LOWBIT_MATCH",
        "GGML_LOWBIT_ISA",
        "GGML_LOWBIT_VERIFY",
        "GGML_LOWBIT_DISABLE",
        "GGML_LOWBIT_SERVE_ALL",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("GGML_LOWBIT_LOG", "1").envs(env.iter().copied());
    let out = cmd.output().expect("run the program");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

/// `variant`'s CPU module of `build`.
fn module(build: &Prebuilt, root: &Path, variant: &str) -> PathBuf {
    build.files().module_path(root, variant)
}

/// The vec_dot host over `variant`'s module of `build`, with the library preloaded and `env` set.
fn run(
    build: &Prebuilt,
    root: &Path,
    host: &Path,
    variant: &str,
    env: &[(&str, &str)],
) -> (Output, String) {
    let module = module(build, root, variant);
    let out = run_program(build, root, host, &[&module, &CASES], true, env);
    println!("{} {variant} {env:?}:\n{}", build.name, out.1);
    out
}

/// The calls the library served, from its exit line.
/// Writes the tiny preset in weight type `wtype` to `path` with the harness's model generator.
fn write_tiny_model(path: &Path, wtype: &str) {
    let made = Command::new(env!("CARGO_BIN_EXE_ggml-lowbit-ab"))
        .args(["model", "--preset", "tiny", "--type", wtype, "--out"])
        .arg(path)
        .output()
        .expect("run the harness");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
}

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

/// Whether this CPU runs `variant`'s module (each needs the instruction sets it was compiled for).
fn runs_here(variant: &str) -> bool {
    use std::arch::is_x86_feature_detected as has;
    match variant {
        "x64" => true,
        "sse42" => has!("sse4.2"),
        "sandybridge" => has!("avx"),
        "haswell" => has!("avx2") && has!("fma") && has!("f16c") && has!("bmi2"),
        "skylakex" => {
            runs_here("haswell")
                && has!("avx512f")
                && has!("avx512cd")
                && has!("avx512bw")
                && has!("avx512dq")
                && has!("avx512vl")
        }
        "zen4" => {
            runs_here("skylakex") && has!("avx512vbmi") && has!("avx512vnni") && has!("avx512bf16")
        }
        _ => false,
    }
}

#[test]
fn over_prebuilt_builds_every_vec_dot_keeps_its_bits_and_unmodelled_kernels_go_to_stock_alone() {
    let _tools = shared();
    let dir = std::env::temp_dir().join(format!("ggml-lowbit-prebuilt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let host = host(&dir);
    for build in &PREBUILT {
        let root = fetch(build);
        for v in build.variants {
            if !runs_here(v.name) {
                println!(
                    "SKIPPED {} {}: this CPU lacks its instruction sets",
                    build.name, v.name
                );
                continue;
            }
            // First serving every symbol ours can (so each one's bits are compared whatever kernel is faster
            // here), then as the dispatcher chooses.
            for env in [&[("GGML_LOWBIT_SERVE_ALL", "1")][..], &[]] {
                let (out, text) = run(build, &root, &host, v.name, env);
                let what = format!("{} {} {env:?}", build.name, v.name);
                assert!(out.status.success(), "{what}: {text}");
                let lines: Vec<&str> = text.lines().filter(|l| l.contains(" cases, ")).collect();
                assert_eq!(lines.len(), SYMBOLS, "{what}: {text}");
                assert!(
                    lines.iter().all(|l| l.ends_with(", 0 mismatches")),
                    "{what}: {text}"
                );
                let probed = format!("float order {} (probed against the stock library)", v.order);
                assert!(text.contains(&probed), "{what}: {text}");
                // A symbol is named when its first call would be served by ours: with SERVE_ALL every
                // unmatched one; as the dispatcher chooses, only those not already passed for speed.
                for symbol in [Q2_0, Q1_0] {
                    let named = text.contains(&format!("{symbol}: the stock kernel "));
                    let unmatched = v.unmatched.contains(&symbol);
                    if env.is_empty() {
                        assert!(!named || unmatched, "{what}: {symbol}: {text}");
                    } else {
                        assert_eq!(named, unmatched, "{what}: {symbol}: {text}");
                    }
                }
                assert!(
                    !text.contains("every call is passed to stock"),
                    "{what}: {text}"
                );
                if !env.is_empty() {
                    let cases: u64 = CASES.parse().unwrap();
                    assert_eq!(served(&text), v.served as u64 * cases, "{what}: {text}");
                    // The newest ggml's own Q2_0 kernel, or a Q2_0 loop without contraction in an AVX2 build,
                    // is recognised and served in its own order.
                    for note in [Q2_0_GGML_AVX2, Q2_0_UNFUSED] {
                        assert_eq!(text.contains(note), v.q2_0 == note, "{what}: {text}");
                    }
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The q8 quantizers preloaded over every prebuilt build's variants that run here, serving all: their output
/// bytes equal the module's own on rows of every magnitude, a quarter of them with NaNs (random payloads) and
/// infinities — where ggml ≥ 0.27.0 narrows a NaN scale with F16C and older builds with the software routine.
#[test]
fn over_prebuilt_builds_the_quantizers_keep_their_bits_nan_scales_included() {
    let _tools = shared();
    let dir = std::env::temp_dir().join(format!("ggml-lowbit-prebuilt-q-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let host = host(&dir);
    for build in &PREBUILT {
        let root = fetch(build);
        for v in build.variants.iter().filter(|v| runs_here(v.name)) {
            let module = module(build, &root, v.name);
            let args: [&dyn AsRef<std::ffi::OsStr>; 3] = [&module, &CASES, &"quantizers"];
            let serve_all = [("GGML_LOWBIT_SERVE_ALL", "1")];
            let (out, text) = run_program(build, &root, &host, &args, true, &serve_all);
            let what = format!("{} {}", build.name, v.name);
            println!("{what}:\n{text}");
            assert!(out.status.success(), "{what}: {text}");
            let lines: Vec<&str> = text.lines().filter(|l| l.contains(" cases, ")).collect();
            assert_eq!(lines.len(), 2, "{what}: {text}");
            assert!(
                lines.iter().all(|l| l.ends_with(", 0 mismatches")),
                "{what}: {text}"
            );
            assert!(served(&text) > 0, "{what}: {text}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whole products over every prebuilt build, through the hook at `ggml_cpu_extra_compute_forward`:
/// `tests/c/graph_host.c` computes MUL_MATs of Q2_0, Q1_0, TQ2_0, TQ1_0, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and
/// IQ3_S weights against 1, 7 and 33 F32 columns with ggml's public API and the backend's two threads, and prints
/// each product's bits as a hash. With the library preloaded (serving as the dispatcher chooses, and serving
/// every format it can) the hashes are those of the build alone, the hook is on, passes its layout self-test,
/// and takes whole products: the Q2_0 ones wherever the build's Q2_0 kernel is in an order the library serves
/// faster, and with every format served some in every build. `GGML_LOWBIT_VERIFY=1` compares every served call
/// with stock: 0 mismatches.
#[test]
fn over_prebuilt_builds_whole_products_go_through_the_hook_with_the_builds_bits() {
    let _tools = shared();
    let dir =
        std::env::temp_dir().join(format!("ggml-lowbit-prebuilt-graph-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let host = c_program(&dir, "graph_host");
    for build in &PREBUILT {
        let root = fetch(build);
        let base = root.join(build.files().base);
        for v in build
            .variants
            .iter()
            .filter(|v| ["haswell", "x64"].contains(&v.name))
        {
            if !runs_here(v.name) {
                println!(
                    "SKIPPED {} {}: this CPU lacks its instruction sets",
                    build.name, v.name
                );
                continue;
            }
            let module = module(build, &root, v.name);
            let args: [&dyn AsRef<std::ffi::OsStr>; 3] = [&base, &module, &"2"];
            let (out, alone) = run_program(build, &root, &host, &args, false, &[]);
            assert!(out.status.success(), "{} {}: {alone}", build.name, v.name);
            assert_eq!(
                alone.lines().filter(|l| l.contains(": ")).count(),
                27,
                "{alone}"
            );
            // Verify mode: every served call computed both ways, none differing.
            let verify = [("GGML_LOWBIT_VERIFY", "1")];
            let (out, text) = run_program(build, &root, &host, &args, true, &verify);
            assert!(out.status.success(), "{} {}: {text}", build.name, v.name);
            let compared = text
                .lines()
                .find(|l| l.starts_with("ggml-lowbit verify: "))
                .unwrap_or_else(|| panic!("{} {}: {text}", build.name, v.name));
            assert!(
                compared.contains(", 0 mismatches, ") && !compared.contains(": 0 calls"),
                "{} {}: {text}",
                build.name,
                v.name
            );
            for env in [&[][..], &[("GGML_LOWBIT_SERVE_ALL", "1")]] {
                let what = format!("{} {} {env:?}", build.name, v.name);
                let (out, text) = run_program(build, &root, &host, &args, true, env);
                println!("{what}:\n{text}");
                assert!(out.status.success(), "{what}: {text}");
                let hashes = |t: &str| -> Vec<String> {
                    t.lines()
                        .filter(|l| !l.starts_with("ggml-lowbit"))
                        .map(str::to_string)
                        .collect()
                };
                assert_eq!(hashes(&text), hashes(&alone), "{what}: {text}");
                let on = format!("mul_mat hook on (ggml {})", build.files().ggml);
                assert!(text.contains(&on), "{what}: {text}");
                let products = ggml_lowbit::ab::e2e::whole_products_in(&text);
                if env.is_empty() {
                    // ggml ≥ 0.27.0's own AVX2 Q2_0 kernel keeps its products unless serving all.
                    let q2_0_served = !v.unmatched.contains(&Q2_0) && v.q2_0 != Q2_0_GGML_AVX2;
                    assert_eq!(products > 0, q2_0_served, "{what}: {text}");
                } else {
                    assert!(products > 0, "{what}: {text}");
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The comparison can fail: the other build's order, forced over a variant, gives other bits.
#[test]
fn the_prebuilt_comparison_catches_a_forced_wrong_order() {
    let _tools = shared();
    let build = &PREBUILT[0];
    let root = fetch(build);
    let dir = std::env::temp_dir().join(format!("ggml-lowbit-prebuilt-neg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let host = host(&dir);
    let (out, text) = run(
        build,
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

/// The variable that makes `q2_0_avx2_model_child` compare (set only by its parent).
const CHILD_MODULE: &str = "GGML_LOWBIT_TEST_PREBUILT_MODULE";

/// `vec_dot_q2_0_q8_0_avx2_model` against the real kernel it models, ggml's own AVX2 Q2_0 in Debian's libggml0
/// 0.27.0 and libggml1 1.1.1 — the haswell variant (AVX2 code, also alderlake's) and the skylakex and zen4
/// variants (the same source compiled with AVX-512 enabled: other registers, the same operand roles) where
/// this CPU runs them: this test binary runs itself through trixie's loader (the libraries need glibc 2.38)
/// with only `q2_0_avx2_model_child`, which loads the module and compares 200,000 random and adversarial rows
/// bit for bit (every byte value in every position, code 3, q8 = −128, special and arbitrary f16 scales),
/// NaN results included.
#[test]
fn q2_0_avx2_model_gives_the_bits_of_the_newest_ggml_kernels() {
    let _tools = shared();
    let mut ran = 0;
    for variant in ["haswell", "skylakex", "zen4"] {
        if !runs_here(variant) {
            println!("SKIPPED {variant}: this CPU lacks its instruction sets");
            continue;
        }
        for build in PREBUILT
            .iter()
            .filter(|b| b.files().own_loader && b.files().has(variant))
        {
            let root = fetch(build);
            let out = build
                .files()
                .command(&root, &std::env::current_exe().unwrap(), None)
                .args([
                    "--exact",
                    "q2_0_avx2_model_child",
                    "--ignored",
                    "--nocapture",
                ])
                .env(CHILD_MODULE, module(build, &root, variant))
                .output()
                .expect("run the child through trixie's loader");
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let what = format!("{} {variant}", build.name);
            println!("{what}:\n{text}");
            assert!(out.status.success(), "{what}: {text}");
            assert!(
                text.contains("q2_0 avx2 model: 200000 cases, 0 mismatches ("),
                "{what}: {text}"
            );
            ran += 1;
        }
    }
    assert!(ran > 0, "no variant of the newest kernels runs on this CPU");
}

/// Half of `q2_0_avx2_model_gives_the_bits_of_the_newest_ggml_kernels`, run by it (ignored on its own).
#[test]
#[ignore = "run by q2_0_avx2_model_gives_the_bits_of_the_newest_ggml_kernels through trixie's loader"]
fn q2_0_avx2_model_child() {
    let _tools = shared();
    use ggml_lowbit::ab::cases::Gen;
    use ggml_lowbit::formats::{blocks, q2_0};
    let module = std::env::var_os(CHILD_MODULE).expect("run by its parent test");
    // SAFETY: the module is ggml's CPU backend; loading it runs its initialisers, which have no preconditions.
    let lib = unsafe { libloading::Library::new(&module) }.expect("load the module");
    // SAFETY: symbols of the ggml-cpu ABI, with their C signatures.
    let (init, dot) = unsafe {
        (
            *lib.get::<unsafe extern "C" fn()>(b"ggml_cpu_init\0")
                .unwrap(),
            *lib.get::<ggml_lowbit::stock::VecDotFn>(b"ggml_vec_dot_q2_0_q8_0\0")
                .unwrap(),
        )
    };
    // SAFETY: ggml_cpu_init takes no arguments and may be called more than once.
    unsafe { init() };
    let mut gen = Gen::new(60);
    let (mut bad, mut nan_pairs, mut bad_numbers) = (0, 0, 0);
    const CASES: u64 = 200_000;
    for case in 0..CASES {
        gen.case = case;
        let nb = gen.row_blocks(64);
        let mut x = vec![0u8; nb * 18];
        let mut y = vec![0u8; 2 * nb * 34];
        gen.q2_0_row(nb, &mut x);
        gen.q8_0_row(2 * nb, &mut y);
        let want = q2_0::vec_dot_q2_0_q8_0_avx2_model(blocks(&x), blocks(&y));
        let mut got = 0f32;
        // SAFETY: x and y hold nb Q2_0 blocks and 2·nb q8_0 blocks, the n = 64·nb weights ggml passes.
        unsafe {
            dot(
                (64 * nb) as i32,
                &mut got,
                0,
                x.as_ptr().cast(),
                0,
                y.as_ptr().cast(),
                0,
                1,
            )
        };
        if got.is_nan() && want.is_nan() {
            nan_pairs += 1;
        }
        if got.to_bits() != want.to_bits() {
            bad_numbers += u64::from(!(got.is_nan() && want.is_nan()));
            if bad < 5 || !(got.is_nan() && want.is_nan()) && bad_numbers < 5 {
                println!(
                    "case {case}: nb {nb}, stock {got:e} ({:#x}), model {want:e} ({:#x})",
                    got.to_bits(),
                    want.to_bits()
                );
            }
            bad += 1;
        }
    }
    println!(
        "q2_0 avx2 model: {CASES} cases, {bad} mismatches ({nan_pairs} NaN results, compared by bits; \
         {bad_numbers} mismatches that are not NaN pairs)"
    );
}

/// Debian's llama.cpp 0.7.0 (upstream b11669 over ggml 0.27.0, whose Q2_0 has its own AVX2 kernel): its own
/// `llama-completion` and `llama-perplexity` (`e2e::tools_dir`: through unstable's loader, with the CPU variant
/// a release picks here), on tiny Q2_0 and Q1_0 models, give the same greedy text and the same perplexity in
/// every chunk (micro-batches of 128 tokens: prefill) with the library preloaded as without it, as dispatched
/// (the library recognises that kernel's order and leaves Q2_0 to it: no whole Q2_0 products) and serving all
/// (the hook takes whole Q2_0 products in that order).
#[test]
fn debian_llama_cpp_tools_keep_their_text_and_perplexity_with_the_library() {
    let _tools = alone();
    use ggml_lowbit::ab::e2e::{self, Preload};
    if !runs_here("haswell") {
        println!("SKIPPED: this CPU cannot run the haswell variant (AVX2, FMA, F16C, BMI2)");
        return;
    }
    let tools = e2e::tools_dir(e2e::DEBIAN_TOOLS)
        .unwrap_or_else(|e| panic!("{} (scripts/prebuilt-ggml.sh): {e}", e2e::DEBIAN_TOOLS));
    let dir = std::env::temp_dir().join(format!("ggml-lowbit-debian-tools-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = dir.join("text.txt");
    std::fs::write(&text, e2e::perplexity_text()).unwrap();
    let lib = library();
    for (wtype, serve_all) in [("q2_0", false), ("q2_0", true), ("q1_0", false)] {
        let preload = Some(Preload {
            lib: Some(&lib),
            env: if serve_all {
                &[("GGML_LOWBIT_SERVE_ALL", "1")]
            } else {
                e2e::WITH_HOOK
            },
        });
        let model = dir.join(format!("tiny-{wtype}.gguf"));
        write_tiny_model(&model, wtype);
        let run = |tool: &str, args: &[String], preload| {
            e2e::run_tool(&tools, tool, args, preload, false)
                .unwrap_or_else(|e| panic!("{wtype}: {e}"))
        };
        let args = e2e::completion_args(&model, 2, 16);
        let (stock, ours) = (
            run("llama-completion", &args, None),
            run("llama-completion", &args, preload),
        );
        assert_eq!(stock.stdout, ours.stdout, "{wtype}: {}", ours.stderr);
        assert!(e2e::hook_on(&ours), "{wtype}: {}", ours.stderr);
        let args = e2e::perplexity_args(&model, &text, 2, 3, 128);
        let (stock, ours) = (
            run("llama-perplexity", &args, None),
            run("llama-perplexity", &args, preload),
        );
        let (values, _) = e2e::perplexity_values(&stock);
        assert!(values.len() >= 2, "{}", stock.stderr);
        assert_eq!(
            values,
            e2e::perplexity_values(&ours).0,
            "{wtype}: {}",
            ours.stderr
        );
        println!("{wtype}: perplexity per chunk {values:?}, identical with the library");
        // Every call went through the library; without AVX-512 it passes this build's Q2_0, Q1_0 and q8_0
        // quantizer to stock unless it serves all.
        assert!(
            e2e::served_calls(&ours) + e2e::passed_calls(&ours) > 0,
            "{wtype}: {}",
            ours.stderr
        );
        if serve_all {
            assert!(e2e::served_calls(&ours) > 0, "{wtype}: {}", ours.stderr);
        }
        if wtype == "q2_0" {
            assert!(
                ours.stderr
                    .contains("Q2_0 in ggml ≥ 0.27.0's own AVX2 order"),
                "{}",
                ours.stderr
            );
            assert_eq!(e2e::whole_products(&ours) > 0, serve_all, "{}", ours.stderr);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// node-llama-cpp 3.22.1 itself, as its users run it (`tests/js/node_llama_cpp_check.mjs`: `getLlama` with its
/// shipped CPU build, which picks the variant for this CPU), on tiny Q2_0, Q1_0, TQ2_0 and IQ2_XXS models: the
/// next-token probabilities of every token of a 30-odd-token prompt (one evaluation: prefill), hashed as bit
/// patterns, and the greedy text are the same with the library preloaded as without it; the hook is on and takes
/// whole Q2_0 products. The check can fail: Q2_0 forced into the other float order changes the hash.
#[test]
fn node_llama_cpp_itself_keeps_its_probabilities_and_text_with_the_library() {
    let _tools = shared();
    if !runs_here("haswell") {
        println!(
            "SKIPPED: this CPU cannot run node-llama-cpp's haswell variant (AVX2, FMA, F16C, BMI2)"
        );
        return;
    }
    let app = ggml_lowbit::stock::run_build_script(
        "prebuilt-ggml.sh",
        "node-llama-cpp-app-3.22.1",
        "node_modules/node-llama-cpp/dist/index.js",
    )
    .unwrap_or_else(|e| panic!("node-llama-cpp-app-3.22.1 (scripts/prebuilt-ggml.sh): {e}"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/js/node_llama_cpp_check.mjs");
    let dir = std::env::temp_dir().join(format!("ggml-lowbit-node-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let node = |model: &Path, env: &[(&str, &str)], preload: bool| -> (String, String) {
        let mut cmd = Command::new("node");
        cmd.arg(&script)
            .arg(&app)
            .arg(model)
            .args(["2", "24"])
            .env_remove("LD_PRELOAD")
            .env("GGML_LOWBIT_LOG", "1")
            .envs(env.iter().copied());
        if preload {
            cmd.env("LD_PRELOAD", library());
        }
        let out = cmd
            .output()
            .expect("run node (Node.js is needed for node-llama-cpp)");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "{}: {stdout}{stderr}",
            model.display()
        );
        (stdout, stderr)
    };
    for wtype in ["q2_0", "q1_0", "tq2_0", "iq2_xxs"] {
        let model = dir.join(format!("tiny-{wtype}.gguf"));
        write_tiny_model(&model, wtype);
        let (stock, _) = node(&model, &[], false);
        let (ours, log) = node(&model, &[], true);
        println!("{wtype}: {stock}{log}");
        assert!(stock.contains(" values, sha256 "), "{stock}");
        assert!(!stock.contains(" 0 values"), "{stock}");
        assert_eq!(ours, stock, "{wtype}: {log}");
        assert!(
            log.contains("mul_mat hook on (ggml 0.25.1)"),
            "{wtype}: {log}"
        );
        assert!(served(&log) > 0, "{wtype}: {log}");
        if wtype == "q2_0" {
            assert!(ggml_lowbit::ab::e2e::whole_products_in(&log) > 0, "{log}");
            let (wrong, log) = node(
                &model,
                &[("GGML_LOWBIT_MATCH", "x64"), ("GGML_LOWBIT_SERVE_ALL", "1")],
                true,
            );
            let hash = |s: &str| s.lines().next().unwrap_or_default().to_string();
            assert_ne!(
                hash(&wrong),
                hash(&stock),
                "the other order went unnoticed: {log}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ggml-lowbit-ab bits --prebuilt`: the rlib's tables for what the library's probe finds in each build (float
/// order, Q2_0's kernel, how the q8_0 quantizer narrows a NaN scale) against the build's own symbols, at every
/// instruction set here, in the variant a release picks on this CPU: 200,000 random and adversarial cases per
/// symbol against ggml ≥ 0.27.0 (Debian's 0.27.0 and 1.1.1), 20,000 against the others. 0 mismatches.
#[test]
fn bits_against_each_prebuilt_build_as_the_probe_finds_it() {
    let _tools = shared();
    for (build, cases) in [
        ("debian-libggml0-0.27.0", "200000"),
        ("debian-libggml1-1.1.1", "200000"),
        ("llama-cpp-py-sync-0.11739", "20000"),
        ("node-llama-cpp-3.22.1", "20000"),
        ("node-llama-cpp-3.21.1", "20000"),
        ("libggml-python-0.20.2", "20000"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_ggml-lowbit-ab"))
            .args(["bits", "--prebuilt", build, "--cases", cases])
            .env_remove("LD_PRELOAD")
            .output()
            .expect("run the harness");
        let text = String::from_utf8_lossy(&out.stdout);
        let summary: Vec<&str> = text
            .lines()
            .filter(|l| l.contains(": float order ") || l.starts_with("bits: "))
            .collect();
        println!("{build}: {summary:?}");
        assert!(
            out.status.success(),
            "{build}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            summary
                .iter()
                .any(|l| l.starts_with("bits: ") && l.ends_with(" comparisons, 0 mismatches")),
            "{build}: {text}"
        );
    }
}

/// `ggml-lowbit-ab speed --prebuilt`: this crate's exports configured in front of a prebuilt build's variant (as
/// the preload serves there) timed against that build's own kernels on a small shape. Each row is bit-checked
/// before it is timed, so a run that finishes compared every output; the report names the build and variant,
/// and says per symbol whether the library serves it: over ggml 0.27.0 Q2_0 (rows and whole products) and the
/// q8_0 quantizer go to stock's own faster kernels; over node-llama-cpp 3.22.1 (ggml 0.25.1) Q2_0 is served.
/// Fork formats, which no prebuilt build has, get a clear error.
#[test]
fn speed_against_a_prebuilt_build_names_it_and_what_the_library_serves() {
    let _tools = shared();
    if !runs_here("haswell") {
        println!("SKIPPED: the builds' haswell variants need AVX2, FMA and F16C");
        return;
    }
    let ab = env!("CARGO_BIN_EXE_ggml-lowbit-ab");
    for (build, q2_0_served) in [
        ("debian-libggml0-0.27.0", false),
        ("node-llama-cpp-3.22.1", true),
    ] {
        let out_dir =
            std::env::temp_dir().join(format!("lowbit-speed-{build}-{}", std::process::id()));
        let out = Command::new(ab)
            .args([
                "speed",
                "--prebuilt",
                build,
                "--shapes",
                "256x4096",
                "--reps",
                "1",
            ])
            .args(["--threads", "1", "--out"])
            .arg(&out_dir)
            .env_remove("LD_PRELOAD")
            .output()
            .expect("run the harness");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{build}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out_dir.join("speed.json")).expect("speed.json"),
        )
        .expect("speed.json parses");
        assert_eq!(report["stock_build"], format!("{build} haswell"), "{text}");
        let rows = report["rows"].as_array().expect("rows");
        let served = |symbol: &str| {
            let of: Vec<&serde_json::Value> =
                rows.iter().filter(|r| r["symbol"] == symbol).collect();
            assert!(!of.is_empty(), "{build}: no {symbol} row");
            of[0]["served"].as_bool().expect("served")
        };
        assert_eq!(served("ggml_vec_dot_q2_0_q8_0"), q2_0_served, "{build}");
        assert_eq!(
            served("ggml_lowbit_mul_mat_q2_0_q8_0"),
            q2_0_served,
            "{build}"
        );
        assert_eq!(served("quantize_row_q8_0"), q2_0_served, "{build}");
        assert!(served("quantize_row_q8_K"), "{build}");
        assert!(rows.len() >= 15, "{build}: {} rows", rows.len());
        let _ = std::fs::remove_dir_all(&out_dir);
    }
    let out = Command::new(ab)
        .args([
            "speed",
            "--prebuilt",
            "debian-libggml0-0.27.0",
            "--symbol",
            "ggml_vec_dot_pq2_0_q8_0",
        ])
        .env_remove("LD_PRELOAD")
        .output()
        .expect("run the harness");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the prebuilt builds have no fork formats"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// llama-cpp-py-sync 0.11739 (upstream b11739, ggml 0.27.0) through its own Python API, as its users call it
/// (`tests/py/py_sync_check.py`: `Llama`, a greedy completion, the last logits hashed as bit patterns), this
/// machine's python3 started through trixie's loader (the wheel needs glibc 2.38), on tiny Q2_0, Q1_0, TQ2_0 and
/// IQ2_XXS models: the same text and logits with the library preloaded as without it, the library probing that
/// ggml's own Q2_0 kernel and F16C-narrowed q8_0 scales. The check can fail: Q2_0 forced into the x64 order and
/// served changes the logits.
#[test]
fn llama_cpp_py_sync_keeps_its_text_and_logits_with_the_library() {
    let _tools = shared();
    if !runs_here("haswell") {
        println!("SKIPPED: py-sync's ggml is built for AVX2, FMA and F16C");
        return;
    }
    let build = PREBUILT
        .iter()
        .find(|b| b.name == "llama-cpp-py-sync-0.11739")
        .unwrap();
    let root = fetch(build);
    // The interpreter itself (not a launcher script) and its libpython, for the loader.
    let python = Command::new("python3")
        .args([
            "-c",
            "import sys, sysconfig; print(sys.executable); print(sysconfig.get_config_var('LIBDIR'))",
        ])
        .output()
        .expect("python3 is needed for llama-cpp-py-sync");
    let python = String::from_utf8_lossy(&python.stdout).into_owned();
    let mut lines = python.lines();
    let (exe, libdir) = (
        lines.next().unwrap().to_string(),
        lines.next().unwrap_or("").to_string(),
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/py_sync_check.py");
    let dir = std::env::temp_dir().join(format!("ggml-lowbit-py-sync-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let lib = root.join(build.files().lib_dir);
    let run = |model: &Path, env: &[(&str, &str)], preload: bool| -> (String, String) {
        let mut cmd = Command::new(lib.join("ld-linux-x86-64.so.2"));
        cmd.arg("--library-path").arg(format!(
            "{}:{libdir}:/usr/lib/x86_64-linux-gnu",
            lib.display()
        ));
        if preload {
            cmd.arg("--preload").arg(library());
        }
        let out = cmd
            .arg(&exe)
            .arg(&script)
            .arg(&root)
            .arg(model)
            .arg("2")
            .env_remove("LD_PRELOAD")
            .env("PYTHONPATH", root.join("site"))
            .env("GGML_LOWBIT_LOG", "1")
            .envs(env.iter().copied())
            .output()
            .expect("run python through trixie's loader");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "{}: {stdout}{stderr}",
            model.display()
        );
        (stdout, stderr)
    };
    for wtype in ["q2_0", "q1_0", "tq2_0", "iq2_xxs"] {
        let model = dir.join(format!("tiny-{wtype}.gguf"));
        write_tiny_model(&model, wtype);
        let (stock, _) = run(&model, &[], false);
        let (ours, log) = run(&model, &[], true);
        println!("{wtype}: {stock}");
        assert!(
            stock.contains("logits: ") && stock.contains(", sha256 "),
            "{stock}"
        );
        assert_eq!(ours, stock, "{wtype}: {log}");
        assert!(log.contains(Q2_0_GGML_AVX2), "{wtype}: {log}");
        assert!(
            log.contains("q8_0 scales narrowed by F16C"),
            "{wtype}: {log}"
        );
        // Every call went through the library; on a CPU without AVX-512 it passes Q2_0, Q1_0, the q8_K formats
        // and this build's faster q8_0 quantizer to stock, and serves the q8_K quantizer.
        assert!(
            served(&log) + ggml_lowbit::ab::e2e::exit_counts_in(&log).1 > 0,
            "{wtype}: {log}"
        );
        if wtype == "tq2_0" || wtype == "iq2_xxs" {
            assert!(served(&log) > 0, "{wtype}: {log}");
        }
        if wtype == "q2_0" {
            // Our own kernels in this build's order, served for every call: the same logits.
            let (all, log) = run(&model, &[("GGML_LOWBIT_SERVE_ALL", "1")], true);
            assert_eq!(all, stock, "{wtype}, serving all: {log}");
            assert!(served(&log) > 0, "{wtype}, serving all: {log}");
            let (wrong, log) = run(
                &model,
                &[("GGML_LOWBIT_MATCH", "x64"), ("GGML_LOWBIT_SERVE_ALL", "1")],
                true,
            );
            let logits = |s: &str| {
                s.lines()
                    .find(|l| l.starts_with("logits: "))
                    .map(str::to_string)
            };
            assert_ne!(
                logits(&wrong),
                logits(&stock),
                "the other order went unnoticed: {log}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
