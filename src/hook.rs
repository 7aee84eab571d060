//! The preloaded `mul_mat` hook: whole matrix products of our formats through the tile kernels.
//!
//! Every ggml-cpu since late 2024 offers each node of a graph, on every thread, to
//! `ggml_cpu_extra_compute_forward(params, node)` through the PLT before its op switch; `true` means the node is
//! done (`ggml-versions.md` §3). Defining that symbol in a preloaded library takes over whole MUL_MAT products:
//! each of ggml's threads quantizes its share of src1 into `params->wdata` (stock's own split and layout), waits
//! at `ggml_barrier`, then computes its share of the rows with the tile kernels; every other node goes to the real
//! function (`dlsym(RTLD_NEXT, …)`, or the `GGML_BACKEND_DL` library's own), which serves ggml's extra buffer
//! types (repacked and AMX weights).
//!
//! `struct ggml_compute_params` and `struct ggml_tensor` are internal to ggml, so the hook serves only a ggml
//! whose version lies in the range its mirrors cover and that passes the layout self-test (`layout.rs`), which
//! also finds the op number of MUL_MAT; otherwise, and under `GGML_LOWBIT_MULMAT=0`, `GGML_LOWBIT_DISABLE` or
//! `GGML_LOWBIT_VERIFY` (which compare per call), it stays out of the way and the vec_dot exports serve the
//! products as before. Threads take their rows in chunks from ggml's own counter, as stock's MUL_MAT does
//! (`GGML_LOWBIT_FORMS=chunks=0`, or a ggml without the counter's functions: a fixed share per thread).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use crate::dispatch::{env_flag, FormOverrides, Kernels};
use crate::formats::pq2_0::BlockPQ2_0;
use crate::formats::ptq1_0::BlockPTQ1_0;
use crate::formats::q1_0::BlockQ1_0;
use crate::formats::q2_0::BlockQ2_0;
use crate::formats::q8_0::BlockQ8_0;
use crate::formats::q8_k::BlockQ8K;
use crate::formats::tq1_0::BlockTQ1_0;
use crate::formats::tq2_0::BlockTQ2_0;
use crate::formats::{blocks, RawBlock};
use crate::interpose::{
    config, next_symbol, Config, Mode, VEC_DOT_PQ2_0, VEC_DOT_PTQ1_0, VEC_DOT_Q1_0, VEC_DOT_Q2_0,
    VEC_DOT_TQ1_0, VEC_DOT_TQ2_0,
};
use crate::model::{
    GGML_TYPE_F32, GGML_TYPE_PQ2_0, GGML_TYPE_PTQ1_0, GGML_TYPE_Q1_0, GGML_TYPE_Q2_0,
    GGML_TYPE_TQ1_0, GGML_TYPE_TQ2_0,
};
use crate::tiles::Rows;

mod layout;

/// Whether a tensor's `type` field is the ggml type `t` (`crate::model`'s ids; the fork's PQ2_0 = 142 and
/// PTQ1_0 = 143 exist only in a ggml that has them, such as the stand-in fork of `ggml-patch/fork-types.patch`).
fn is_type(type_: c_int, t: u32) -> bool {
    u32::try_from(type_) == Ok(t)
}

/// A weight format the hook serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Weights {
    Q2_0,
    Q1_0,
    Pq2_0,
    Ptq1_0,
    Tq2_0,
    Tq1_0,
}

impl Weights {
    /// The format of a ggml type, if the hook serves it with these kernels: Q1_0, TQ2_0 and TQ1_0 only where
    /// our kernels beat stock's (`Kernels::serves_q1_0_over_stock`, `serves_tq2_0_tiles_over_stock`,
    /// `serves_tq1_0_over_stock`) or under `GGML_LOWBIT_SERVE_ALL=1`; the fork formats always (the fork runs
    /// them through its generic C); and each only where its stock vec_dot gives our kernel's bits
    /// (`VecDotSymbol::stock_agrees`), since the tiles give every element those bits.
    fn of(type_: c_int, c: &Config) -> Option<Weights> {
        let (k, all) = (&c.kernels, c.serve_all);
        let w = match u32::try_from(type_).ok()? {
            GGML_TYPE_Q2_0 => Weights::Q2_0,
            GGML_TYPE_Q1_0 if k.serves_q1_0_over_stock() || all => Weights::Q1_0,
            GGML_TYPE_PQ2_0 => Weights::Pq2_0,
            GGML_TYPE_PTQ1_0 => Weights::Ptq1_0,
            GGML_TYPE_TQ2_0 if k.serves_tq2_0_tiles_over_stock() || all => Weights::Tq2_0,
            GGML_TYPE_TQ1_0 if k.serves_tq1_0_over_stock() || all => Weights::Tq1_0,
            _ => return None,
        };
        w.stock_agrees(c).then_some(w)
    }

    /// Whether the stock vec_dot of this format (if any) gives our kernel's bits.
    fn stock_agrees(self, c: &Config) -> bool {
        match self {
            Weights::Q2_0 => VEC_DOT_Q2_0.stock_agrees(c),
            Weights::Q1_0 => VEC_DOT_Q1_0.stock_agrees(c),
            Weights::Pq2_0 => VEC_DOT_PQ2_0.stock_agrees(c),
            Weights::Ptq1_0 => VEC_DOT_PTQ1_0.stock_agrees(c),
            Weights::Tq2_0 => VEC_DOT_TQ2_0.stock_agrees(c),
            Weights::Tq1_0 => VEC_DOT_TQ1_0.stock_agrees(c),
        }
    }

    /// Weights per block.
    fn qk(self) -> usize {
        match self {
            Weights::Q2_0 => 64,
            Weights::Q1_0 | Weights::Pq2_0 | Weights::Ptq1_0 => 128,
            Weights::Tq2_0 | Weights::Tq1_0 => 256,
        }
    }

    /// The activation blocks (ggml's `vec_dot_type`) src1 is quantized into: weights and bytes per block.
    fn act_block(self) -> (usize, usize) {
        match self {
            Weights::Tq2_0 | Weights::Tq1_0 => (256, std::mem::size_of::<BlockQ8K>()),
            _ => (32, std::mem::size_of::<BlockQ8_0>()),
        }
    }

