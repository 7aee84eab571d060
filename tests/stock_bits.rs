//! Tier 2: the scalar models and every ISA kernel (through the rlib) against the real stock libraries, both
//! builds, 200,000 cases per symbol per build (50,000 whole products for each tile export, every element
//! against a stock vec_dot). The stock builds come from `scripts/stock-llama.sh` (cached);
//! if one cannot be built the test fails, it never skips.

use ggml_lowbit::ab::bits;
use ggml_lowbit::stock::StockLib;
use ggml_lowbit::FloatOrder;

fn check(order: FloatOrder, seed: u64) {
    let stock =
        StockLib::load(order).unwrap_or_else(|e| panic!("stock {} unavailable: {e}", order.name()));
    let subjects = bits::rlib_subjects(order);
    assert!(!subjects.is_empty());
    let reports = bits::run(&stock, &subjects, 200_000, seed, || {}).expect("stock symbols");
    for r in &reports {
        println!(
            "{} {} {}: {} cases, {} mismatches ({} of NaN bits), {} NaN results equal",
            r.build, r.symbol, r.subject, r.cases, r.mismatches, r.nan_mismatches, r.nan_equal
        );
        // The tile products run every fourth case, each one a whole product of up to 9 × 3 elements; the other
        // symbols get the lengths ggml never passes on top.
        let want = if r.symbol.starts_with("ggml_lowbit_mul_mat_") {
            50_000
        } else if r.symbol.starts_with("ggml_vec_dot_") {
            200_000 + bits::ODD_N.len() as u64
        } else {
            200_000 + bits::ODD_K.len() as u64
        };
        assert_eq!(r.cases, want, "{}", r.symbol);
    }
    let bad: Vec<_> = reports.iter().filter(|r| r.mismatches > 0).collect();
    assert!(bad.is_empty(), "mismatches: {:#?}", bad);
}

#[test]
fn rlib_is_bit_exact_with_stock_haswell() {
    check(FloatOrder::Haswell, 11);
}

#[test]
fn rlib_is_bit_exact_with_stock_x64() {
    check(FloatOrder::X64, 12);
}

/// The comparison itself can fail: a kernel with the other build's float order must be caught.
#[test]
fn bit_test_catches_the_wrong_float_order() {
    let stock = StockLib::load(FloatOrder::Haswell).expect("stock haswell");
    let wrong = vec![bits::Subject::Kernels(ggml_lowbit::dispatch::Kernels::new(
        ggml_lowbit::dispatch::Isa::Scalar,
        FloatOrder::X64,
    ))];
    let reports = bits::run(&stock, &wrong, 5_000, 3, || {}).expect("stock symbols");
    let dot = reports
        .iter()
        .find(|r| r.symbol == "ggml_vec_dot_q2_0_q8_0")
        .unwrap();
    let quant = reports
        .iter()
        .find(|r| r.symbol == "quantize_row_q8_0")
        .unwrap();
    assert!(
        dot.mismatches > 0,
        "the FMA and non-FMA chains must differ somewhere in 5000 cases"
    );
    let iq2_s = reports
        .iter()
        .find(|r| r.symbol == "ggml_vec_dot_iq2_s_q8_K")
        .unwrap();
    assert!(
        iq2_s.mismatches > 0,
        "the eight-lane and the sequential IQ2_S chains must differ somewhere in 5000 cases"
    );
    assert!(
        quant.mismatches > 0,
        "round-half-even and round-half-away must differ on the tie cases"
    );
}
