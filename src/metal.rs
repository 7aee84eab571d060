//! The Metal side, verified on Linux: our drop-in mat-vec kernels (`src/metal/lowbit_mul_mv.metal`), the patch
//! that puts them into the pinned tree's `kernels/mul_mv.metal` (`ggml-patch/metal.patch`), and the SIMT
//! emulator (`src/metal/emu/`) that runs a `mul_mv.metal` — stock or patched — compiled as C++, so each kernel
//! can be compared with the reference and with stock's kernel on identical inputs. See docs/METAL.md.

use std::ffi::{c_char, c_int, c_void, CString};
use std::path::{Path, PathBuf};
use std::process::Command;

use libloading::Library;

pub mod opcount;

/// The pinned tree's mat-vec kernel file, relative to the llama.cpp root.
pub const MUL_MV_PATH: &str = "ggml/src/ggml-metal/kernels/mul_mv.metal";

/// Stock's kernels that ours replace, as (first line of the first definition, first line of the next definition
/// kept): Q1_0 and Q2_0; IQ2_XXS and IQ2_XS; IQ3_S and IQ2_S. Our file goes where the first region was.
const REPLACED: [(&str, &str); 3] = [
    (
        "template<int nr0, typename args_t>\nvoid kernel_mul_mv_q1_0_f32_impl(",
        "kernel void kernel_mul_mv_q4_0_f32(",
    ),
    (
        "template<int nr0, typename args_t>\nvoid kernel_mul_mv_iq2_xxs_f32_impl(",
        "template<int nr0, typename args_t>\nvoid kernel_mul_mv_iq3_xxs_f32_impl(",
    ),
    (
        "template<int nr0, typename args_t>\nvoid kernel_mul_mv_iq3_s_f32_impl(",
        "template<int nr0, typename args_t>\nvoid kernel_mul_mv_iq1_s_f32_impl(",
    ),
];

/// One kernel of `src/metal/lowbit_mul_mv.metal` (`kernel_mul_mv_<format>_f32` and its `_id` form) and what the
/// op counts need to know of it: the loop depth of its hot loop (1: the loop over blocks; 2: the IQ kernels' loop
/// over rows inside the loop over sub-blocks) and the weights one lane covers per iteration of it, given rows per
/// simdgroup.
#[derive(Clone, Copy, Debug)]
pub struct OurKernel {
    pub format: &'static str,
    pub depth: usize,
    pub weights_per_iteration: fn(usize) -> usize,
}

/// Our kernels. Q1_0/Q2_0/PQ2_0/PTQ1_0: 16 weights of each of nr0 rows a step (PTQ1_0 lanes take 15 or 19, 16 on
/// average); IQ: one row's 32-weight sub-block.
pub const OUR_KERNELS: [OurKernel; 8] = [
    OurKernel::rows("q1_0"),
    OurKernel::rows("q2_0"),
    OurKernel::iq("iq2_xxs"),
    OurKernel::iq("iq2_xs"),
    OurKernel::iq("iq2_s"),
    OurKernel::iq("iq3_s"),
    OurKernel::rows("pq2_0"),
    OurKernel::rows("ptq1_0"),
];

impl OurKernel {
    /// A kernel whose hot loop takes 16 weights of each of its `nr0` rows (loop depth 1).
    const fn rows(format: &'static str) -> OurKernel {
        OurKernel {
            format,
            depth: 1,
            weights_per_iteration: |nr0| nr0 * 16,
        }
    }

    /// An IQ kernel: one row's 32-weight sub-block per hot-loop iteration (loop depth 2).
    const fn iq(format: &'static str) -> OurKernel {
        OurKernel {
            format,
            depth: 2,
            weights_per_iteration: |_| 32,
        }
    }
}

/// One kernel's counted work: ours, and stock's where the pinned tree has the kernel, per hot-loop iteration,
/// with the weights an iteration covers.
#[derive(Clone, Debug)]
pub struct OpReport {
    pub format: &'static str,
    pub weights: usize,
    pub ours: opcount::OpCounts,
    pub stock: Option<opcount::OpCounts>,
}