    /// Bytes of one quantized src1 row of `ne10` values (`ggml_row_size(vec_dot_type, ne10)`).
    fn act_row_size(self, ne10: usize) -> usize {
        let (qk, bytes) = self.act_block();
        ne10 / qk * bytes
    }

    /// The stock vec_dot of this format behind the library, if there is one.
    fn stock_vec_dot(self, next: &crate::interpose::Next) -> Option<crate::stock::VecDotFn> {
        match self {
            Weights::Q2_0 => next.vec_dot_q2_0_q8_0,
            Weights::Q1_0 => next.vec_dot_q1_0_q8_0,
            Weights::Pq2_0 => next.vec_dot_pq2_0_q8_0,
            Weights::Ptq1_0 => next.vec_dot_ptq1_0_q8_0,
            Weights::Tq2_0 => next.vec_dot_tq2_0_q8_k,
            Weights::Tq1_0 => next.vec_dot_tq1_0_q8_k,
        }
    }

    /// Bytes per block (`ggml_type_size`).
    fn block_bytes(self) -> usize {
        match self {
            Weights::Q2_0 => std::mem::size_of::<BlockQ2_0>(),
            Weights::Q1_0 => std::mem::size_of::<BlockQ1_0>(),
            Weights::Pq2_0 => std::mem::size_of::<BlockPQ2_0>(),
            Weights::Ptq1_0 => std::mem::size_of::<BlockPTQ1_0>(),
            Weights::Tq2_0 => std::mem::size_of::<BlockTQ2_0>(),
            Weights::Tq1_0 => std::mem::size_of::<BlockTQ1_0>(),
        }
    }

    /// `rows` rows of `nb` blocks, `stride` blocks apart from `w`, against the quantized columns `y` (rows of
    /// `act_nb` activation blocks back to back), through the tile kernels.
    ///
    /// # Safety
    /// `w` addresses `(rows − 1)·stride + nb` blocks of this format; `rows ≥ 1`.
    unsafe fn mul_mat(
        self,
        kernels: &Kernels,
        w: *const u8,
        (nb, stride, rows): (usize, usize, usize),
        (y, act_nb): (&[u8], usize),
        emit: crate::tiles::Emit<'_>,
    ) {
        fn columns<A: RawBlock>(y: &[u8], act_nb: usize) -> Rows<'_, A> {
            Rows::packed(blocks(y), act_nb)
        }
        /// The rows as blocks of type `B`.
        ///
        /// # Safety
        /// `(rows − 1)·stride + nb` blocks of `B` at `w`.
        unsafe fn rows_of<'a, B>(
            w: *const u8,
            (nb, stride, rows): (usize, usize, usize),
        ) -> Rows<'a, B> {
            let len = (rows - 1) * stride + nb;
            // SAFETY: the caller's contract; every block type is plain bytes with alignment 1.
            let w = unsafe { std::slice::from_raw_parts(w as *const B, len) };
            Rows::new(w, nb, stride, rows).expect("sized above")
        }
        let shape = (nb, stride, rows);
        // A NaN element comes again from stock's own vec_dot on its pair (the tables give the models' NaN, which
        // is the pinned builds' and ggml ≥ 0.27.0's; stock's own is right whatever compiled it).
        let stock = self.stock_vec_dot(&crate::interpose::config().next);
        let (bytes, act_bytes) = (self.block_bytes(), self.act_block().1);
        let mut stock_nan = |r: usize, c: usize, v: f32| {
            let v = match stock {
                Some(dot) if v.is_nan() => {
                    let mut s = 0f32;
                    // SAFETY: row `r` of the weights (`nb` blocks at `w + r·stride`, inside what the caller
                    // passed) against column `c` of `y` (`act_nb` blocks), one output: stock's contract.
                    unsafe {
                        let row = w.add(r * stride * bytes);
                        let col = y[c * act_nb * act_bytes..(c + 1) * act_nb * act_bytes].as_ptr();
                        dot(
                            (nb * self.qk()) as c_int,
                            &mut s,
                            0,
                            row.cast(),
                            0,
                            col.cast(),
                            0,
                            1,
                        );
                    }
                    s
                }
                _ => v,
            };
            emit(r, c, v)
        };
        let emit: crate::tiles::Emit<'_> = &mut stock_nan;
        let y8 = || columns::<BlockQ8_0>(y, act_nb);
        // SAFETY (each arm): the caller's contract, for this format's block type.
        match self {
            Weights::Q2_0 => {
                kernels.mul_mat_q2_0_q8_0(unsafe { rows_of::<BlockQ2_0>(w, shape) }, y8(), emit)
            }
            Weights::Q1_0 => {
                kernels.mul_mat_q1_0_q8_0(unsafe { rows_of::<BlockQ1_0>(w, shape) }, y8(), emit)
            }
            Weights::Pq2_0 => {
                kernels.mul_mat_pq2_0_q8_0(unsafe { rows_of::<BlockPQ2_0>(w, shape) }, y8(), emit)
            }
            Weights::Ptq1_0 => {
                kernels.mul_mat_ptq1_0_q8_0(unsafe { rows_of::<BlockPTQ1_0>(w, shape) }, y8(), emit)
            }
            Weights::Tq2_0 => kernels.mul_mat_tq2_0_q8_k(
                unsafe { rows_of::<BlockTQ2_0>(w, shape) },
                columns::<BlockQ8K>(y, act_nb),
                emit,
            ),
            Weights::Tq1_0 => kernels.mul_mat_tq1_0_q8_k(
                unsafe { rows_of::<BlockTQ1_0>(w, shape) },
                columns::<BlockQ8K>(y, act_nb),
                emit,
            ),
        }
    }
}

/// `struct ggml_compute_params` of ggml-cpu-impl.h (pinned tree).
#[repr(C)]
pub struct ComputeParams {
    pub ith: c_int,
    pub nth: c_int,
    pub wsize: usize,
    pub wdata: *mut c_void,
    pub threadpool: *mut c_void,
    /// `bool` in C; read as a byte so that no value of it is undefined behaviour here.
    pub use_ref: u8,
}

