//! Tier 2, data: every IQ grid entry and sign byte of `src/formats/iq_grids.rs` against the arrays of the pinned
//! `ggml-common.h`. `GGML_LOWBIT_BLESS=1` rewrites `src/formats/grids/*.bin` from the pinned source instead.

use ggml_lowbit::formats::iq_grids::{GRID_TABLES, KSIGNS_IQ2XS};
use std::path::Path;

/// The values of `GGML_TABLE_BEGIN(type, name, N) … GGML_TABLE_END()` in `text`, checked to be `N` of them.
fn pinned_table(text: &str, name: &str) -> Vec<u64> {
    let head = format!(", {name}, ");
    let start = text
        .find(&head)
        .unwrap_or_else(|| panic!("{name} not in ggml-common.h"));
    let line_end = start + text[start..].find('\n').unwrap();
    let size: usize = text[start + head.len()..line_end]
        .trim_end_matches(')')
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{name}: size: {e}"));
    let end = line_end + text[line_end..].find("GGML_TABLE_END()").unwrap();
    let values: Vec<u64> = text[line_end..end]
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|t| !t.is_empty())
        .map(|t| match t.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => t.parse(),
        })
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(values.len(), size, "{name}: count");
    values
}

#[test]
fn grids_and_sign_tables_match_the_pinned_source() {
    let src = ggml_lowbit::stock::source_dir().unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read_to_string(src.join("ggml/src/ggml-common.h")).unwrap();
    let bless = std::env::var_os("GGML_LOWBIT_BLESS").is_some();
    for t in &GRID_TABLES {
        let pinned = pinned_table(&text, t.name);
        let bytes: Vec<u8> = pinned
            .iter()
            .flat_map(|v| v.to_le_bytes()[..t.width].to_vec())
            .collect();
        if bless {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("src/formats/grids")
                .join(format!("{}.bin", t.name));
            std::fs::write(&path, &bytes).unwrap();
            continue;
        }
        assert_eq!(t.bytes.len(), bytes.len(), "{}: size", t.name);
        for (i, (ours, theirs)) in t
            .bytes
            .chunks(t.width)
            .zip(bytes.chunks(t.width))
            .enumerate()
        {
            assert_eq!(ours, theirs, "{}[{i}]", t.name);
        }
    }
    let ksigns = pinned_table(&text, "ksigns_iq2xs");
    for (i, (&ours, &theirs)) in KSIGNS_IQ2XS.iter().zip(&ksigns).enumerate() {
        assert_eq!(ours as u64, theirs, "ksigns_iq2xs[{i}]");
    }
    let kmask = pinned_table(&text, "kmask_iq2xs");
    assert_eq!(kmask, (0..8).map(|j| 1u64 << j).collect::<Vec<_>>());
}
