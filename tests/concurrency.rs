//! Many threads through the exported C symbols at once, in one process: the rlib's exports are the cdylib's
//! code, so their first calls race the library's configuration (`interpose::config`) and each symbol's direct
//! path (`VecDotSymbol::direct`) as a preloaded library's do when ggml's thread pool starts. Every result must
//! equal the configured table's, computed afterwards on one thread. `scripts/tsan.sh` runs this file under
//! ThreadSanitizer (nightly Rust, the standard library rebuilt with it), which also reports any data race.

use std::ffi::c_void;
use std::sync::Barrier;

use ggml_lowbit::ffi;
use ggml_lowbit::formats::q1_0::BlockQ1_0;
use ggml_lowbit::formats::q2_0::BlockQ2_0;
use ggml_lowbit::formats::q8_0::BlockQ8_0;
use ggml_lowbit::formats::q8_k::BlockQ8K;
use ggml_lowbit::formats::tq2_0::BlockTQ2_0;
use ggml_lowbit::formats::{blocks, blocks_mut};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const THREADS: usize = 32;
const ROWS: usize = 40;

/// One thread's rows and what the exports gave for them.
struct Work {
    x: Vec<u8>,
    y8: Vec<u8>,
    yk: Vec<u8>,
    floats: Vec<f32>,
    dots: Vec<[u32; 3]>,
    quantized: Vec<u8>,
}

/// `len` random bytes whose f16 scales (at `scale_at` of each `block`-byte block) are ordinary numbers.
fn row(rng: &mut SmallRng, blocks: usize, block: usize, scale_at: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..blocks * block).map(|_| rng.gen()).collect();
    for b in 0..blocks {
        let d: u16 = 0x2000 + rng.gen_range(0..0x1800);
        v[b * block + scale_at..b * block + scale_at + 2].copy_from_slice(&d.to_le_bytes());
    }
    v
}

fn work(seed: u64) -> Work {
    let mut rng = SmallRng::seed_from_u64(seed);
    let nb = 8; // 512 Q2_0 weights, 1024 Q1_0 weights, 2048 TQ2_0 weights per row
    let mut yk = row(&mut rng, 8, std::mem::size_of::<BlockQ8K>(), 0);
    for b in 0..8 {
        // q8_K's scale is an f32 at the start.
        let d = 0.01f32 * (1 + b) as f32;
        yk[b * 292..b * 292 + 4].copy_from_slice(&d.to_le_bytes());
    }
    Work {
        x: row(&mut rng, nb * 4, 18, 0),
        y8: row(&mut rng, nb * 4, 34, 0),
        yk,
        floats: (0..1024).map(|_| rng.gen_range(-3.0f32..3.0)).collect(),
        dots: Vec::new(),
        quantized: vec![0; 32 * 34],
    }
}

type VecDot =
    unsafe extern "C" fn(i32, *mut f32, usize, *const c_void, usize, *const c_void, usize, i32);

fn call(f: VecDot, n: i32, x: &[u8], y: &[u8]) -> u32 {
    let mut s = f32::NAN;
    // SAFETY: `x` and `y` hold the blocks of `n` weights the symbol reads (`work`'s sizes), `s` is writable.
    unsafe { f(n, &mut s, 0, x.as_ptr().cast(), 0, y.as_ptr().cast(), 0, 1) };
    s.to_bits()
}

#[test]
fn first_calls_from_many_threads_give_the_tables_bits() {
    let start = Barrier::new(THREADS);
    let mut all: Vec<Work> = (0..THREADS as u64).map(work).collect();
    std::thread::scope(|s| {
        for w in all.iter_mut() {
            let start = &start;
            s.spawn(move || {
                start.wait();
                for r in 0..ROWS {
                    let k = 1 + r % 8; // 1..8 blocks of each format
                    w.dots.push([
                        call(ffi::ggml_vec_dot_q2_0_q8_0, 64 * k as i32, &w.x, &w.y8),
                        call(
                            ffi::ggml_vec_dot_q1_0_q8_0,
                            128 * (k / 2).max(1) as i32,
                            &w.x,
                            &w.y8,
                        ),
                        call(ffi::ggml_vec_dot_tq2_0_q8_K, 256 * k as i32, &w.x, &w.yk),
                    ]);
                }
                // SAFETY: 1024 floats in, room for 32 q8_0 blocks out.
                unsafe {
                    ffi::quantize_row_q8_0(w.floats.as_ptr(), w.quantized.as_mut_ptr().cast(), 1024)
                };
            });
        }
    });
    let k = ggml_lowbit::interpose::active();
    for (t, w) in all.iter().enumerate() {
        for (r, got) in w.dots.iter().enumerate() {
            let nb = 1 + r % 8;
            let q1 = (nb / 2).max(1);
            let want = [
                k.vec_dot_q2_0_q8_0(
                    &blocks::<BlockQ2_0>(&w.x)[..nb],
                    &blocks::<BlockQ8_0>(&w.y8)[..2 * nb],
                ),
                k.vec_dot_q1_0_q8_0(
                    &blocks::<BlockQ1_0>(&w.x)[..q1],
                    &blocks::<BlockQ8_0>(&w.y8)[..4 * q1],
                ),
                k.vec_dot_tq2_0_q8_k(
                    &blocks::<BlockTQ2_0>(&w.x[..nb * 66])[..nb],
                    &blocks::<BlockQ8K>(&w.yk)[..nb],
                ),
            ]
            .map(f32::to_bits);
            assert_eq!(*got, want, "thread {t} row {r}");
        }
        let mut want = vec![0u8; 32 * 34];
        k.quantize_row_q8_0(&w.floats, blocks_mut::<BlockQ8_0>(&mut want));
        assert_eq!(w.quantized, want, "thread {t}: quantize_row_q8_0");
    }
}