/// `struct ggml_tensor` of ggml.h (pinned tree; `GGML_MAX_DIMS` 4, `GGML_MAX_OP_PARAMS` 64,
/// `GGML_MAX_SRC` 10, `GGML_MAX_NAME` 64). A test checks size and offsets against the header.
#[repr(C)]
pub struct GgmlTensor {
    pub type_: c_int,
    pub buffer: *mut c_void,
    pub ne: [i64; 4],
    pub nb: [usize; 4],
    pub op: c_int,
    pub op_params: [i32; 16],
    pub flags: i32,
    pub src: [*mut GgmlTensor; 10],
    pub view_src: *mut GgmlTensor,
    pub view_offs: usize,
    pub data: *mut c_void,
    pub name: [c_char; 64],
    pub extra: *mut c_void,
    pub padding: [c_char; 8],
}
const _: () = assert!(std::mem::size_of::<GgmlTensor>() == 336);

/// `ggml_cpu_extra_compute_forward(params, node)`: ggml-cpu offers every node of every graph to it, on every
/// thread, before its op switch; `true` means the node is done.
pub type ExtraComputeForwardFn =
    unsafe extern "C" fn(*const ComputeParams, *mut GgmlTensor) -> bool;
/// `ggml_compute_forward_mul_mat_id_tiled(params, dst, cur_a, cne1, expert_rows, scratch)`: called by every
/// thread for each expert of a MUL_MAT_ID after src1 is quantized; `expert_rows` holds `cne1` pairs
/// `(slot, token)` of int32.
pub type MulMatIdTiledFn = unsafe extern "C" fn(
    *const ComputeParams,
    *mut GgmlTensor,
    i64,
    i64,
    *const i32,
    *mut c_char,
) -> bool;
type BarrierFn = unsafe extern "C" fn(*mut c_void);
/// `ggml_threadpool_chunk_set(tp, value)` and `ggml_threadpool_chunk_add(tp, value)` (returns the value
/// before the add): the threadpool's shared chunk counter, which stock's MUL_MAT hands out its chunks with.
type ChunkSetFn = unsafe extern "C" fn(*mut c_void, c_int);
type ChunkAddFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
type VersionFn = unsafe extern "C" fn() -> *const c_char;
type BufferIsHostFn = unsafe extern "C" fn(*mut c_void) -> bool;
type TypeNameFn = unsafe extern "C" fn(c_int) -> *const c_char;

/// The oldest ggml whose `ggml_compute_params` ends with `use_ref` (0.9.7) and the newest major.minor the hook
/// has run over (1.1): the mirrors were checked against the sources up to 1.0.0 (`ggml_tensor` the same from
/// 0.9.4, `ggml_compute_params` grown only by `use_ref`), and Debian's libggml1 1.1.1 passes the layout
/// self-test with every product bit for bit (`tests/prebuilt.rs`).
const OLDEST_VERSION: (u32, u32, u32) = (0, 9, 7);
const NEWEST_MAJOR_MINOR: (u32, u32) = (1, 1);
/// The ggml whose `ggml_compute_forward_mul_mat_id_tiled` signature the expert entry mirrors (the pinned tree's).
const EXPERT_ENTRY_VERSION: &str = "0.25.3";

/// `major.minor.patch` at the start of a version string (`"0.25.3"`, `"1.0.0-rc1"`).
fn parse_version(v: &str) -> Option<(u32, u32, u32)> {
    let core = v.split(['-', '+', ' ']).next()?;
    let mut parts = core.split('.').map(|p| p.parse::<u32>().ok());
    let version = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(version)
}

/// Whether the hook's mirrors cover this ggml version.
fn version_in_range(v: &str) -> bool {
    parse_version(v).is_some_and(|(major, minor, patch)| {
        (major, minor, patch) >= OLDEST_VERSION && (major, minor) <= NEWEST_MAJOR_MINOR
    })
}

/// The ggml types the hook serves, with the name `ggml_type_name` gives each and the stock `vec_dot` whose
/// presence shows the type exists in the build (only then is its number inside ggml's type table).
const TYPE_NAMES: [(u32, &str, &CStr); 6] = [
    (GGML_TYPE_Q2_0, "q2_0", c"ggml_vec_dot_q2_0_q8_0"),
    (GGML_TYPE_Q1_0, "q1_0", c"ggml_vec_dot_q1_0_q8_0"),
    (GGML_TYPE_TQ2_0, "tq2_0", c"ggml_vec_dot_tq2_0_q8_K"),
    (GGML_TYPE_TQ1_0, "tq1_0", c"ggml_vec_dot_tq1_0_q8_K"),
    (GGML_TYPE_PQ2_0, "pq2_0", c"ggml_vec_dot_pq2_0_q8_0"),
    (GGML_TYPE_PTQ1_0, "ptq1_0", c"ggml_vec_dot_ptq1_0_q8_0"),
];

