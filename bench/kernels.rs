//! criterion benches: our Q2_0 dot product and q8_0 quantizer against the stock haswell library, on the
//! Bonsai-8B 4096-column and 12288-column rows (one row per iteration, as ggml calls them). The stock build
//! comes from `scripts/stock-llama.sh` (built on first use).

use std::ffi::c_void;

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use ggml_lowbit::ab::bits::CSymbols;
use ggml_lowbit::ab::cases::{Gen, Q2_0_BYTES, Q8_0_BYTES};
use ggml_lowbit::formats::blocks;
use ggml_lowbit::interpose::active;
use ggml_lowbit::stock::StockLib;
use ggml_lowbit::FloatOrder;
use rand::Rng;

fn bench(c: &mut Criterion) {
    let stock = StockLib::load(FloatOrder::Haswell).expect("stock haswell build");
    let st = CSymbols::from_stock(&stock).expect("stock symbols");
    let ours = active();
    let mut group = c.benchmark_group("q2_0_row");
    for cols in [4096usize, 12288] {
        let nb = cols / 64;
        let mut g = Gen::new(cols as u64);
        let mut x = vec![0u8; nb * Q2_0_BYTES];
        let mut y = vec![0u8; 2 * nb * Q8_0_BYTES];
        g.q2_0_row(nb, &mut x);
        g.q8_0_row(2 * nb, &mut y);
        group.bench_with_input(BenchmarkId::new("ours", cols), &cols, |b, _| {
            b.iter(|| ours.vec_dot_q2_0_q8_0(blocks(black_box(&x)), blocks(black_box(&y))))
        });
        group.bench_with_input(BenchmarkId::new("stock", cols), &cols, |b, &n| {
            b.iter(|| {
                let mut s = 0f32;
                // SAFETY: x and y hold the blocks for n columns.
                unsafe {
                    (st.vec_dot_q2_0_q8_0)(
                        n as i32,
                        &mut s,
                        0,
                        x.as_ptr() as *const c_void,
                        0,
                        y.as_ptr() as *const c_void,
                        0,
                        1,
                    )
                };
                black_box(s)
            })
        });
    }
    group.finish();
    let mut group = c.benchmark_group("quantize_row_q8_0");
    for cols in [4096usize, 12288] {
        let mut g = Gen::new(1);
        let x: Vec<f32> = (0..cols).map(|_| g.rng.gen_range(-3.0f32..3.0)).collect();
        let mut y = vec![0u8; cols / 32 * Q8_0_BYTES];
        group.bench_with_input(BenchmarkId::new("ours", cols), &cols, |b, _| {
            b.iter(|| {
                ours.quantize_row_q8_0(black_box(&x), ggml_lowbit::formats::blocks_mut(&mut y))
            })
        });
        group.bench_with_input(BenchmarkId::new("stock", cols), &cols, |b, &n| {
            // SAFETY: x has n floats, y room for n/32 blocks.
            b.iter(|| unsafe {
                (st.quantize_row_q8_0)(
                    black_box(x.as_ptr()),
                    y.as_mut_ptr() as *mut c_void,
                    n as i64,
                )
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