/// Counts every kernel of ours and stock's counterpart (`optimized_gimple` of both builds; the emulators give
/// the geometry).
pub fn op_reports(
    compiler: &Path,
    llama_src: &Path,
    ours: &Emulator,
    stock: &Emulator,
) -> Result<Vec<OpReport>, String> {
    let g_ours = optimized_gimple(compiler, llama_src, Variant::Patched)?;
    let g_stock = optimized_gimple(compiler, llama_src, Variant::Stock)?;
    let mut out = Vec::new();
    for k in OUR_KERNELS {
        let name = k.name();
        let geo = ours
            .geometry(&name)?
            .ok_or_else(|| format!("{name} missing from the patched build"))?;
        let stock_geo = stock.geometry(&name)?;
        if stock_geo.is_some_and(|g| g != geo) {
            return Err(format!(
                "{name}: geometry {geo:?} differs from stock's {stock_geo:?}"
            ));
        }
        let stock_counts = match stock_geo {
            Some(_) => Some(opcount::kernel_counts(&g_stock, k.format, k.depth)?),
            None => None,
        };
        out.push(OpReport {
            format: k.format,
            weights: (k.weights_per_iteration)(geo.nr0),
            ours: opcount::kernel_counts(&g_ours, k.format, k.depth)?,
            stock: stock_counts,
        });
    }
    Ok(out)
}

/// Where `lowbit_mul_mv.metal` splits: what follows goes to the end of mul_mv.metal (the `_id` instantiations of
/// the kernels the pinned tree lacks need `kernel_mul_mv_id`, defined near its end).
const TAIL_MARKER: &str =
    "// ---- ggml-lowbit: after mul_mv.metal's own kernel_mul_mv_id instantiations ----";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Our kernels' source.
pub fn our_kernels_path() -> PathBuf {
    repo().join("src/metal/lowbit_mul_mv.metal")
}

/// The committed patch.
pub fn patch_path() -> PathBuf {
    repo().join("ggml-patch/metal.patch")
}

/// The byte range from the first `from` at or after `at` up to the next `until`.
fn region(text: &str, at: usize, from: &str, until: &str) -> Result<(usize, usize), String> {
    let start = text[at..].find(from).map(|p| at + p).ok_or_else(|| {
        format!(
            "mul_mv.metal: no `{}` where expected",
            from.replace('\n', " ")
        )
    })?;
    let end = text[start..]
        .find(until)
        .map(|p| start + p)
        .ok_or_else(|| {
            format!(
                "mul_mv.metal: no `{until}` after `{}`",
                from.replace('\n', " ")
            )
        })?;
    Ok((start, end))
}

