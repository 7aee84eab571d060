//! PQ2_0 has no stock build to compare with (PrismML's fork is not available here), so the fork's generic C is
//! written from the specification (`bench/c/pq2_0_generic.c`), compiled with and without FMA, and every instruction
//! set's kernel and the scalar model of each chain must give its bits, `to_bits()`, on random and adversarial
//! rows. Two NaN results count as equal.

mod common;

use std::ffi::c_void;

use ggml_lowbit::dispatch::{detected_isa, Isa, Kernels};
use ggml_lowbit::formats::blocks;
use ggml_lowbit::FloatOrder;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn check(order: FloatOrder, fma: bool) {
    let reference = common::fork_c::build(fma);
    let kernels: Vec<Kernels> = Isa::ALL
        .into_iter()
        .filter(|&i| i <= detected_isa())
        .map(|i| Kernels::new(i, order))
        .collect();
    let specials = [
        0x0000u16, 0x8000, 0x0001, 0x83ff, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x7c01,
    ];
    let mut rng = SmallRng::seed_from_u64(if fma { 11 } else { 12 });
    let (mut cases, mut nan_pairs) = (0, 0);
    for case in 0..50_000usize {
        let nb = 1 + case % 12;
        let scale = |rng: &mut SmallRng, base: u16| {
            if rng.gen_ratio(1, 40) {
                specials[rng.gen_range(0..specials.len())]
            } else {
                base + rng.gen_range(0..0x1400)
            }
        };
        let mut x = vec![0u8; nb * 34];
        for (b, blk) in x.chunks_exact_mut(34).enumerate() {
            blk[..2].copy_from_slice(&scale(&mut rng, 0x2000).to_le_bytes());
            for (j, q) in blk[2..].iter_mut().enumerate() {
                *q = match case % 4 {
                    0 => ((case / 4 + 7 * b + 31 * j) % 256) as u8,
                    1 => 0xff,
                    _ => rng.gen(),
                };
            }
        }
        let mut y = vec![0u8; 4 * nb * 34];
        for blk in y.chunks_exact_mut(34) {
            blk[..2].copy_from_slice(&scale(&mut rng, 0x2800).to_le_bytes());
            for q in &mut blk[2..] {
                *q = if case % 7 == 0 { 0x80 } else { rng.gen() };
            }
        }
        let mut want = 0f32;
        let n = (nb * 128) as i32;
        // SAFETY: x holds n/128 blocks and y n/32; `want` is one float.
        unsafe {
            (reference.vec_dot)(
                n,
                &mut want,
                0,
                x.as_ptr() as *const c_void,
                0,
                y.as_ptr() as *const c_void,
                0,
                1,
            )
        };
        for k in &kernels {
            let got = k.vec_dot_pq2_0_q8_0(blocks(&x), blocks(&y));
            if got.to_bits() != want.to_bits() {
                assert!(
                    got.is_nan() && want.is_nan(),
                    "{:?} {} case {case}: {got:e} vs {want:e}",
                    k.isa,
                    order.name()
                );
                nan_pairs += 1;
            }
            cases += 1;
        }
    }
    println!(
        "pq2_0 {} against C built with{} FMA: {cases} comparisons, {nan_pairs} NaN pairs",
        order.name(),
        if fma { "" } else { "out" }
    );
}

#[test]
fn pq2_0_matches_the_fork_generic_c_built_with_fma() {
    check(FloatOrder::Haswell, true);
}

#[test]
fn pq2_0_matches_the_fork_generic_c_built_without_fma() {
    check(FloatOrder::X64, false);
}

#[test]
fn the_two_c_builds_differ_so_the_check_can_fail() {
    let (a, b) = (common::fork_c::build(true), common::fork_c::build(false));
    let mut rng = SmallRng::seed_from_u64(3);
    let differ = (0..2000).any(|_| {
        let mut x = vec![0u8; 8 * 34];
        let mut y = vec![0u8; 32 * 34];
        rng.fill(&mut x[..]);
        rng.fill(&mut y[..]);
        for blk in x.chunks_exact_mut(34).chain(y.chunks_exact_mut(34)) {
            blk[..2].copy_from_slice(&(0x2400u16 + rng.gen_range(0..0x800)).to_le_bytes());
        }
        let (mut s, mut t) = (0f32, 0f32);
        // SAFETY: 8 blocks and 32 q8_0 blocks for n = 1024.
        unsafe {
            (a.vec_dot)(
                1024,
                &mut s,
                0,
                x.as_ptr() as *const c_void,
                0,
                y.as_ptr() as *const c_void,
                0,
                1,
            );
            (b.vec_dot)(
                1024,
                &mut t,
                0,
                x.as_ptr() as *const c_void,
                0,
                y.as_ptr() as *const c_void,
                0,
                1,
            );
        }
        s.to_bits() != t.to_bits()
    });
    assert!(
        differ,
        "the FMA and non-FMA builds of the reference never differed"
    );
}