/// Type numbers have not moved in any ggml the hook knows; a build where one has is left alone.
fn check_type_numbers() -> Result<(), String> {
    let name_of = next_symbol::<TypeNameFn>(c"ggml_type_name").ok_or("ggml_type_name not found")?;
    for (t, name, vec_dot) in TYPE_NAMES {
        if next_symbol::<*mut c_void>(vec_dot).is_none() {
            continue;
        }
        // SAFETY: the type exists in this build (its vec_dot does), so its number indexes ggml's table; the
        // name is a static string or null.
        let found = unsafe {
            let p = name_of(t as c_int);
            (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
        };
        if found.as_deref() != Some(name) {
            return Err(format!("ggml type {t} is {found:?}, not {name}"));
        }
    }
    Ok(())
}

/// The formats whose products the hook takes in this build, for the log ("no" when none).
fn served_types(c: &Config) -> String {
    let names: Vec<String> = TYPE_NAMES
        .iter()
        .filter(|&&(t, _, vec_dot)| {
            Weights::of(t as c_int, c).is_some()
                && next_symbol::<*mut c_void>(vec_dot).is_some()
                && (t != GGML_TYPE_Q2_0 || c.kernels.serves_q2_0_tiles_over_stock() || c.serve_all)
        })
        .map(|&(_, name, _)| name.to_uppercase())
        .collect();
    if names.is_empty() {
        "no".to_string()
    } else {
        names.join(", ")
    }
}

struct Hook {
    /// ggml-cpu's own `ggml_cpu_extra_compute_forward` (its extra buffer types: repacked and AMX weights).
    next_extra: Option<ExtraComputeForwardFn>,
    next_id: Option<MulMatIdTiledFn>,
    barrier: Option<BarrierFn>,
    /// The chunk counter, when ggml exports it; otherwise each thread takes a fixed share of the rows.
    chunks: Option<(ChunkSetFn, ChunkAddFn)>,
    buffer_is_host: Option<BufferIsHostFn>,
    /// `GGML_OP_MUL_MAT` in this ggml, found by the layout self-test.
    mul_mat_op: c_int,
    /// Whether the MUL_MAT_ID expert entry's signature is the one mirrored (`EXPERT_ENTRY_VERSION`).
    experts: bool,
    /// Why the hook stays out, or `None` when it serves.
    off: Option<String>,
}

fn hook() -> &'static Hook {
    static HOOK: OnceLock<Hook> = OnceLock::new();
    HOOK.get_or_init(|| {
        let c = config();
        let next_extra = next_symbol::<ExtraComputeForwardFn>(c"ggml_cpu_extra_compute_forward");
        let next_id = next_symbol::<MulMatIdTiledFn>(c"ggml_compute_forward_mul_mat_id_tiled");
        let barrier = next_symbol::<BarrierFn>(c"ggml_barrier");
        let chunks_wanted = FormOverrides::from_env().get("chunks").unwrap_or(true);
        let chunks = next_symbol::<ChunkSetFn>(c"ggml_threadpool_chunk_set")
            .zip(next_symbol::<ChunkAddFn>(c"ggml_threadpool_chunk_add"))
            .filter(|_| chunks_wanted);
        let buffer_is_host = next_symbol::<BufferIsHostFn>(c"ggml_backend_buffer_is_host");
        let version = next_symbol::<VersionFn>(c"ggml_version").map(|f| {
            // SAFETY: ggml_version returns a static NUL-terminated string.
            unsafe { CStr::from_ptr(f()).to_string_lossy().into_owned() }
        });
        let wanted = env_flag("GGML_LOWBIT_MULMAT").unwrap_or(true);
        let mut mul_mat_op = -1;
        let off = if !wanted {
            Some("GGML_LOWBIT_MULMAT=0".to_string())
        } else if c.mode != Mode::Serve {
            Some(format!(
                "mode {:?} compares or passes each vec_dot call",
                c.mode
            ))
        } else if barrier.is_none() {
            Some("no ggml-cpu behind the library".to_string())
        } else if buffer_is_host.is_none() {
            Some("ggml_backend_buffer_is_host not found".to_string())
        } else {
            match &version {
                Some(v) if version_in_range(v) => check_type_numbers()
                    .and_then(|()| layout::run())
                    .map(|op| mul_mat_op = op)
                    .err()
                    .map(|why| format!("layout self-test: {why}")),
                Some(v) => Some(format!("ggml {v} is not a version the hook knows")),
                None => Some("ggml_version not found".to_string()),
            }
        };
        let experts = version.as_deref() == Some(EXPERT_ENTRY_VERSION);
        if c.log {
            match &off {
                None => crate::process::log_line(&format!(
                    "mul_mat hook on (ggml {}): {} products through the tile kernels, {}{}",
                    version.as_deref().unwrap_or("?"),
                    served_types(c),
                    match (&chunks, chunks_wanted) {
                        (Some(_), _) => "rows in chunks from ggml's counter",
                        (None, false) =>
                            "a fixed share of the rows per thread (GGML_LOWBIT_FORMS=chunks=0)",
                        (None, true) => {
                            "a fixed share of the rows per thread (no ggml_threadpool_chunk_add)"
                        }
                    },
                    if experts {
                        ""
                    } else {
                        "; MUL_MAT_ID experts left to ggml (an expert entry the hook does not mirror)"
                    }
                )),
                Some(why) => crate::process::log_line(&format!(
                    "mul_mat hook off ({why}): vec_dot interposition only"
                )),
            }
        }
        Hook {
            next_extra,
            next_id,
            barrier,
            chunks,
            buffer_is_host,
            mul_mat_op,
            experts,
            off,
        }
    })
}

/// The format of `src0` when it is a weight tensor the tile kernels take against F32 `src1`, writing F32 `dst`.
fn weight_operands(src0: &GgmlTensor, src1: &GgmlTensor, dst: &GgmlTensor) -> Option<Weights> {
    let w = Weights::of(src0.type_, config())?;
    let (qk, bytes) = (w.qk() as i64, w.block_bytes());
    let ok = is_type(src1.type_, GGML_TYPE_F32)
        && is_type(dst.type_, GGML_TYPE_F32)
        && src0.ne[0] > 0
        && src0.ne[0] % qk == 0
        && src1.ne[0] == src0.ne[0]
        && src0.nb[0] == bytes
        && src0.nb[1].is_multiple_of(bytes)
        && src0.nb[1] >= (src0.ne[0] / qk) as usize * bytes
        && src0.nb[2].is_multiple_of(bytes)
        && src0.nb[3].is_multiple_of(bytes)
        && src1.nb[0] == 4
        && dst.nb[0] == 4
        && dst.nb[1].is_multiple_of(4)
        && dst.ne[0] == src0.ne[1];
    ok.then_some(w)
}

/// Whether the weights lie in plain host memory: no buffer (a context's own memory) or a host buffer, and no
/// `extra` (repacked weights of ggml's extra buffer types, such as AMX's, are neither: ggml-cpu's own
/// function computes them).
fn plain_host_weights(src0: &GgmlTensor) -> bool {
    let host = src0.buffer.is_null()
        || hook().buffer_is_host.is_some_and(|is_host| {
            // SAFETY: a tensor's buffer, as ggml keeps it; ggml_backend_buffer_is_host only reads it.
            unsafe { is_host(src0.buffer) }
        });
    host && src0.extra.is_null()
}

/// Whether ggml's thread parameters look like the pinned tree's.
fn sane_params(p: &ComputeParams) -> bool {
    p.nth >= 1 && p.ith >= 0 && p.ith < p.nth && !p.wdata.is_null() && !p.threadpool.is_null()
}

