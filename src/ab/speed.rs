//! Side-by-side speed: our symbol and stock's on the same buffers, interleaved within one run.
//!
//! Each shape is a mat-vec through the vec_dot ABI (one call per row, as ggml makes them). A repetition times
//! ours and stock back to back (alternating which goes first); the ratio reported is stock's median over ours'
//! median. Absolute times are printed for context only: the machines are shared, only the ratio is comparable.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rand::Rng;

use super::bits::MulMatFn;
use super::cases::{Gen, Q8_0_BYTES, Q8_K_BYTES};
use crate::formats::blocks_mut;
use crate::formats::q8_k::{quantize_row_q8_k_model, BlockQ8K, QK_K};
use crate::model::WeightType;
use crate::stock::{QuantizeRowFn, VecDotFn};

/// The Bonsai-8B (Qwen3-8B) projection shapes: rows × columns.
pub const BONSAI_8B_SHAPES: [(usize, usize); 5] = [
    (4096, 4096),
    (1024, 4096),
    (12288, 4096),
    (4096, 12288),
    (151669, 4096),
];

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct SpeedRow {
    pub symbol: String,
    pub shape: String,
    pub threads: usize,
    pub reps: usize,
    pub ours_median_ms: f64,
    pub stock_median_ms: f64,
    /// stock median / ours median: above 1 means we are faster.
    pub ratio: f64,
    /// What "stock" is for this row: the stock build, or for the fork's formats the fork's generic C.
    pub baseline: String,
    /// Whether the library serves this symbol over that build with the kernel timed here (`false`: its
    /// dispatcher passes it to the stock kernel, which is at least as fast on this CPU). Absent in older reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served: Option<bool>,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// The Bonsai 2 projection shapes (hidden 5120, FFN 17408, attention 6144): rows × columns.
pub const BONSAI2_SHAPES: [(usize, usize); 4] =
    [(17408, 5120), (5120, 17408), (6144, 5120), (5120, 6144)];

/// A weight matrix (Q2_0, PQ2_0 or PTQ1_0, ternary content as the model generator writes it) and a q8_0
/// activation.
pub struct MatVec {
    pub rows: usize,
    pub cols: usize,
    format: WeightType,
    weights: Vec<u8>,
    act: Vec<u8>,
}

/// A vector of `n` default values, or an error naming `what` when this machine cannot hold it: a shape too
/// large for the machine gets a message, not an allocation-failure abort.
pub fn zeroed_vec<T: Clone + Default>(n: usize, what: &str) -> Result<Vec<T>, String> {
    let bytes = n.checked_mul(std::mem::size_of::<T>());
    // SAFETY: sysconf has no preconditions; it returns -1 for a name it does not know.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let memory = (pages > 0 && page > 0).then(|| pages as u128 * page as u128);
    let gib = |b: u128| b as f64 / (1u128 << 30) as f64;
    match (bytes, memory) {
        (None, _) => return Err(format!("{what}: too large to address")),
        (Some(b), Some(m)) if b as u128 > m => {
            return Err(format!(
                "{what} needs {:.1} GiB; this machine has {:.1} GiB",
                gib(b as u128),
                gib(m)
            ))
        }
        _ => {}
    }
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        format!(
            "{what}: cannot allocate {:.1} GiB",
            gib(bytes.unwrap_or(0) as u128)
        )
    })?;
    v.resize(n, T::default());
    Ok(v)
}

impl MatVec {
    /// Fails, with a message, when the matrix does not fit in this machine's memory.
    pub fn new(format: WeightType, rows: usize, cols: usize, seed: u64) -> Result<MatVec, String> {
        let (bw, bb) = format.block();
        let what = format!("a {rows}x{cols} matrix");
        let row_bytes = (cols / bw) * bb;
        let weight_bytes = rows
            .checked_mul(row_bytes)
            .ok_or_else(|| format!("{what}: too large to address"))?;
        let mut weights = zeroed_vec::<u8>(weight_bytes, &what)?;
        // Rows are generated in parallel from per-row seeds so 151669-row matrices take well under a second.
        format.fill(&mut weights, cols, 0.03, seed);
        let mut g = Gen::new(seed.wrapping_add(1));
        let act = if format.q8_k_activations() {
            // q8_K, quantized from random activations with ggml's own quantizer (the model of it).
            let mut x = zeroed_vec::<f32>(cols, &what)?;
            x.iter_mut()
                .for_each(|v| *v = g.rng.gen_range(-1.0f32..1.0));
            let mut y = zeroed_vec::<BlockQ8K>(cols / QK_K, &what)?;
            quantize_row_q8_k_model(&x, &mut y);
            let mut act = zeroed_vec::<u8>(cols / QK_K * std::mem::size_of::<BlockQ8K>(), &what)?;
            blocks_mut::<BlockQ8K>(&mut act).copy_from_slice(&y);
            act
        } else {
            let mut act = zeroed_vec::<u8>(cols / 32 * Q8_0_BYTES, &what)?;
            for blk in act.chunks_exact_mut(Q8_0_BYTES) {
                let d = half::f16::from_f32(g.rng.gen_range(0.005..0.05)).to_bits();
                blk[..2].copy_from_slice(&d.to_le_bytes());
                for q in &mut blk[2..] {
                    *q = g.rng.gen::<i8>() as u8;
                }
            }
            act
        };
        Ok(MatVec {
            rows,
            cols,
            format,
            weights,
            act,
        })
    }