/// Stock `mul_mv.metal` with the kernels of `REPLACED` replaced by ours: what `ggml-patch/metal.patch` must
/// produce (a test keeps the two in step).
pub fn patched_mul_mv(stock: &str, ours: &str) -> Result<String, String> {
    let (ours, tail) = match ours.find(TAIL_MARKER) {
        Some(i) => (&ours[..i], &ours[i..]),
        None => (ours, ""),
    };
    let mut out = String::with_capacity(stock.len() + ours.len());
    let mut at = 0;
    for (i, (from, until)) in REPLACED.iter().enumerate() {
        let (start, end) = region(stock, at, from, until)?;
        out.push_str(&stock[at..start]);
        if i == 0 {
            out.push_str("// ---- ggml-lowbit (src/metal/lowbit_mul_mv.metal) ----\n");
            out.push_str(ours);
            if !ours.ends_with('\n') {
                out.push('\n');
            }
            out.push_str("// ---- end of ggml-lowbit ----\n\n");
        } else {
            out.push_str("// (this format's mat-vec kernels: ggml-lowbit's, further up)\n\n");
        }
        at = end;
    }
    out.push_str(&stock[at..]);
    if !tail.is_empty() {
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push('\n');
        out.push_str(tail);
        if !tail.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

/// The unified diff from stock `mul_mv.metal` to the patched one, as `ggml-patch/metal.patch` holds it
/// (`git apply -p1` or `patch -p1` from the llama.cpp root).
pub fn make_patch(stock: &str, patched: &str) -> Result<String, String> {
    let dir = tempdir("metal-patch")?;
    let a = dir.join("a");
    let b = dir.join("b");
    std::fs::write(&a, stock).map_err(|e| e.to_string())?;
    std::fs::write(&b, patched).map_err(|e| e.to_string())?;
    let out = Command::new("diff")
        .args(["-u", "--label"])
        .arg(format!("a/{MUL_MV_PATH}"))
        .arg("--label")
        .arg(format!("b/{MUL_MV_PATH}"))
        .arg(&a)
        .arg(&b)
        .output()
        .map_err(|e| format!("cannot run diff: {e}"))?;
    let _ = std::fs::remove_dir_all(&dir);
    match out.status.code() {
        Some(1) => String::from_utf8(out.stdout).map_err(|e| e.to_string()),
        Some(0) => Err("the patched mul_mv.metal equals stock's".into()),
        _ => Err(format!(
            "diff failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

/// Applies `patch` (a `-p1` unified diff of `mul_mv.metal`) to stock's file with `git apply`, in a scratch tree,
/// and returns the result: the check that the committed patch applies to the pinned tree.
pub fn apply_patch(stock: &str, patch: &Path) -> Result<String, String> {
    let dir = tempdir("metal-apply")?;
    let file = dir.join(MUL_MV_PATH);
    std::fs::create_dir_all(file.parent().unwrap()).map_err(|e| e.to_string())?;
    std::fs::write(&file, stock).map_err(|e| e.to_string())?;
    // Kept from finding a repository above the scratch tree, so paths are relative to it.
    let out = Command::new("git")
        .args(["apply", "-p1"])
        .arg(patch)
        .current_dir(&dir)
        .env("GIT_CEILING_DIRECTORIES", dir.parent().unwrap())
        .output()
        .map_err(|e| format!("cannot run git apply: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{} does not apply to the pinned mul_mv.metal: {}{}",
            patch.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = std::fs::read_to_string(&file).map_err(|e| e.to_string());
    let _ = std::fs::remove_dir_all(&dir);
    text
}

/// Runs a compiler command; its stderr is the error when it fails.
fn run_compiler(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{what}:\n{}", String::from_utf8_lossy(&out.stderr)))
    }
}

/// The NUL-terminated message a C entry point wrote into `buf`.
fn c_message(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Reads a GIMPLE dump and removes its scratch folder.
fn read_dump(dump: &Path, dir: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(dump)
        .map_err(|e| format!("{}: {e} (is the compiler g++?)", dump.display()));
    let _ = std::fs::remove_dir_all(dir);
    text
}

fn tempdir(what: &str) -> Result<PathBuf, String> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "ggml-lowbit-{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// The three constructs of Metal that g++ does not take (and the unroll pragma), rewritten mechanically (docs/METAL.md): the
/// `[[threadgroup(0)]]` attribute (its address-space word is an empty macro here), half literals (`16.h`), and
/// GNU range designators, which the pinned files only use to zero an array (`{ [0 ... n-1] = 0.0f }` → `{}`).
pub fn rewrite_for_cxx(text: &str) -> Result<String, String> {
    // Metal's compiler unrolls FOR_UNROLL loops fully; so does g++ under its own spelling of the pragma (the op
    // counts rely on it: an inner loop left rolled would be counted once).
    let text = text.replace("[[threadgroup(0)]]", "").replace(
        "_Pragma(\"clang loop unroll(full)\")",
        "_Pragma(\"GCC unroll 128\")",
    );
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < bytes.len() {
        // half literal: digits '.' digits* 'h', not inside an identifier
        if bytes[i].is_ascii_digit() && (i == 0 || !(ident(bytes[i - 1]) || bytes[i - 1] == b'.')) {
            let mut j = i;
            while j < bytes.len() && bytes[j].is_ascii_digit() {
                j += 1;
            }
            if j < bytes.len() && bytes[j] == b'.' {
                let mut k = j + 1;
                while k < bytes.len() && bytes[k].is_ascii_digit() {
                    k += 1;
                }
                if k < bytes.len()
                    && bytes[k] == b'h'
                    && (k + 1 == bytes.len() || !ident(bytes[k + 1]))
                {
                    out.push_str(&format!("((half){}f)", &text[i..k]));
                    i = k + 1;
                    continue;
                }
            }
            out.push_str(&text[i..j]);
            i = j;
            continue;
        }
        if bytes[i] == b'{' {
            if let Some(end) = text[i..].find('}') {
                let inner = &text[i + 1..i + end];
                if inner.contains("...") && inner.trim_start().starts_with('[') {
                    let value = inner.rsplit('=').next().unwrap_or("").trim();
                    if !matches!(value, "0" | "0.0f" | "0.f" | "0.0") {
                        return Err(format!(
                            "range designator with a non-zero value: {{{inner}}}"
                        ));
                    }
                    out.push_str("{}");
                    i += end + 1;
                    continue;
                }
            }
        }
        let c = text[i..].chars().next().unwrap();
        out.push(c);
        i += c.len_utf8();
    }
    Ok(out)
}

/// Which `mul_mv.metal` an emulator runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The pinned tree's file as it is.
    Stock,
    /// The pinned tree's file with `ggml-patch/metal.patch` applied.
    Patched,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Stock => "stock",
            Variant::Patched => "patched",
        }
    }
}

/// A kernel's launch parameters as ggml-metal's host code chooses them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Simdgroups per threadgroup.
    pub nsg: usize,
    /// Rows per simdgroup.
    pub nr0: usize,
    /// Rows per simdgroup in split mode; 0 for kernels without one.
    pub nr0_split: usize,
    /// Threadgroup memory, bytes.
    pub smem: usize,
}

impl OurKernel {
    /// ggml-metal's name of the mat-vec kernel.
    pub fn name(&self) -> String {
        format!("kernel_mul_mv_{}_f32", self.format)
    }
}

impl Geometry {
    /// Rows per simdgroup and FC_mul_mv_split for rows of `ne00` weights: the IQ kernels split a row over fewer
    /// lanes when it has fewer than 32 sub-blocks of 32 and their count divides 32 (ggml-metal-device.cpp).
    pub fn for_row(&self, ne00: usize) -> (usize, bool) {
        let nb32 = ne00 / 32;
        if self.nr0_split != 0 && nb32 < 32 && 32 % nb32 == 0 {
            (self.nr0_split, true)
        } else {
            (self.nr0, false)
        }
    }
}

/// `ggml_metal_kargs_mul_mv` (ggml-metal-impl.h of the pinned tree) with its padding spelled out, so that its
/// bytes are all initialised; the emulator checks the size against the C++ struct.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct KargsMulMv {
    pub ne00: i32,
    pub ne01: i32,
    pub ne02: i32,
    pub _pad0: i32,
    pub nb00: u64,
    pub nb01: u64,
    pub nb02: u64,
    pub nb03: u64,
    pub ne10: i32,
    pub ne11: i32,
    pub ne12: i32,
    pub _pad1: i32,
    pub nb10: u64,
    pub nb11: u64,
    pub nb12: u64,
    pub nb13: u64,
    pub ne0: i32,
    pub ne1: i32,
    pub nr0: i32,
    pub r2: i16,
    pub r3: i16,
}

/// `ggml_metal_kargs_mul_mv_id`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct KargsMulMvId {
    pub nei0: i32,
    pub nei1: i32,
    pub nbi1: u64,
    pub ne00: i32,
    pub ne01: i32,
    pub ne02: i32,
    pub _pad0: i32,
    pub nb00: u64,
    pub nb01: u64,
    pub nb02: u64,
    pub ne10: i32,
    pub ne11: i32,
    pub ne12: i32,
    pub ne13: i32,
    pub nb10: u64,
    pub nb11: u64,
    pub nb12: u64,
    pub ne0: i32,
    pub ne1: i32,
    pub nb1: u64,
    pub nr0: i32,
    pub _pad_end: i32,
}

type SetConstantsFn = unsafe extern "C" fn(*const i16);
type GeometryFn = unsafe extern "C" fn(*const c_char, *mut c_int) -> c_int;
type ArgSizesFn = unsafe extern "C" fn(*mut usize, *mut usize);
type DispatchFn = unsafe extern "C" fn(
    *const c_char,
    *const c_void,
    *const u8,
    *const u8,
    *mut u8,
    *const u8,
    *const u32,
    c_int,
    usize,
    *mut c_char,
    usize,
) -> c_int;

/// One compiled `mul_mv.metal` (a shared library built from `src/metal/emu/driver.cpp`) and its entry points.
pub struct Emulator {
    pub variant: Variant,
    pub path: PathBuf,
    lib: Library,
    // The function constants are globals of the library and its threadgroup state is one static: one
    // dispatch at a time.
    busy: std::sync::Mutex<()>,
}

/// The C++ compiler's flags: C++17, attributes Metal uses ignored, the stand-in `<metal_stdlib>` force-included,
/// and `-ffp-contract=off` so that the host compiler adds no FMA of its own (Metal's fast math might; the
/// comparisons never depend on it).
fn common_args(shim: &Path) -> Vec<String> {
    vec![
        "-std=c++17".into(),
        "-ffp-contract=off".into(),
        "-Wno-attributes".into(),
        format!("-I{}", shim.display()),
        "-include".into(),
        "metal_stdlib".into(),
    ]
}

/// The emulator library: `-O1` keeps the build short.
fn compile_args(shim: &Path) -> Vec<String> {
    let mut a = common_args(shim);
    a.extend(["-O1", "-fPIC", "-shared"].map(String::from));
    a
}

fn fnv1a(h: &mut u64, bytes: &[u8]) {
    for b in bytes {
        *h ^= u64::from(*b);
        *h = h.wrapping_mul(0x100_0000_01b3);
    }
}

/// A `mul_mv.metal` (stock's or patched) and the two headers of the pinned tree it includes, rewritten for
/// g++; and the pinned tree's folders for `ggml-metal-impl.h` and `ggml-common.h`.
struct Sources {
    files: Vec<(String, String)>,
    includes: Vec<PathBuf>,
}

/// For the op counts: `#pragma GCC unroll 128` before each loop of literal constant trip count,
/// `for (short|int i = A; i < B; ++i)` with A, B integer literals, so that g++ unrolls it completely (stock's IQ
/// kernels have such loops without FOR_UNROLL; a GPU compiler unrolls them). Other loops are left alone.
fn unroll_constant_loops(text: &str) -> String {
    fn constant_header(h: &str) -> bool {
        // h is the text after "for (" up to the closing parenthesis
        let parts: Vec<&str> = h.split(';').map(str::trim).collect();
        let [init, cond, step] = parts.as_slice() else {
            return false;
        };
        let Some(decl) = init
            .strip_prefix("short ")
            .or_else(|| init.strip_prefix("int "))
        else {
            return false;
        };
        let Some((var, start)) = decl.split_once(" = ") else {
            return false;
        };
        let literal = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        let ident =
            |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        let Some((cvar, bound)) = cond.split_once(" < ") else {
            return false;
        };
        ident(var)
            && literal(start)
            && cvar == var
            && literal(bound)
            && (*step == format!("++{var}") || *step == format!("{var}++"))
    }
    let mut out = String::with_capacity(text.len() + 1024);
    let mut rest = text;
    while let Some(i) = rest.find("for (") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 5..];
        if after
            .find(')')
            .is_some_and(|close| constant_header(&after[..close]))
        {
            out.push_str("_Pragma(\"GCC unroll 128\") ");
        }
        out.push_str("for (");
        rest = after;
    }
    out.push_str(rest);
    out
}