/// What the hook computes: a product of one of our weight formats × F32 with the layouts the tile kernels take.
struct Product {
    weights: Weights,
    src0: *const GgmlTensor,
    src1: *const GgmlTensor,
    /// Bytes of one quantized src1 row (q8_0 or q8_K).
    row_size: usize,
}

/// `Some` when `dst` is a product the hook serves; checks everything the kernels and the work buffer need.
///
/// # Safety
/// `dst` and its sources are valid tensors (ggml's contract for the op).
unsafe fn product(p: &ComputeParams, dst: &GgmlTensor) -> Option<Product> {
    // SAFETY: ggml's contract: a MUL_MAT's two sources are valid tensors.
    let (src0, src1) = unsafe { (dst.src[0].as_ref()?, dst.src[1].as_ref()?) };
    let weights = weight_operands(src0, src1, dst)?;
    let c = config();
    if weights == Weights::Q2_0 && !(c.kernels.serves_q2_0_tiles_over_stock() || c.serve_all) {
        return None;
    }
    let ok = plain_host_weights(src0)
        && (1..4).all(|i| dst.ne[i] == src1.ne[i])
        && (2..4).all(|i| src0.ne[i] > 0 && src1.ne[i] % src0.ne[i] == 0)
        && sane_params(p);
    if !ok {
        return None;
    }
    let row_size = weights.act_row_size(src1.ne[0] as usize);
    let needed = row_size * (src1.ne[1] * src1.ne[2] * src1.ne[3]) as usize;
    (p.wsize >= needed).then_some(Product {
        weights,
        src0,
        src1,
        row_size,
    })
}

/// The preloaded hook: whole products of our formats (see the module documentation); every other node, and
/// every node while the hook is off, goes to ggml-cpu's own function.
///
/// # Safety
/// ggml's contract for `ggml_cpu_extra_compute_forward`: `params` and `node` are the ones ggml-cpu computes.
pub unsafe fn extra_compute_forward(params: *const ComputeParams, node: *mut GgmlTensor) -> bool {
    // SAFETY: the caller's contract.
    if unsafe { layout::is_probe(params, node) } {
        return false;
    }
    let h = hook();
    // SAFETY: the caller's contract: `node` is a valid tensor; `op` is read only once the layout test passed.
    let is_mul_mat = h.off.is_none() && unsafe { (*node).op } == h.mul_mat_op;
    // SAFETY: the caller's contract, passed on.
    if is_mul_mat && unsafe { serve(params, node) } {
        return true;
    }
    match h.next_extra {
        // SAFETY: the real function, with the caller's own arguments.
        Some(next) => unsafe { next(params, node) },
        None => false,
    }
}

/// The patched build's entry (`ggml-patch/cpu.patch` calls it at the start of every MUL_MAT): `true` when the
/// product was computed here, `false` to let ggml go on.
///
/// # Safety
/// As `extra_compute_forward`, for a MUL_MAT node.
pub unsafe fn compute_forward_mul_mat(params: *const ComputeParams, dst: *mut GgmlTensor) -> bool {
    // SAFETY: the caller's contract, passed on.
    unsafe { serve(params, dst) }
}

/// Computes the product when the hook is on and `dst` is one it takes; `false` otherwise (nothing written).
///
/// # Safety
/// As `extra_compute_forward`, for a MUL_MAT node.
unsafe fn serve(params: *const ComputeParams, dst: *mut GgmlTensor) -> bool {
    // SAFETY: the caller's contract. The self-test's own product (a patched build reaches here with it) is
    // ggml's to compute while the hook is being set up.
    if unsafe { layout::is_probe(params, dst) } {
        return false;
    }
    let h = hook();
    if h.off.is_some() {
        return false;
    }
    // SAFETY: ggml passes valid params and dst.
    let (p, d) = unsafe { (&*params, &*dst) };
    if p.use_ref != 0 {
        return false;
    }
    // SAFETY: as above.
    let Some(prod) = (unsafe { product(p, d) }) else {
        return false;
    };
    let barrier = h.barrier.expect("checked when the hook was set up");
    // SAFETY: `product` checked the shapes, strides and the work buffer's size; every thread of the op runs
    // this same path (the decision depends only on the tensors), so all reach the barrier.
    unsafe {
        // As stock's MUL_MAT: thread `i` starts on chunk `i`, so the first chunk left to hand out is `nth`; set
        // before the barrier, which every thread passes before taking a chunk (and ggml's barrier between
        // nodes keeps the previous op's threads off the counter).
        if let (0, Some((set, _))) = (p.ith, h.chunks) {
            set(p.threadpool, p.nth);
        }
        quantize_share(p, &prod);
        barrier(p.threadpool);
        compute_share(p, &prod, d, h.chunks.map(|(_, add)| add));
    }
    if p.ith == 0 {
        crate::interpose::count_served_product();
    }
    true
}

/// This thread's share of src1 quantized into the work buffer: stock's split (a block range of every row per
/// thread) and layout (rows of `row_size` bytes, planes back to back).
///
/// # Safety
/// `product` accepted the op.
unsafe fn quantize_share(p: &ComputeParams, prod: &Product) {
    let kernels = crate::interpose::active();
    // SAFETY: `product` checked that src1 is a valid F32 tensor.
    let src1 = unsafe { &*prod.src1 };
    let (qk, bytes) = prod.weights.act_block();
    let blocks = src1.ne[0] as usize / qk;
    let (ith, nth) = (p.ith as usize, p.nth as usize);
    let (b0, b1) = (ith * blocks / nth, (ith + 1) * blocks / nth);
    if b0 == b1 {
        return;
    }
    let mut out = p.wdata as *mut u8;
    for i13 in 0..src1.ne[3] as usize {
        for i12 in 0..src1.ne[2] as usize {
            for i11 in 0..src1.ne[1] as usize {
                // SAFETY: the row lies inside src1 (strides from the tensor); `out` walks the work buffer,
                // which `product` checked holds every row's q8_0 bytes; each thread writes its own blocks.
                unsafe {
                    let row = (src1.data as *const u8)
                        .add(i11 * src1.nb[1] + i12 * src1.nb[2] + i13 * src1.nb[3])
                        as *const f32;
                    let x = std::slice::from_raw_parts(row.add(qk * b0), qk * (b1 - b0));
                    let y = std::slice::from_raw_parts_mut(out.add(bytes * b0), bytes * (b1 - b0));
                    match prod.weights {
                        Weights::Tq2_0 | Weights::Tq1_0 => {
                            kernels.quantize_row_q8_k(x, crate::formats::blocks_mut(y))
                        }
                        _ => kernels.quantize_row_q8_0(x, crate::formats::blocks_mut(y)),
                    }
                    out = out.add(prod.row_size);
                }
            }
        }
    }
}