    /// Runs `job(row_bytes, r0, r1, out)` on every thread of `team` for its contiguous rows `r0..r1` (none
    /// when empty); `out` is the base of the output, which each thread writes only at its own rows.
    fn split_rows(
        &self,
        out: &mut [f32],
        team: &Team,
        job: &(dyn Fn(usize, usize, usize, usize) + Sync),
    ) {
        let (bw, bb) = self.format.block();
        let row_bytes = self.cols / bw * bb;
        let chunk = self.rows.div_ceil(team.threads());
        let (out_ptr, rows) = (out.as_mut_ptr() as usize, self.rows.min(out.len()));
        team.run(&|t| {
            let (r0, r1) = ((t * chunk).min(rows), ((t + 1) * chunk).min(rows));
            if r0 < r1 {
                job(row_bytes, r0, r1, out_ptr);
            }
        });
    }

    /// One mat-vec through `f`, one call per row, rows split in one contiguous chunk per thread of `team`.
    pub fn run(&self, f: VecDotFn, out: &mut [f32], team: &Team) {
        let (n, act, weights) = (
            self.cols as i32,
            self.act.as_ptr() as usize,
            self.weights.as_ptr() as usize,
        );
        self.split_rows(out, team, &|row_bytes, r0, r1, out_ptr| {
            for r in r0..r1 {
                // SAFETY: row `r` holds `cols/bw` blocks, the activation `cols/32`; each thread writes only its
                // own rows of `out`, which outlives the run (`Team::run` returns when every thread is done).
                unsafe {
                    f(
                        n,
                        (out_ptr as *mut f32).add(r),
                        0,
                        (weights + r * row_bytes) as *const c_void,
                        0,
                        act as *const c_void,
                        0,
                        1,
                    )
                };
            }
        });
    }

    /// One mat-vec through the tile export `f` (Q2_0 only): one call per thread on its contiguous rows.
    pub fn run_mul_mat(&self, f: MulMatFn, out: &mut [f32], team: &Team) {
        let (n, act, weights) = (
            self.cols as i32,
            self.act.as_ptr() as usize,
            self.weights.as_ptr() as usize,
        );
        self.split_rows(out, team, &|row_bytes, r0, r1, out_ptr| {
            // SAFETY: rows r0..r1 lie in the weights, the activation holds one column; each thread writes only
            // its own rows of `out`, which outlives the run.
            unsafe {
                f(
                    n,
                    (out_ptr as *mut f32).add(r0),
                    r1 - r0,
                    (weights + r0 * row_bytes) as *const c_void,
                    row_bytes,
                    act as *const c_void,
                    0,
                    (r1 - r0) as i32,
                    1,
                )
            };
        });
    }
}

/// Interleaved timing of our tile export (`ggml_lowbit_mul_mat_q2_0_q8_0`, whole products) against stock's
/// per-pair vec_dot on one mat-vec; bit-checked first.
pub fn time_mul_mat(
    symbol: &str,
    m: &MatVec,
    ours: MulMatFn,
    stock: VecDotFn,
    threads: usize,
    reps: usize,
) -> Result<SpeedRow, String> {
    let team = Team::new(threads);
    time_side_by_side(
        symbol,
        m,
        |out| m.run_mul_mat(ours, out, &team),
        |out| m.run(stock, out, &team),
        threads,
        reps,
    )
}