/// `unroll_constant_loops` over the kernels that get counted only (stock's in the REPLACED regions, or ours in
/// the patched file); elsewhere g++ would unroll the whole file's loops for nothing, and slowly.
fn unroll_in_counted_kernels(mul_mv: &str) -> Result<String, String> {
    let mut regions: Vec<(usize, usize)> = Vec::new();
    let ours = [("// ---- ggml-lowbit (", "// ---- end of ggml-lowbit ----")];
    let counted: &[(&str, &str)] = if mul_mv.contains(ours[0].0) {
        &ours
    } else {
        &REPLACED
    };
    for (from, until) in counted {
        if mul_mv.contains(from) {
            regions.push(region(mul_mv, 0, from, until)?);
        }
    }
    if regions.is_empty() {
        return Err("none of the counted kernels found in mul_mv.metal".into());
    }
    regions.sort_unstable();
    let mut out = String::with_capacity(mul_mv.len() + 4096);
    let mut at = 0;
    for (start, end) in regions {
        out.push_str(&mul_mv[at..start]);
        out.push_str(&unroll_constant_loops(&mul_mv[start..end]));
        at = end;
    }
    out.push_str(&mul_mv[at..]);
    Ok(out)
}

fn sources(llama_src: &Path, variant: Variant) -> Result<Sources, String> {
    let kernels = llama_src.join("ggml/src/ggml-metal/kernels");
    let stock_text = std::fs::read_to_string(llama_src.join(MUL_MV_PATH))
        .map_err(|e| format!("{}: {e}", llama_src.join(MUL_MV_PATH).display()))?;
    let mul_mv = match variant {
        Variant::Stock => stock_text,
        Variant::Patched => apply_patch(&stock_text, &patch_path())?,
    };
    let mut files: Vec<(String, String)> = vec![("mul_mv.metal".into(), rewrite_for_cxx(&mul_mv)?)];
    for h in ["common.h", "dequantize.h"] {
        let t = std::fs::read_to_string(kernels.join(h)).map_err(|e| format!("{h}: {e}"))?;
        files.push((h.into(), rewrite_for_cxx(&t)?));
    }
    Ok(Sources {
        files,
        includes: vec![
            llama_src.join("ggml/src/ggml-metal"),
            llama_src.join("ggml/src"),
        ],
    })
}

