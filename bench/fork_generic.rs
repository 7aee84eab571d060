//! The yardstick for PQ2_0 and PTQ1_0: our kernels against the fork's generic C, compiled here with the
//! `cc` crate's compiler the way the fork is built on x86 (`-O3 -mavx2 -mfma -mf16c`, `bench/c/*_generic.c`), on
//! the Bonsai 2 shapes, one thread, interleaved, medians. Also a cross-check: the compiled C and our FMA-order
//! kernel must give the same bits on every row. `GGML_LOWBIT_ISA=avx2` measures the AVX2 kernels.

#[path = "../tests/common/fork_c.rs"]
mod fork_c;

use std::ffi::c_void;
use std::time::Instant;

use ggml_lowbit::dispatch::{Isa, Kernels};
use ggml_lowbit::formats::blocks;
use ggml_lowbit::FloatOrder;

fn main() {
    let built = fork_c::build(true);
    let isa = std::env::var("GGML_LOWBIT_ISA")
        .ok()
        .and_then(|v| Isa::parse(&v))
        .unwrap_or(Isa::Avx512);
    let ours = Kernels::new(isa, FloatOrder::Haswell);
    for (name, block_bytes, scale_byte, reference) in [
        ("pq2_0", 34usize, 1usize, built.vec_dot_pq2_0),
        ("ptq1_0", 28, 27, built.vec_dot_ptq1_0),
    ] {
        for (rows, cols) in [(17408usize, 5120usize), (5120, 17408), (6144, 5120)] {
            bench_shape(&ours, name, block_bytes, scale_byte, reference, rows, cols);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn bench_shape(
    ours: &Kernels,
    name: &str,
    block_bytes: usize,
    scale_byte: usize,
    reference: ggml_lowbit::stock::VecDotFn,
    rows: usize,
    cols: usize,
) {
    {
        let nb = cols / 128;
        let rb = nb * block_bytes;
        let mut state = 0x1234_5678_9abc_def0u64 ^ rows as u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        // Realistic scales (f16 around 0.02 and 0.016), random codes and activations.
        let mut x = vec![0u8; rows * rb];
        for (i, b) in x.iter_mut().enumerate() {
            *b = if i % block_bytes == scale_byte {
                0x25
            } else {
                next() as u8
            };
        }
        let mut y = vec![0u8; cols / 32 * 34];
        for (i, b) in y.iter_mut().enumerate() {
            *b = match i % 34 {
                0 => next() as u8,
                1 => 0x24,
                _ => next() as u8,
            };
        }
        let run_ours = |out: &mut [f32]| {
            for (r, o) in out.iter_mut().enumerate() {
                let row = &x[r * rb..(r + 1) * rb];
                *o = if name == "pq2_0" {
                    ours.vec_dot_pq2_0_q8_0(blocks(row), blocks(&y))
                } else {
                    ours.vec_dot_ptq1_0_q8_0(blocks(row), blocks(&y))
                };
            }
        };
        let run_ref = |out: &mut [f32]| {
            for (r, o) in out.iter_mut().enumerate() {
                let row = x[r * rb..].as_ptr() as *const c_void;
                // SAFETY: row r holds cols/128 blocks and y cols/32; `o` is one float.
                unsafe { reference(cols as i32, o, 0, row, 0, y.as_ptr() as *const c_void, 0, 1) };
            }
        };
        let (mut a, mut b) = (vec![0f32; rows], vec![0f32; rows]);
        run_ours(&mut a);
        run_ref(&mut b);
        let same = a
            .iter()
            .zip(&b)
            .filter(|(p, q)| p.to_bits() == q.to_bits())
            .count();
        let (mut to, mut tr) = (Vec::new(), Vec::new());
        for rep in 0..9 {
            let time = |f: &dyn Fn(&mut [f32]), out: &mut [f32]| {
                let t = Instant::now();
                f(out);
                t.elapsed().as_secs_f64() * 1e3
            };
            if rep % 2 == 0 {
                to.push(time(&run_ours, &mut a));
                tr.push(time(&run_ref, &mut b));
            } else {
                tr.push(time(&run_ref, &mut b));
                to.push(time(&run_ours, &mut a));
            }
        }
        to.sort_by(|p, q| p.total_cmp(q));
        tr.sort_by(|p, q| p.total_cmp(q));
        println!(
            "{name} {rows}x{cols}: ours {:.3} ms, fork generic C {:.3} ms: {:.2}x; bit-identical rows {same}/{rows} ({:?})",
            to[4],
            tr[4],
            tr[4] / to[4],
            ours.isa
        );
    }
}