/// Rows per thread (and per chunk) are whole multiples of this, so the tile kernel's four-row steps rarely split.
const ROW_ALIGN: usize = 16;

/// This thread's rows `r0..r1` of `rows`: `ceil(rows / nth)` rounded up to `ROW_ALIGN` per thread.
fn thread_rows(p: &ComputeParams, rows: usize) -> (usize, usize) {
    let (ith, nth) = (p.ith as usize, p.nth as usize);
    let per_thread = rows.div_ceil(nth).div_ceil(ROW_ALIGN) * ROW_ALIGN;
    (
        (ith * per_thread).min(rows),
        ((ith + 1) * per_thread).min(rows),
    )
}

/// Chunks handed out per thread: a thread slowed down (a busy sibling core, a descheduled vCPU) leaves its
/// later chunks to the others instead of holding them all at the next barrier.
const CHUNKS_PER_THREAD: usize = 4;
/// Fewest rows per chunk where the rows are enough to go round: every chunk prepares its activation columns
/// again (a fraction of one row's work each since the preparation is vectorized; before, about three rows').
const MIN_CHUNK_ROWS: usize = 64;
/// Columns per chunk are whole multiples of this (the prefill kernels' column octets).
const COL_ALIGN: usize = 8;
/// Fewest columns per chunk when the columns are cut: each column chunk reads its rows' weights again.
const MIN_CHUNK_COLS: usize = 64;

/// How a product's `rows × cols` elements (of every plane) are cut into chunks for the threads' counter:
/// `rows_per × cols_per` each, chunk `i` at row chunk `i % row_chunks`, column chunk `i / row_chunks`.
///
/// Rows first, as stock's MUL_MAT (a chunk reads its weights once for all its columns): up to
/// `CHUNKS_PER_THREAD` per thread, at least `MIN_CHUNK_ROWS` rows each. Where the rows alone give fewer chunks
/// than that (a 2048-row product is 32 chunks of 64 rows: enough for two threads, half of 64), many columns
/// (prefill) are cut too, into chunks of `MIN_CHUNK_COLS` or more, multiples of `COL_ALIGN`; and where even
/// then some thread would have no chunk (one column: decode), the rows go down to `ROW_ALIGN` per chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Split {
    rows_per: usize,
    cols_per: usize,
    row_chunks: usize,
    chunks: usize,
}

fn split(rows: usize, cols: usize, nth: usize) -> Split {
    let align = |v: usize, to: usize| v.div_ceil(to) * to;
    let (rows, cols, nth) = (rows.max(1), cols.max(1), nth.max(1));
    let wanted = CHUNKS_PER_THREAD * nth;
    let mut rows_per = align(rows.div_ceil(wanted).max(MIN_CHUNK_ROWS), ROW_ALIGN);
    let mut cols_per = cols;
    let row_chunks = rows.div_ceil(rows_per);
    if row_chunks < wanted && cols >= 2 * MIN_CHUNK_COLS {
        let col_chunks = wanted.div_ceil(row_chunks).min(cols / MIN_CHUNK_COLS);
        cols_per = align(cols.div_ceil(col_chunks), COL_ALIGN);
    }
    let col_chunks = cols.div_ceil(cols_per);
    if row_chunks * col_chunks < nth {
        let row_chunks_wanted = nth.div_ceil(col_chunks);
        // Rounded down, so that there are at least that many (while the rows allow ROW_ALIGN each).
        let down = rows / row_chunks_wanted / ROW_ALIGN * ROW_ALIGN;
        rows_per = rows_per.min(down.max(ROW_ALIGN));
    }
    let row_chunks = rows.div_ceil(rows_per);
    Split {
        rows_per,
        cols_per,
        row_chunks,
        chunks: row_chunks * col_chunks,
    }
}

impl Split {
    /// Chunk `i`'s rows and columns (`i < chunks`).
    fn chunk(&self, i: usize, rows: usize, cols: usize) -> ((usize, usize), (usize, usize)) {
        let (r, c) = (i % self.row_chunks, i / self.row_chunks);
        let r0 = r * self.rows_per;
        let c0 = c * self.cols_per;
        (
            (r0, (r0 + self.rows_per).min(rows)),
            (c0, (c0 + self.cols_per).min(cols)),
        )
    }
}

/// This thread's elements of every plane of the product, through the tile kernels: chunks (`split`) from the
/// threadpool's counter (`chunk_add`, set to `nth` by thread 0 before the barrier; thread `i` starts with
/// chunk `i`), as stock's MUL_MAT hands out its own, or without it a fixed share of the rows.
///
/// # Safety
/// `product` accepted the op and every thread has quantized its share (after the barrier); `chunk_add` is
/// ggml's, on a counter thread 0 set to `nth` before it.
unsafe fn compute_share(
    p: &ComputeParams,
    prod: &Product,
    dst: &GgmlTensor,
    chunk_add: Option<ChunkAddFn>,
) {
    // SAFETY: checked by `product`.
    let (rows, cols) = unsafe { ((*prod.src0).ne[1] as usize, (*prod.src1).ne[1] as usize) };
    if rows == 0 || cols == 0 {
        return;
    }
    let Some(add) = chunk_add else {
        let (r0, r1) = thread_rows(p, rows);
        if r0 < r1 {
            // SAFETY: the caller's contract; r0..r1 lies inside the rows and is this thread's alone.
            unsafe { compute_chunk(prod, dst, p.wdata, (r0, r1), (0, cols)) };
        }
        return;
    };
    let split = split(rows, cols, p.nth as usize);
    let mut chunk = p.ith as usize;
    while chunk < split.chunks {
        let (rows, cols) = split.chunk(chunk, rows, cols);
        // SAFETY: as above; each chunk index is handed to one thread only, and chunks do not overlap.
        unsafe { compute_chunk(prod, dst, p.wdata, rows, cols) };
        // SAFETY: ggml's counter on this op's threadpool, as the caller vouches.
        let Ok(next) = usize::try_from(unsafe { add(p.threadpool, 1) }) else {
            break;
        };
        chunk = next;
    }
}