/// Compiles `src/metal/emu/driver.cpp` over `sources` (written into `dir`) with `args`, into `output`.
fn compile_driver(
    compiler: &Path,
    args: &[String],
    dir: &Path,
    sources: &Sources,
    variant: Variant,
    output: &Path,
) -> Result<(), String> {
    for (name, text) in &sources.files {
        std::fs::write(dir.join(name), text)
            .map_err(|e| format!("{}: {e}", dir.join(name).display()))?;
    }
    run_compiler(
        Command::new(compiler)
            .args(args)
            .arg(format!("-I{}", dir.display()))
            .args(
                sources
                    .includes
                    .iter()
                    .map(|i| format!("-I{}", i.display())),
            )
            .arg("-DLOWBIT_MUL_MV_SOURCE=\"mul_mv.metal\"")
            .arg(format!(
                "-DLOWBIT_VARIANT_{}",
                variant.name().to_uppercase()
            ))
            .arg(repo().join("src/metal/emu/driver.cpp"))
            .arg("-o")
            .arg(output),
        &format!(
            "compiling the {} mul_mv.metal as C++ failed",
            variant.name()
        ),
    )
}

/// Builds (or finds in `target/metal-emu/`) the emulator for `variant` with `compiler` (a C++ compiler: the
/// tests take it from the `cc` crate) over the pinned tree at `llama_src`, and loads it. A failure is an error.
pub fn build(compiler: &Path, llama_src: &Path, variant: Variant) -> Result<Emulator, String> {
    let shim = repo().join("src/metal/emu");
    let sources = sources(llama_src, variant)?;
    let args = compile_args(&shim);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (name, text) in &sources.files {
        fnv1a(&mut h, name.as_bytes());
        fnv1a(&mut h, text.as_bytes());
    }
    for f in ["driver.cpp", "metal_stdlib", "emu_runtime.h"] {
        fnv1a(
            &mut h,
            &std::fs::read(shim.join(f)).map_err(|e| format!("{f}: {e}"))?,
        );
    }
    for a in &args {
        fnv1a(&mut h, a.as_bytes());
    }
    fnv1a(&mut h, compiler.as_os_str().as_encoded_bytes());
    let dir = repo()
        .join("target/metal-emu")
        .join(format!("{}-{h:016x}", variant.name()));
    let so = dir.join("libmul_mv_emu.so");
    if !so.is_file() {
        let tmp = dir.with_extension("tmp");
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
        compile_driver(
            compiler,
            &args,
            &tmp,
            &sources,
            variant,
            &tmp.join("libmul_mv_emu.so"),
        )?;
        // Builds of older sources of this variant are of no further use.
        if let Ok(entries) = std::fs::read_dir(dir.parent().unwrap()) {
            let prefix = format!("{}-", variant.name());
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with(&prefix) && !name.ends_with(".tmp") {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        std::fs::rename(&tmp, &dir).map_err(|e| e.to_string())?;
    }
    // SAFETY: the library is the driver we just built; loading runs no initialisers beyond C++ statics.
    let lib = unsafe { Library::new(&so) }.map_err(|e| format!("{}: {e}", so.display()))?;
    let emu = Emulator {
        variant,
        path: so,
        lib,
        busy: std::sync::Mutex::new(()),
    };
    let (mv, mv_id) = emu.arg_sizes()?;
    if mv != std::mem::size_of::<KargsMulMv>() || mv_id != std::mem::size_of::<KargsMulMvId>() {
        return Err(format!(
            "argument structs differ from the pinned ggml-metal-impl.h: C++ {mv}/{mv_id} bytes, Rust {}/{}",
            std::mem::size_of::<KargsMulMv>(),
            std::mem::size_of::<KargsMulMvId>()
        ));
    }
    Ok(emu)
}

impl Emulator {
    fn sym<T: Copy>(&self, name: &[u8]) -> Result<T, String> {
        // SAFETY: each name is one of the driver's extern "C" functions, with the type given at the call site.
        unsafe { self.lib.get::<T>(name) }
            .map(|s| *s)
            .map_err(|e| format!("{}: {e}", self.path.display()))
    }

    fn arg_sizes(&self) -> Result<(usize, usize), String> {
        let f: ArgSizesFn = self.sym(b"lowbit_emu_arg_sizes\0")?;
        let (mut a, mut b) = (0usize, 0usize);
        // SAFETY: writes two usizes through valid pointers.
        unsafe { f(&mut a, &mut b) };
        Ok((a, b))
    }

    /// What ggml-metal's host code picks for `kernel` in this build (from the compiled source's N_SG_* /
    /// N_R0_* and the host's threadgroup memory sizes), or None if the build has no such kernel.
    pub fn geometry(&self, kernel: &str) -> Result<Option<Geometry>, String> {
        let f: GeometryFn = self.sym(b"lowbit_emu_geometry\0")?;
        let name = CString::new(kernel).map_err(|e| e.to_string())?;
        let mut g = [0 as c_int; 4];
        // SAFETY: a NUL-terminated name and room for the four ints the driver writes.
        let found = unsafe { f(name.as_ptr(), g.as_mut_ptr()) };
        Ok((found != 0).then_some(Geometry {
            nsg: g[0] as usize,
            nr0: g[1] as usize,
            nr0_split: g[2] as usize,
            smem: g[3] as usize,
        }))
    }

    /// Dispatches `kernel` over `grid` threadgroups of (32, nsg, 1) threads, with the function constants
    /// FC_mul_mv_{nsg, nxpsg, ne12, r2, r3, split} set to `fc` first. The caller sizes the buffers for what the
    /// kernel reads and writes (stock's kernels read src0 rows past ne01: pad them).
    #[allow(clippy::too_many_arguments)]
    pub fn dispatch(
        &self,
        kernel: &str,
        fc: [i16; 6],
        args: &[u8],
        src0: &[u8],
        src1: &[u8],
        dst: &mut [u8],
        ids: Option<&[u8]>,
        grid: [u32; 3],
        nsg: usize,
        smem: usize,
    ) -> Result<(), String> {
        let set: SetConstantsFn = self.sym(b"lowbit_emu_set_mul_mv_constants\0")?;
        let f: DispatchFn = self.sym(b"lowbit_emu_dispatch\0")?;
        let _busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: reads six i16.
        unsafe { set(fc.as_ptr()) };
        let name = CString::new(kernel).map_err(|e| e.to_string())?;
        let mut err = vec![0u8; 1024];
        // SAFETY: every pointer is a live buffer of the length the kernel's arguments describe (the caller's
        // duty above); the error buffer is 1024 bytes and the driver writes at most that, NUL-terminated.
        let rc = unsafe {
            f(
                name.as_ptr(),
                args.as_ptr().cast(),
                src0.as_ptr(),
                src1.as_ptr(),
                dst.as_mut_ptr(),
                ids.map_or(std::ptr::null(), |i| i.as_ptr()),
                grid.as_ptr(),
                nsg as c_int,
                smem,
                err.as_mut_ptr().cast(),
                err.len(),
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(c_message(&err))
        }
    }

    /// The 32 weights of sub-block `ib` of an IQ block (`fmt`: 0 IQ2_XXS, 1 IQ2_XS, 2 IQ2_S, 3 IQ3_S) as the
    /// patched build's kernels decode them (their decoder, sign packing and scales).
    pub fn iq_dequant_sub(&self, fmt: i32, block: &[u8], ib: usize) -> Result<[f32; 32], String> {
        type SubFn = unsafe extern "C" fn(c_int, *const u8, c_int, *mut f32) -> c_int;
        let f: SubFn = self.sym(b"lowbit_emu_iq_dequant_sub\0")?;
        const SIZES: [usize; 4] = [66, 74, 82, 110];
        let size = *SIZES.get(fmt as usize).ok_or("no such IQ format")?;
        if block.len() != size || ib >= 8 {
            return Err(format!(
                "format {fmt}: a block is {size} bytes with 8 sub-blocks"
            ));
        }
        let mut out = [0.0f32; 32];
        // SAFETY: the block holds `size` bytes (checked), out 32 floats.
        let rc = unsafe { f(fmt, block.as_ptr(), ib as c_int, out.as_mut_ptr()) };
        if rc == 0 {
            Ok(out)
        } else {
            Err(format!("format {fmt} unknown to the emulator"))
        }
    }

    /// A helper of the patched build's kernels taking a byte and N activations (`lowbit_emu_<name>`: the Q2_0
    /// chain takes 4, the PTQ1_0 chain 5, a Q1_0 nibble 4).
    pub fn byte_helper<const N: usize>(
        &self,
        name: &str,
        b: u8,
        y: [f32; N],
    ) -> Result<f32, String> {
        type HelperFn = unsafe extern "C" fn(u8, *const f32) -> f32;
        let sym = format!("lowbit_emu_{name}\0");
        let f: HelperFn = self.sym(sym.as_bytes())?;
        // SAFETY: the named helper reads N floats (its C signature; the caller passes the N it takes).
        Ok(unsafe { f(b, y.as_ptr()) })
    }
}

/// Bytes of a `#[repr(C)]` argument struct.
pub fn bytes_of<T: KernelArgs>(v: &T) -> Vec<u8> {
    // SAFETY: T is one of the repr(C) argument structs above, integers with their padding as named fields, so
    // every byte is initialised.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
        .to_vec()
}

/// The argument structs, whose bytes are all initialised (no implicit padding).
pub trait KernelArgs: Copy {}
impl KernelArgs for KargsMulMv {}
impl KernelArgs for KargsMulMvId {}
const _: () = assert!(std::mem::size_of::<KargsMulMv>() == 112);
const _: () = assert!(std::mem::size_of::<KargsMulMvId>() == 120);

/// The emulator's self-test kernels (`src/metal/emu/selftest.cpp`), built with `compiler`.
pub struct SelfTest {
    lib: Library,
}

/// Builds the self-test library into `target/metal-emu/`.
pub fn build_selftest(compiler: &Path) -> Result<SelfTest, String> {
    let shim = repo().join("src/metal/emu");
    let dir = repo().join("target/metal-emu");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let so = dir.join(format!("libselftest-{}.so", std::process::id()));
    run_compiler(
        Command::new(compiler)
            .args(compile_args(&shim))
            .arg(shim.join("selftest.cpp"))
            .arg("-o")
            .arg(&so),
        "selftest.cpp",
    )?;
    // SAFETY: the library we just built; no initialisers beyond C++ statics.
    let lib = unsafe { Library::new(&so) }.map_err(|e| format!("{}: {e}", so.display()))?;
    let _ = std::fs::remove_file(&so);
    Ok(SelfTest { lib })
}

impl SelfTest {
    /// Runs self-test `which` on one threadgroup of `nsg` simdgroups: its outputs, or the emulator's error.
    pub fn run(&self, which: i32, nsg: usize) -> Result<Vec<f32>, String> {
        type RunFn = unsafe extern "C" fn(c_int, c_int, *mut f32, *mut c_char, usize) -> c_int;
        // SAFETY: the self-test library's entry point, with this type.
        let f: RunFn = *unsafe { self.lib.get::<RunFn>(b"lowbit_emu_selftest\0") }
            .map_err(|e| e.to_string())?;
        let mut out = vec![f32::NAN; 4 * 32 * nsg];
        let mut err = vec![0u8; 1024];
        // SAFETY: out holds the 4·32·nsg floats the kernels write; err 1024 bytes.
        let rc = unsafe {
            f(
                which,
                nsg as c_int,
                out.as_mut_ptr(),
                err.as_mut_ptr().cast(),
                err.len(),
            )
        };
        if rc == 0 {
            Ok(out)
        } else {
            Err(c_message(&err))
        }
    }
}

/// How kernels are compiled for counting: `-O2`, no vectorization (a GPU lane is scalar), and everything
/// inlined, as a GPU compiler does (GCC's default limits would leave stock's per-block helpers as calls).
fn counting_args() -> Vec<String> {
    [
        "-O2",
        "-fno-tree-vectorize",
        "-fno-tree-slp-vectorize",
        "--param=max-inline-insns-single=100000",
        "--param=max-inline-insns-auto=100000",
        "--param=large-function-growth=100000",
        "--param=large-function-insns=1000000",
        "--param=inline-unit-growth=100000",
        "--param=early-inlining-insns=100000",
        // loops of constant trip count unrolled completely (with `unroll_constant_loops`), as a GPU compiler does
        "--param=max-completely-peeled-insns=100000",
        "--param=max-completely-peel-times=64",
    ]
    .map(String::from)
    .to_vec()
}

/// GCC's optimized GIMPLE of `variant`'s `mul_mv.metal` (through the driver), the input of the op counts
/// (`opcount`): `-O2` without vectorization (a GPU lane is scalar) and without FMA contraction, everything
/// inlined and every loop of constant trip count unrolled. `compiler` must be g++.
pub fn optimized_gimple(
    compiler: &Path,
    llama_src: &Path,
    variant: Variant,
) -> Result<String, String> {
    let shim = repo().join("src/metal/emu");
    let mut sources = sources(llama_src, variant)?;
    let mul_mv = &mut sources.files[0].1;
    *mul_mv = unroll_in_counted_kernels(mul_mv)?;
    let dir = tempdir("metal-gimple")?;
    let dump = dir.join("optimized.gimple");
    let mut args = common_args(&shim);
    args.extend(counting_args());
    args.push("-c".into());
    args.push(format!("-fdump-tree-optimized-blocks={}", dump.display()));
    compile_driver(
        compiler,
        &args,
        &dir,
        &sources,
        variant,
        &dir.join("driver.o"),
    )?;
    read_dump(&dump, &dir)
}

/// GIMPLE of `src/metal/emu/opcount_probe.cpp`, compiled as `optimized_gimple` compiles the kernels: the loops of
/// known work the op counter is tested on.
pub fn probe_gimple(compiler: &Path) -> Result<String, String> {
    let shim = repo().join("src/metal/emu");
    let dir = tempdir("metal-probe")?;
    let dump = dir.join("probe.gimple");
    run_compiler(
        Command::new(compiler)
            .args(common_args(&shim))
            .args(counting_args())
            .arg("-c")
            .arg(format!("-fdump-tree-optimized-blocks={}", dump.display()))
            .arg(shim.join("opcount_probe.cpp"))
            .arg("-o")
            .arg(dir.join("probe.o")),
        "opcount_probe.cpp",
    )?;
    read_dump(&dump, &dir)
}
