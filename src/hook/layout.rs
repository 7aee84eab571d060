//! The hook's start-up layout self-test: before it reads a single field of ggml's internal structs, the hook
//! builds a tiny MUL_MAT with ggml's public API and checks its mirrors against it.
//!
//! - `struct ggml_tensor` (`GgmlTensor`): the fields of two new tensors and of their product (type, shape,
//!   strides, data, sources, no buffer, no `extra`), and the product's `op`, which `ggml_op_name` must call
//!   `MUL_MAT`; that number is the one the hook compares every node's `op` with, since op numbers move between
//!   versions (29 until 0.27.0, 28 in 1.0.0).
//! - `struct ggml_compute_params` (`ComputeParams`): the graph is planned for two threads and computed on the
//!   calling thread, one of ggml's own inside the graph that first offers a node to the hook (the other threads
//!   of that graph wait for the hook to be set up); every call ggml makes for the product must carry `ith` 0 or
//!   1 of `nth` 2 (or 0 of 1, where an OpenMP runtime does not nest teams), the plan's work buffer and size, a
//!   threadpool and `use_ref` false, and the product must be right (its data read through the mirror). A
//!   thread of its own for the test was tried: under Debian's OpenMP llama.cpp 0.7.0 the program then lost
//!   its output and ended silently after the test.
//!
//! Any difference or a missing function: the hook stays off.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

use super::{ComputeParams, GgmlTensor};
use crate::interpose::next_symbol;

const GGML_TYPE_F32: c_int = 0;
/// The weight types the test tries, with the bits of 1.0 in each: BF16 (30) and F16 (1). ggml converts F32
/// columns to either before the product, so the plan holds a work buffer whose address the test can check
/// (ggml 1.0.0 multiplies F16 by F32 without one; a type with no work buffer is skipped).
const WEIGHT_TYPES: [(c_int, u16); 2] = [(30, 0x3f80), (1, 0x3c00)];
/// The test's shapes: `a` is `ROWS` rows of `K` 16-bit floats, `b` is `COLS` F32 columns of `K`.
const K: i64 = 64;
const ROWS: i64 = 4;
const COLS: i64 = 2;
const THREADS: c_int = 2;
/// `b`'s value (and `a`'s is 1.0): every product element is `2·K`, exactly.
const B_VALUE: f32 = 2.0;

/// `struct ggml_init_params` (ggml.h): unchanged since ggml's first release.
#[repr(C)]
struct InitParams {
    mem_size: usize,
    mem_buffer: *mut c_void,
    no_alloc: bool,
}

/// `struct ggml_cplan` (ggml-cpu.h), returned by value: the fields the test reads, then room for any a later
/// version appends (the caller provides the return slot, so it must be at least as large as ggml's).
#[repr(C)]
struct CPlan {
    work_size: usize,
    work_data: *mut u8,
    n_threads: c_int,
    threadpool: *mut c_void,
    abort_callback: *mut c_void,
    abort_callback_data: *mut c_void,
    use_ref: bool,
    spare: [u64; 16],
}

type InitFn = unsafe extern "C" fn(InitParams) -> *mut c_void;
type FreeFn = unsafe extern "C" fn(*mut c_void);
type NewTensor2dFn = unsafe extern "C" fn(*mut c_void, c_int, i64, i64) -> *mut GgmlTensor;
type MulMatFn =
    unsafe extern "C" fn(*mut c_void, *mut GgmlTensor, *mut GgmlTensor) -> *mut GgmlTensor;
type NewGraphFn = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type BuildForwardExpandFn = unsafe extern "C" fn(*mut c_void, *mut GgmlTensor);
type GraphPlanFn = unsafe extern "C" fn(*const c_void, c_int, *mut c_void) -> CPlan;
type GraphComputeFn = unsafe extern "C" fn(*mut c_void, *mut CPlan) -> c_int;
type OpNameFn = unsafe extern "C" fn(c_int) -> *const c_char;

/// The public functions the test calls, from the ggml behind the library.
#[derive(Clone, Copy)]
struct Api {
    init: InitFn,
    free: FreeFn,
    new_tensor_2d: NewTensor2dFn,
    mul_mat: MulMatFn,
    new_graph: NewGraphFn,
    build_forward_expand: BuildForwardExpandFn,
    graph_plan: GraphPlanFn,
    graph_compute: GraphComputeFn,
    op_name: OpNameFn,
}

impl Api {
    fn find() -> Result<Api, String> {
        fn get<T: Copy>(name: &CStr) -> Result<T, String> {
            next_symbol::<T>(name).ok_or_else(|| format!("{} not found", name.to_string_lossy()))
        }
        Ok(Api {
            init: get(c"ggml_init")?,
            free: get(c"ggml_free")?,
            new_tensor_2d: get(c"ggml_new_tensor_2d")?,
            mul_mat: get(c"ggml_mul_mat")?,
            new_graph: get(c"ggml_new_graph")?,
            build_forward_expand: get(c"ggml_build_forward_expand")?,
            graph_plan: get(c"ggml_graph_plan")?,
            graph_compute: get(c"ggml_graph_compute")?,
            op_name: get(c"ggml_op_name")?,
        })
    }
}