/// Rows `r0..r1` by columns `c0..c1` of every plane of the product, through the tile kernels.
///
/// # Safety
/// `product` accepted the op, src1 is quantized in `wdata`, `r0 < r1 <= rows`, `c0 < c1 <= cols`, and no
/// other thread writes these elements.
unsafe fn compute_chunk(
    prod: &Product,
    dst: &GgmlTensor,
    wdata: *mut c_void,
    (r0, r1): (usize, usize),
    (c0, c1): (usize, usize),
) {
    let kernels = crate::interpose::active();
    // SAFETY: checked by `product`.
    let (src0, src1) = unsafe { (&*prod.src0, &*prod.src1) };
    let nb = src0.ne[0] as usize / prod.weights.qk();
    let cols = src1.ne[1] as usize;
    let (r2, r3) = (src1.ne[2] / src0.ne[2], src1.ne[3] / src0.ne[3]);
    let bytes = prod.weights.block_bytes();
    let stride = src0.nb[1] / bytes;
    for i13 in 0..src1.ne[3] {
        for i12 in 0..src1.ne[2] {
            let (i02, i03) = ((i12 / r2) as usize, (i13 / r3) as usize);
            let plane = (i12 + i13 * src1.ne[2]) as usize;
            // SAFETY: the weight plane holds `rows` rows of `stride` blocks (the last one `nb`), the quantized
            // plane `cols` rows of `row_size` bytes in the work buffer (this chunk's `c0..c1` of them); dst
            // elements (r, c) of this plane lie inside dst, and this thread writes only rows r0..r1 of columns
            // c0..c1.
            unsafe {
                let w = (src0.data as *const u8)
                    .add(i02 * src0.nb[2] + i03 * src0.nb[3] + r0 * stride * bytes);
                let q = (wdata as *const u8).add((plane * cols + c0) * prod.row_size);
                let q = std::slice::from_raw_parts(q, (c1 - c0) * prod.row_size);
                let act_nb = prod.row_size / prod.weights.act_block().1;
                let out =
                    (dst.data as *mut u8).add(i12 as usize * dst.nb[2] + i13 as usize * dst.nb[3]);
                let col_bytes = dst.nb[1];
                prod.weights.mul_mat(
                    kernels,
                    w,
                    (nb, stride, r1 - r0),
                    (q, act_nb),
                    &mut |r, c, v| {
                        *(out.add((c0 + c) * col_bytes) as *mut f32).add(r0 + r) = v;
                    },
                );
            }
        }
    }
}

/// The preloaded MUL_MAT_ID hook: one expert's product (see `serve_expert`), else the real function.
///
/// # Safety
/// ggml's contract for `ggml_compute_forward_mul_mat_id_tiled`.
pub unsafe fn mul_mat_id_tiled(
    params: *const ComputeParams,
    dst: *mut GgmlTensor,
    cur_a: i64,
    cne1: i64,
    expert_rows: *const i32,
    scratch: *mut c_char,
) -> bool {
    // SAFETY: the caller's contract, passed on.
    if unsafe { serve_expert(params, dst, cur_a, cne1, expert_rows) } {
        return true;
    }
    match hook().next_id {
        // SAFETY: the real function, with the caller's own arguments.
        Some(next) => unsafe { next(params, dst, cur_a, cne1, expert_rows, scratch) },
        None => false,
    }
}

/// The patched build's MUL_MAT_ID entry (per expert): `true` when the expert's product was computed here.
///
/// # Safety
/// As `mul_mat_id_tiled`.
pub unsafe fn compute_forward_mul_mat_id(
    params: *const ComputeParams,
    dst: *mut GgmlTensor,
    cur_a: i64,
    cne1: i64,
    expert_rows: *const i32,
) -> bool {
    // SAFETY: the caller's contract, passed on.
    unsafe { serve_expert(params, dst, cur_a, cne1, expert_rows) }
}