/// Runs `ours` and `stock` once each and checks every output bit for bit, then times them interleaved.
fn time_side_by_side(
    symbol: &str,
    m: &MatVec,
    ours: impl Fn(&mut [f32]),
    stock: impl Fn(&mut [f32]),
    threads: usize,
    reps: usize,
) -> Result<SpeedRow, String> {
    let mut a = zeroed_vec::<f32>(m.rows, "the output")?;
    let mut b = a.clone();
    ours(&mut a);
    stock(&mut b);
    if let Some(r) = (0..m.rows).find(|&r| a[r].to_bits() != b[r].to_bits()) {
        return Err(format!(
            "{}x{}: row {r} differs from stock: {} vs {}",
            m.rows, m.cols, a[r], b[r]
        ));
    }
    let time = |f: &dyn Fn(&mut [f32]), out: &mut [f32]| {
        let t = Instant::now();
        f(out);
        t.elapsed().as_secs_f64() * 1e3
    };
    let (mo, ms) = interleaved(reps, || time(&ours, &mut a), || time(&stock, &mut b));
    let shape = format!("{}x{}", m.rows, m.cols);
    Ok(SpeedRow::new(symbol, shape, threads, reps, mo, ms))
}

/// The threads a timing runs on: the caller plus `threads − 1` workers that spin between runs, so starting a
/// run costs no wake-up. (A sleeping rayon pool added about 0.1 ms to every run, 15 % of our 4096×4096 time,
/// which biased the ratio towards 1.) Workers exist only while the team does.
pub struct Team {
    shared: Arc<TeamShared>,
    workers: Vec<std::thread::JoinHandle<()>>,
}

struct TeamShared {
    epoch: AtomicUsize,
    done: AtomicUsize,
    stop: AtomicBool,
    /// Address of a `&(dyn Fn(usize) + Sync)` on the stack of the caller of `run`, valid during the run.
    job: AtomicUsize,
}

