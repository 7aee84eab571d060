//! Quick interleaved timing of the Q2_0 row kernels (rlib, per ISA) against stock haswell: `ROWS`×4096
//! mat-vec, medians over repetitions. For development; the harness's `speed` is the reported measurement.
use ggml_lowbit::ab::bits::CSymbols;
use ggml_lowbit::ab::cases::{Gen, Q2_0_BYTES, Q8_0_BYTES};
use ggml_lowbit::dispatch::{Isa, Kernels};
use ggml_lowbit::formats::blocks;
use ggml_lowbit::stock::StockLib;
use ggml_lowbit::FloatOrder;
use std::ffi::c_void;
use std::time::Instant;

fn main() {
    let cols: usize = std::env::var("COLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4096);
    let rows: usize = std::env::var("ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4096);
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(21);
    let nb = cols / 64;
    let rb = nb * Q2_0_BYTES;
    let mut g = Gen::new(1);
    let mut x = vec![0u8; rows * rb];
    for r in 0..rows {
        g.q2_0_row(nb, &mut x[r * rb..(r + 1) * rb]);
    }
    let mut y = vec![0u8; 2 * nb * Q8_0_BYTES];
    g.q8_0_row(2 * nb, &mut y);
    let stock = StockLib::load(FloatOrder::Haswell).expect("stock");
    let st = CSymbols::from_stock(&stock)
        .expect("symbols")
        .vec_dot_q2_0_q8_0;
    let kernels: Vec<Kernels> = [Isa::Avx2, Isa::Avx512]
        .map(|i| Kernels::new(i, FloatOrder::Haswell))
        .to_vec();
    let exe = std::env::current_exe().unwrap();
    let so = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("libggml_lowbit.so");
    // SAFETY: our own library.
    let lib = unsafe { libloading::Library::new(&so) }.expect("cdylib");
    // SAFETY: the export has the vec_dot signature.
    let ours: ggml_lowbit::stock::VecDotFn =
        unsafe { *lib.get(b"ggml_vec_dot_q2_0_q8_0\0").unwrap() };
    let mut times = vec![Vec::new(); kernels.len() + 2];
    for _ in 0..reps {
        for (i, k) in kernels.iter().enumerate() {
            let t = Instant::now();
            let mut acc = 0f32;
            for r in 0..rows {
                acc += k.vec_dot_q2_0_q8_0(blocks(&x[r * rb..(r + 1) * rb]), blocks(&y));
            }
            std::hint::black_box(acc);
            times[i].push(t.elapsed().as_secs_f64());
        }
        let t = Instant::now();
        for r in 0..rows {
            let mut s = 0f32;
            // SAFETY: row r and y hold the blocks for `cols` columns.
            unsafe {
                st(
                    cols as i32,
                    &mut s,
                    0,
                    x[r * rb..].as_ptr() as *const c_void,
                    0,
                    y.as_ptr() as *const c_void,
                    0,
                    1,
                )
            };
            std::hint::black_box(s);
        }
        times[kernels.len()].push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        for r in 0..rows {
            let mut s = 0f32;
            // SAFETY: as above.
            unsafe {
                ours(
                    cols as i32,
                    &mut s,
                    0,
                    x[r * rb..].as_ptr() as *const c_void,
                    0,
                    y.as_ptr() as *const c_void,
                    0,
                    1,
                )
            };
            std::hint::black_box(s);
        }
        times[kernels.len() + 1].push(t.elapsed().as_secs_f64());
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let stock_t = med(&mut times[kernels.len()]);
    let t = med(&mut times[kernels.len() + 1]);
    println!("cdylib export: {:.3} ms, {:.2}x", t * 1e3, stock_t / t);
    for (i, k) in kernels.iter().enumerate() {
        let t = med(&mut times[i]);
        println!(
            "{:?}: {:.3} ms ({:.2} ns/block), stock {:.3} ms: {:.2}x",
            k.isa,
            t * 1e3,
            t * 1e9 / (rows * nb) as f64,
            stock_t * 1e3,
            stock_t / t
        );
    }
}