/// What ggml passed for the test's product, one entry per call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seen {
    ith: c_int,
    nth: c_int,
    wsize: usize,
    wdata: usize,
    threadpool: usize,
    use_ref: bool,
}

/// The test's product node while its graph runs (null otherwise), and the calls ggml made for it.
static PROBE: AtomicPtr<GgmlTensor> = AtomicPtr::new(std::ptr::null_mut());
static SEEN: Mutex<Vec<Seen>> = Mutex::new(Vec::new());

/// Whether `node` is the self-test's product; if so the call is recorded and the hook must let ggml compute it
/// (return `false` without touching anything else: the hook itself is still being set up).
///
/// # Safety
/// `params` is what ggml passed with `node`.
pub(super) unsafe fn is_probe(params: *const ComputeParams, node: *const GgmlTensor) -> bool {
    let probe = PROBE.load(Ordering::Acquire);
    if probe.is_null() || !std::ptr::eq(probe, node) {
        return false;
    }
    // SAFETY: ggml's contract; for the test's own node the struct is read only after the tensor checks passed.
    let p = unsafe { &*params };
    let seen = Seen {
        ith: p.ith,
        nth: p.nth,
        wsize: p.wsize,
        wdata: p.wdata as usize,
        threadpool: p.threadpool as usize,
        use_ref: p.use_ref != 0,
    };
    SEEN.lock().unwrap_or_else(|e| e.into_inner()).push(seen);
    true
}

/// Runs the test; `Ok` carries the op number of `GGML_OP_MUL_MAT` in this ggml.
pub(super) fn run() -> Result<c_int, String> {
    let api = Api::find()?;
    let mut result = Err("no weight type to test with".to_string());
    for (type_, one) in WEIGHT_TYPES {
        // SAFETY: `api` holds ggml's own public functions with their declared signatures.
        result = unsafe { test(api, type_, one) };
        if result.as_ref().map_or(true, |r| r.is_some()) {
            break;
        }
    }
    result.and_then(|r| r.ok_or_else(|| "no plan with a work buffer".into()))
}

/// Frees the test's context on every way out.
struct Context {
    ctx: *mut c_void,
    free: FreeFn,
}

impl Drop for Context {
    fn drop(&mut self) {
        PROBE.store(std::ptr::null_mut(), Ordering::Release);
        // SAFETY: the context ggml_init returned, freed once.
        unsafe { (self.free)(self.ctx) };
    }
}