impl Team {
    pub fn new(threads: usize) -> Team {
        let shared = Arc::new(TeamShared {
            epoch: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            job: AtomicUsize::new(0),
        });
        let workers = (1..threads.max(1))
            .map(|index| {
                let shared = Arc::clone(&shared);
                std::thread::spawn(move || {
                    let mut seen = 0;
                    loop {
                        let epoch = loop {
                            if shared.stop.load(Ordering::Acquire) {
                                return;
                            }
                            let e = shared.epoch.load(Ordering::Acquire);
                            if e != seen {
                                break e;
                            }
                            std::hint::spin_loop();
                        };
                        seen = epoch;
                        let job =
                            shared.job.load(Ordering::Acquire) as *const &(dyn Fn(usize) + Sync);
                        // SAFETY: `run` published this pointer before bumping the epoch and does not return
                        // (so the closure stays alive) until every worker has counted itself done.
                        unsafe { (*job)(index) };
                        shared.done.fetch_add(1, Ordering::AcqRel);
                    }
                })
            })
            .collect();
        Team { shared, workers }
    }

    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `job(t)` for every thread index `t` (0 on the caller) and returns when all are done.
    pub fn run(&self, job: &(dyn Fn(usize) + Sync)) {
        let s = &self.shared;
        s.done.store(0, Ordering::Release);
        s.job.store(
            &job as *const &(dyn Fn(usize) + Sync) as usize,
            Ordering::Release,
        );
        s.epoch.fetch_add(1, Ordering::AcqRel);
        job(0);
        while s.done.load(Ordering::Acquire) < self.workers.len() {
            std::hint::spin_loop();
        }
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// Interleaved timing of `ours` and `stock` (for the fork's formats: the fork's generic C) on one mat-vec;
/// checks the outputs agree bit for bit first. The row's `baseline` is left for the caller to name.
pub fn time_vec_dot(
    symbol: &str,
    m: &MatVec,
    ours: VecDotFn,
    stock: VecDotFn,
    threads: usize,
    reps: usize,
) -> Result<SpeedRow, String> {
    let team = Team::new(threads);
    time_side_by_side(
        symbol,
        m,
        |out| m.run(ours, out, &team),
        |out| m.run(stock, out, &team),
        threads,
        reps,
    )
}

/// `reps` timings of `ours` and of `stock`, alternating which goes first; the two medians.
fn interleaved(
    reps: usize,
    mut ours: impl FnMut() -> f64,
    mut stock: impl FnMut() -> f64,
) -> (f64, f64) {
    let (mut to, mut ts) = (Vec::with_capacity(reps), Vec::with_capacity(reps));
    for rep in 0..reps {
        if rep % 2 == 0 {
            to.push(ours());
            ts.push(stock());
        } else {
            ts.push(stock());
            to.push(ours());
        }
    }
    (median(&mut to), median(&mut ts))
}

impl SpeedRow {
    fn new(
        symbol: &str,
        shape: String,
        threads: usize,
        reps: usize,
        ours_ms: f64,
        stock_ms: f64,
    ) -> SpeedRow {
        SpeedRow {
            symbol: symbol.into(),
            shape,
            threads,
            reps,
            ours_median_ms: ours_ms,
            stock_median_ms: stock_ms,
            ratio: stock_ms / ours_ms,
            baseline: String::new(),
            served: None,
        }
    }
}

/// Interleaved timing of `symbol` (`quantize_row_q8_0`, blocks of 32 floats in 34 bytes, or
/// `quantize_row_q8_K`, 256 in 292) on one activation of `cols` floats (many calls per sample).
pub fn time_quantize(
    symbol: &str,
    cols: usize,
    ours: QuantizeRowFn,
    stock: QuantizeRowFn,
    reps: usize,
) -> Result<SpeedRow, String> {
    let mut g = Gen::new(7);
    let mut x = zeroed_vec::<f32>(cols, &format!("an activation of {cols} floats"))?;
    x.iter_mut()
        .for_each(|v| *v = g.rng.gen_range(-3.0f32..3.0));
    let (qk, bytes) = if symbol == "quantize_row_q8_K" {
        (256, Q8_K_BYTES)
    } else {
        (32, Q8_0_BYTES)
    };
    let mut ya = zeroed_vec::<u8>(cols / qk * bytes, "the quantized activation")?;
    let mut yb = ya.clone();
    let calls = (4_000_000 / cols).max(1);
    let once = |f: QuantizeRowFn, y: &mut [u8]| {
        let t = Instant::now();
        for _ in 0..calls {
            // SAFETY: `x` has `cols` floats and `y` room for `cols/qk` blocks.
            unsafe { f(x.as_ptr(), y.as_mut_ptr() as *mut c_void, cols as i64) };
        }
        t.elapsed().as_secs_f64() * 1e3 / calls as f64
    };
    once(ours, &mut ya);
    once(stock, &mut yb);
    if ya != yb {
        return Err(format!("{symbol} {cols}: output differs from stock"));
    }
    let (mo, ms) = interleaved(reps, || once(ours, &mut ya), || once(stock, &mut yb));
    Ok(SpeedRow::new(symbol, format!("1x{cols}"), 1, reps, mo, ms))
}

/// Today's date in UTC as `YYYY-MM-DD`, for the report (days since 1970 to a civil date, proleptic Gregorian).
pub fn utc_date_today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    civil_date((secs / 86_400) as i64)
}

/// The civil date of day `days` after 1970-01-01.
fn civil_date(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// The CPU's model name as `/proc/cpuinfo` gives it ("unknown CPU" where there is none).
pub fn cpu_model_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".to_string())
}

/// One symbol's rows of a `speed` run in a line: how many rows, and the least and median ratio over them.
#[derive(Clone, Debug, PartialEq)]
pub struct SymbolSummary {
    pub symbol: String,
    pub rows: usize,
    pub min_ratio: f64,
    pub median_ratio: f64,
}

/// The per-symbol summary `speed` prints first, in the order each symbol first appears in `rows`.
pub fn summarize(rows: &[SpeedRow]) -> Vec<SymbolSummary> {
    let mut order: Vec<&str> = Vec::new();
    for r in rows {
        if !order.contains(&r.symbol.as_str()) {
            order.push(&r.symbol);
        }
    }
    order
        .into_iter()
        .map(|symbol| {
            let mut ratios: Vec<f64> = rows
                .iter()
                .filter(|r| r.symbol == symbol)
                .map(|r| r.ratio)
                .collect();
            let min_ratio = ratios.iter().copied().fold(f64::INFINITY, f64::min);
            SymbolSummary {
                symbol: symbol.to_string(),
                rows: ratios.len(),
                min_ratio,
                median_ratio: median(&mut ratios),
            }
        })
        .collect()
}

#[cfg(test)]
mod summary_tests {
    use super::*;

    fn row(symbol: &str, ratio: f64) -> SpeedRow {
        SpeedRow {
            symbol: symbol.into(),
            shape: "1x32".into(),
            threads: 1,
            reps: 1,
            ours_median_ms: 1.0,
            stock_median_ms: ratio,
            ratio,
            baseline: "stock".into(),
            served: None,
        }
    }

    #[test]
    fn civil_dates_of_known_days() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(11_016), "2000-02-29");
        assert_eq!(civil_date(20_793), "2026-12-06");
    }

    #[test]
    fn summary_groups_by_symbol_in_first_seen_order() {
        let rows = [
            row("b", 3.0),
            row("a", 2.0),
            row("b", 1.0),
            row("b", 5.0),
            row("a", 4.0),
        ];
        let s = summarize(&rows);
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].symbol.as_str(), s[0].rows), ("b", 3));
        assert_eq!((s[0].min_ratio, s[0].median_ratio), (1.0, 3.0));
        assert_eq!((s[1].symbol.as_str(), s[1].rows), ("a", 2));
        assert_eq!((s[1].min_ratio, s[1].median_ratio), (2.0, 3.0));
    }
}
