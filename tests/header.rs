//! `include/ggml-lowbit.h` is generated from `src/ffi.rs` by cbindgen and committed; this test fails when it is
//! stale. `GGML_LOWBIT_BLESS=1` rewrites it instead.

use std::path::Path;

#[test]
fn header_is_in_sync_with_the_exports() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_crate(root)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let path = root.join("include/ggml-lowbit.h");
    if std::env::var_os("GGML_LOWBIT_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write header");
        return;
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/ggml-lowbit.h is stale: run GGML_LOWBIT_BLESS=1 cargo test --release --test header"
    );
    let text = String::from_utf8(generated).unwrap();
    for sym in [
        "ggml_vec_dot_q2_0_q8_0",
        "quantize_row_q8_0",
        "dequantize_row_q2_0",
    ] {
        assert!(text.contains(sym), "{sym} missing from the header");
    }
}