/// The test with weights of `type_` (whose 1.0 is `one`): `Ok(None)` when ggml plans no work buffer for it.
///
/// # Safety
/// `api` holds ggml's public functions.
unsafe fn test(api: Api, type_: c_int, one: u16) -> Result<Option<c_int>, String> {
    let params = InitParams {
        mem_size: 1 << 20,
        mem_buffer: std::ptr::null_mut(),
        no_alloc: false,
    };
    // SAFETY: ggml_init with its own parameters struct; the context is freed by `Context`.
    let ctx = unsafe { (api.init)(params) };
    if ctx.is_null() {
        return Err("ggml_init failed".into());
    }
    let ctx = Context {
        ctx,
        free: api.free,
    };
    // SAFETY: a valid context and type; ggml returns tensors inside it (or aborts itself when it is full,
    // which 1 MiB is far from).
    let (a, b) = unsafe {
        (
            (api.new_tensor_2d)(ctx.ctx, type_, K, ROWS),
            (api.new_tensor_2d)(ctx.ctx, GGML_TYPE_F32, K, COLS),
        )
    };
    if a.is_null() || b.is_null() {
        return Err("ggml_new_tensor_2d failed".into());
    }
    // SAFETY: tensors ggml just created; only the mirror's fields are read, inside the struct's 336 bytes,
    // which `ggml_tensor_overhead` would have to undercut for any field to lie outside it.
    let (ta, tb) = unsafe { (&*a, &*b) };
    check_new(ta, type_, [K, ROWS, 1, 1], 2)?;
    check_new(tb, GGML_TYPE_F32, [K, COLS, 1, 1], 4)?;
    if [ta, tb]
        .iter()
        .any(|t| t.op != 0 || t.src.iter().any(|s| !s.is_null()))
    {
        return Err("a new tensor reads an op or sources".into());
    }
    // SAFETY: `data` of each was checked non-null and both tensors own `K × rows` elements there.
    unsafe {
        std::slice::from_raw_parts_mut(ta.data as *mut u16, (K * ROWS) as usize).fill(one);
        std::slice::from_raw_parts_mut(tb.data as *mut f32, (K * COLS) as usize).fill(B_VALUE);
    }
    // SAFETY: two valid tensors of matching rows.
    let c = unsafe { (api.mul_mat)(ctx.ctx, a, b) };
    if c.is_null() {
        return Err("ggml_mul_mat failed".into());
    }
    // SAFETY: as for `a` and `b`.
    let tc = unsafe { &*c };
    check_new(tc, GGML_TYPE_F32, [ROWS, COLS, 1, 1], 4)?;
    if tc.src[0] != a || tc.src[1] != b || !tc.src[2..].iter().all(|s| s.is_null()) {
        return Err("the product's sources are not where ggml_tensor keeps them".into());
    }
    // Op numbers are below 128 in every ggml; checked before ggml_op_name indexes its table with it.
    if !(1..128).contains(&tc.op) {
        return Err(format!("the product's op reads {}", tc.op));
    }
    // SAFETY: an op number in range; ggml returns a static string.
    let name = unsafe { CStr::from_ptr((api.op_name)(tc.op)) };
    if name.to_bytes() != b"MUL_MAT" {
        return Err(format!(
            "the product's op {} is {} to ggml_op_name",
            tc.op,
            name.to_string_lossy()
        ));
    }
    // SAFETY: a graph in the same context, holding the product.
    let graph = unsafe {
        let g = (api.new_graph)(ctx.ctx);
        if g.is_null() {
            return Err("ggml_new_graph failed".into());
        }
        (api.build_forward_expand)(g, c);
        g
    };
    // SAFETY: a valid graph; no threadpool (ggml makes one for the call).
    let mut plan = unsafe { (api.graph_plan)(graph, THREADS, std::ptr::null_mut()) };
    if plan.work_size == 0 {
        return Ok(None);
    }
    if plan.n_threads != THREADS || plan.work_size > 1 << 20 {
        return Err(format!(
            "the plan reads {} threads and {} bytes of work",
            plan.n_threads, plan.work_size
        ));
    }
    let mut work = vec![0u8; plan.work_size + 64];
    let offset = work.as_ptr().align_offset(64);
    plan.work_data = work[offset..].as_mut_ptr();
    SEEN.lock().unwrap_or_else(|e| e.into_inner()).clear();
    PROBE.store(c, Ordering::Release);
    // SAFETY: the planned graph with its work buffer, which outlives the call.
    let status = unsafe { (api.graph_compute)(graph, &mut plan) };
    PROBE.store(std::ptr::null_mut(), Ordering::Release);
    if status != 0 {
        return Err(format!("ggml_graph_compute returned {status}"));
    }
    let seen = std::mem::take(&mut *SEEN.lock().unwrap_or_else(|e| e.into_inner()));
    check_params(&seen, &plan)?;
    // SAFETY: the product's data holds ROWS × COLS floats (checked by `check_new`).
    let out = unsafe { std::slice::from_raw_parts(tc.data as *const f32, (ROWS * COLS) as usize) };
    let want = B_VALUE * K as f32;
    if out.iter().any(|&v| v != want) {
        return Err(format!("the product reads {out:?}, not {want} everywhere"));
    }
    Ok(Some(tc.op))
}

/// A tensor ggml just made in an allocating context: its type, shape, contiguous strides, data, no buffer, no
/// view and no `extra`.
fn check_new(t: &GgmlTensor, type_: c_int, ne: [i64; 4], elem: usize) -> Result<(), String> {
    let mut nb = [elem; 4];
    for i in 1..4 {
        nb[i] = nb[i - 1] * ne[i - 1] as usize;
    }
    let ok = t.type_ == type_
        && t.ne == ne
        && t.nb == nb
        && !t.data.is_null()
        && t.buffer.is_null()
        && t.view_src.is_null()
        && t.view_offs == 0
        && t.extra.is_null();
    if ok {
        Ok(())
    } else {
        Err(format!(
            "a new tensor reads type {} ne {:?} nb {:?} (expected {type_} {ne:?} {nb:?})",
            t.type_, t.ne, t.nb
        ))
    }
}

/// ggml's calls for the product: one per thread of the plan (`ith` 0 and 1 of 2, or one thread of 1 where an
/// OpenMP runtime gives fewer), each with the plan's work buffer, one threadpool, and `use_ref` false.
fn check_params(seen: &[Seen], plan: &CPlan) -> Result<(), String> {
    let Some(first) = seen.first() else {
        return Err("ggml never offered the product to the hook".into());
    };
    let nth = first.nth;
    let mut ith: Vec<c_int> = seen.iter().map(|s| s.ith).collect();
    ith.sort_unstable();
    let ok = (1..=THREADS).contains(&nth)
        && ith == (0..nth).collect::<Vec<_>>()
        && seen.iter().all(|s| {
            s.nth == nth
                && s.wsize == plan.work_size
                && s.wdata == plan.work_data as usize
                && s.threadpool != 0
                && s.threadpool == first.threadpool
                && !s.use_ref
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "ggml_compute_params reads {seen:?} for a plan of {} threads, {} bytes at {:p}",
            plan.n_threads, plan.work_size, plan.work_data
        ))
    }
}