/// Expert `cur_a`'s share of a MUL_MAT_ID: ggml has quantized src1 into `params->wdata` (rows of
/// `ggml_row_size(Q8_0, ne10)`, token-major) and grouped the `(slot, token)` pairs routed to the expert; this
/// thread gathers those columns, runs its rows of the expert's matrix through the tile kernels and writes
/// `dst[slot, token]`. No barrier: threads write disjoint rows, and ggml moves on to the next expert the same
/// way after its own chunks. `false` (nothing written) for anything it does not take.
///
/// # Safety
/// As `mul_mat_id_tiled`.
unsafe fn serve_expert(
    params: *const ComputeParams,
    dst: *mut GgmlTensor,
    cur_a: i64,
    cne1: i64,
    expert_rows: *const i32,
) -> bool {
    thread_local! {
        static COLUMNS: std::cell::RefCell<(Vec<u8>, Vec<usize>)> =
            const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
    }
    let h = hook();
    if h.off.is_some() || !h.experts || expert_rows.is_null() {
        return false;
    }
    // SAFETY: ggml passes valid params and dst; a MUL_MAT_ID's sources are valid tensors.
    let (p, d) = unsafe { (&*params, &*dst) };
    // SAFETY: as above.
    let Some((src0, src1)) = (unsafe { d.src[0].as_ref().zip(d.src[1].as_ref()) }) else {
        return false;
    };
    let Some(weights) = weight_operands(src0, src1, d) else {
        return false;
    };
    let ok = p.use_ref == 0
        && plain_host_weights(src0)
        && sane_params(p)
        && src1.ne[3] == 1
        && d.ne[3] == 1
        && (0..src0.ne[2]).contains(&cur_a)
        && cne1 > 0;
    if !ok {
        return false;
    }
    let row_size = weights.act_row_size(src1.ne[0] as usize);
    let (ne11, ne12) = (src1.ne[1], src1.ne[2]);
    if p.wsize < row_size * (ne11 * ne12) as usize {
        return false;
    }
    // SAFETY: ggml's grouping table holds `cne1` (slot, token) pairs for this expert.
    let pairs = unsafe { std::slice::from_raw_parts(expert_rows, 2 * cne1 as usize) };
    let valid = pairs.chunks_exact(2).all(|t| {
        let (slot, token) = (t[0] as i64, t[1] as i64);
        (0..d.ne[1]).contains(&slot) && (0..ne12).contains(&token) && token < d.ne[2]
    });
    if !valid {
        return false;
    }
    let nb = src0.ne[0] as usize / weights.qk();
    let act_nb = row_size / weights.act_block().1;
    let (r0, r1) = thread_rows(p, src0.ne[1] as usize);
    if r0 < r1 {
        COLUMNS.with_borrow_mut(|(cols, targets)| {
            cols.clear();
            targets.clear();
            for t in pairs.chunks_exact(2) {
                let (slot, token) = (t[0] as usize, t[1] as usize);
                let i11 = slot % ne11 as usize;
                // SAFETY: (i11, token) is inside src1, whose quantized rows the work buffer holds (checked
                // above); the dst element lies inside dst.
                unsafe {
                    let q = (p.wdata as *const u8).add((i11 + token * ne11 as usize) * row_size);
                    cols.extend_from_slice(std::slice::from_raw_parts(q, row_size));
                }
                targets.push(d.data as usize + slot * d.nb[1] + token * d.nb[2]);
            }
            let kernels = crate::interpose::active();
            let bytes = weights.block_bytes();
            let stride = src0.nb[1] / bytes;
            // SAFETY: expert `cur_a`'s matrix holds `ne01` rows of `stride` blocks; this thread writes only
            // rows r0..r1 of each target column.
            unsafe {
                let w =
                    (src0.data as *const u8).add(cur_a as usize * src0.nb[2] + r0 * stride * bytes);
                weights.mul_mat(
                    kernels,
                    w,
                    (nb, stride, r1 - r0),
                    (cols, act_nb),
                    &mut |r, c, v| {
                        *(targets[c] as *mut f32).add(r0 + r) = v;
                    },
                );
            }
        });
    }
    crate::interpose::count_served_expert();
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fixed shares cover every row exactly once, in multiples of `ROW_ALIGN` but the last, and a share may be
    /// empty (few rows, many threads): the static path must then skip the kernels.
    #[test]
    fn fixed_shares_cover_every_row_once() {
        for nth in 1..=64usize {
            for rows in (1..=600).chain([4096, 4097, 12288, 151_669]) {
                let mut next = 0;
                for ith in 0..nth {
                    let p = ComputeParams {
                        ith: ith as c_int,
                        nth: nth as c_int,
                        wsize: 0,
                        wdata: std::ptr::null_mut(),
                        threadpool: std::ptr::null_mut(),
                        use_ref: 0,
                    };
                    let (r0, r1) = thread_rows(&p, rows);
                    assert!(r0 <= r1 && r1 <= rows);
                    if r0 < r1 {
                        assert_eq!(r0, next, "{rows} rows, thread {ith} of {nth}");
                        next = r1;
                    }
                }
                assert_eq!(next, rows, "{rows} rows, {nth} threads");
            }
        }
    }

    /// The chunks of `split` cover every element once; rows and columns are cut in whole multiples of their
    /// alignment; every thread up to 64 gets a chunk wherever 16-row chunks allow it; and two threads on the
    /// shapes of real models (at least 512 rows) keep the rows-only chunks of at least 64 rows.
    #[test]
    fn chunks_cover_every_element_once_and_go_round_the_threads() {
        use std::collections::BTreeSet;
        let shapes = (1..=300)
            .step_by(7)
            .chain([512, 1024, 2048, 4096, 4097, 6144, 12288, 151_669]);
        for rows in shapes {
            for cols in [1usize, 2, 7, 8, 33, 127, 128, 129, 512, 600] {
                for nth in 1..=64usize {
                    let what = format!("{rows} × {cols}, {nth} threads");
                    let sp = split(rows, cols, nth);
                    assert!(sp.rows_per.is_multiple_of(ROW_ALIGN), "{what}: {sp:?}");
                    assert!(
                        sp.cols_per == cols || sp.cols_per.is_multiple_of(COL_ALIGN),
                        "{what}: {sp:?}"
                    );
                    // The chunks are a grid: distinct, and their row ranges and column ranges each tile
                    // the whole span, so every element lies in exactly one.
                    let (mut row_ranges, mut col_ranges) = (BTreeSet::new(), BTreeSet::new());
                    let mut pairs = BTreeSet::new();
                    for i in 0..sp.chunks {
                        let ((r0, r1), (c0, c1)) = sp.chunk(i, rows, cols);
                        assert!(
                            r0 < r1 && r1 <= rows && c0 < c1 && c1 <= cols,
                            "{what}: chunk {i}"
                        );
                        row_ranges.insert((r0, r1));
                        col_ranges.insert((c0, c1));
                        assert!(pairs.insert((r0, c0)), "{what}: chunk {i} again");
                    }
                    assert_eq!(pairs.len(), row_ranges.len() * col_ranges.len(), "{what}");
                    for (ranges, span) in [(&row_ranges, rows), (&col_ranges, cols)] {
                        let mut next = 0;
                        for &(a, b) in ranges {
                            assert_eq!(a, next, "{what}: {sp:?}");
                            next = b;
                        }
                        assert_eq!(next, span, "{what}: {sp:?}");
                    }
                    if rows >= ROW_ALIGN * nth {
                        assert!(sp.chunks >= nth, "{what}: {sp:?}");
                    }
                    if nth == 2 && rows >= 512 {
                        assert_eq!(sp.cols_per, cols, "{what}");
                        assert!(sp.rows_per >= MIN_CHUNK_ROWS, "{what}");
                        assert!(sp.chunks <= CHUNKS_PER_THREAD * nth, "{what}");
                    }
                }
            }
        }
    }
}
