//! Results tables written from `speed` and `e2e` reports. A markdown file marks each generated table with the
//! report it comes from:
//!
//! ```text
//! <!-- results: docs/results/<machine>.json -->
//! …the table, written by `ggml-lowbit-ab tables --write`…
//! <!-- /results -->
//! ```
//!
//! `ggml-lowbit-ab tables FILE…` regenerates every marked block from its report and fails when one differs,
//! so a table in the README or the docs is always the one its committed report gives.

use std::path::Path;

use super::speed::SpeedRow;

/// A `speed` report (`target/ab/speed.json`): where and how it was measured, and its rows.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct Report {
    pub date: String,
    pub cpu: String,
    pub cores: usize,
    pub stock_build: String,
    pub isa: String,
    pub forms: String,
    pub reps: usize,
    pub rows: Vec<SpeedRow>,
}

/// One line of `e2e`'s table: a check (text, perplexity, speed, bandwidth) through the four configurations.
#[derive(Clone, Debug, tabled::Tabled, serde::Serialize, serde::Deserialize)]
pub struct E2eLine {
    pub build: String,
    pub check: String,
    pub stock: String,
    #[tabled(rename = "preload, vec_dot only")]
    pub vec_dot: String,
    #[tabled(rename = "preload with mul_mat hook")]
    pub hook: String,
    #[tabled(rename = "patched build (ggml-patch)")]
    pub patched: String,
    pub result: String,
}

/// An `e2e` report (`target/ab/e2e.json`): where it ran, on which model, and its table.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct E2eReport {
    pub date: String,
    pub cpu: String,
    pub cores: usize,
    pub model: String,
    pub lines: Vec<E2eLine>,
}

/// The table of an `e2e` report, after a line saying where and on what it ran.
pub fn e2e_table(r: &E2eReport) -> String {
    use tabled::settings::Style;
    format!(
        "Measured {} on {} ({} cores), model `{}`.\n\n{}\n",
        r.date,
        r.cpu,
        r.cores,
        r.model,
        tabled::Table::new(&r.lines).with(Style::markdown())
    )
}

/// The format a symbol's rows measure, as the tables name it: `ggml_vec_dot_q2_0_q8_0` and
/// `ggml_lowbit_mul_mat_q2_0_q8_0` → `Q2_0`, `quantize_row_q8_K` → `quantize q8_K`.
fn format_of(symbol: &str) -> String {
    if let Some(target) = symbol.strip_prefix("quantize_row_") {
        return format!("quantize {}", target.replace('k', "K"));
    }
    let rest = symbol
        .strip_prefix("ggml_vec_dot_")
        .or_else(|| symbol.strip_prefix("ggml_lowbit_mul_mat_"))
        .unwrap_or(symbol);
    let weights = rest.rsplit_once("_q8_").map_or(rest, |(w, _)| w);
    weights.to_uppercase()
}

/// `a–b×` of the ratios (one value when they round alike), `—` for none.
fn ratio_range(ratios: &[f64]) -> String {
    if ratios.is_empty() {
        return "—".to_string();
    }
    let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = (format!("{lo:.2}"), format!("{hi:.2}"));
    if lo == hi {
        format!("{lo}×")
    } else {
        format!("{lo}–{hi}×")
    }
}

/// The results table of one report: a line saying where and how it was measured (the kernel forms stay in the
/// report), then per format (in the
/// report's order) the ratio ranges of the per-call export and of the whole product, on one thread and on
/// every core, and what the ratios are against.
pub fn results_table(r: &Report) -> String {
    let mut formats: Vec<String> = Vec::new();
    for row in &r.rows {
        let f = format_of(&row.symbol);
        if !formats.contains(&f) {
            formats.push(f);
        }
    }
    let max_threads = r.rows.iter().map(|row| row.threads).max().unwrap_or(1);
    let mut out = format!(
        "Measured {} on {} ({} cores), stock {}, ours {}; {} interleaved repetitions per row, medians.\n\n",
        r.date, r.cpu, r.cores, r.stock_build, r.isa, r.reps
    );
    let many = format!("{max_threads} threads");
    out.push_str(&format!(
        "| format | against | per-call, 1 thread | whole product, 1 thread | per-call, {many} | whole product, {many} |\n"
    ));
    out.push_str("|---|---|---|---|---|---|\n");
    for f in &formats {
        let of = |whole: bool, threads: usize| -> Vec<f64> {
            r.rows
                .iter()
                .filter(|row| format_of(&row.symbol) == *f)
                .filter(|row| row.symbol.starts_with("ggml_lowbit_mul_mat_") == whole)
                .filter(|row| row.threads == threads)
                .map(|row| row.ratio)
                .collect()
        };
        let against = r
            .rows
            .iter()
            .find(|row| format_of(&row.symbol) == *f)
            .map_or(String::new(), |row| {
                // Rows of a whole product name the stock loop they stand against; the format's column says it.
                row.baseline
                    .split_once(',')
                    .map_or(row.baseline.clone(), |(b, _)| b.to_string())
            });
        let multi = |whole| {
            if max_threads > 1 {
                ratio_range(&of(whole, max_threads))
            } else {
                "—".to_string()
            }
        };
        out.push_str(&format!(
            "| {f} | {against} | {} | {} | {} | {} |\n",
            ratio_range(&of(false, 1)),
            ratio_range(&of(true, 1)),
            multi(false),
            multi(true),
        ));
    }
    out
}

const OPEN: &str = "<!-- results: ";
const CLOSE: &str = "<!-- /results -->";

/// `text` with every marked block regenerated from its report (paths relative to `root`).
pub fn regenerate(text: &str, root: &Path) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    // A marker is a line of its own: one quoted inside a sentence is text.
    let next_marker = |t: &str| {
        let mut from = 0;
        while let Some(i) = t[from..].find(OPEN) {
            let at = from + i;
            if at == 0 || t.as_bytes()[at - 1] == b'\n' {
                return Some(at);
            }
            from = at + OPEN.len();
        }
        None
    };
    while let Some(start) = next_marker(rest) {
        let line_end = rest[start..]
            .find('\n')
            .map(|i| start + i + 1)
            .ok_or("a results marker without a line end")?;
        let marker = rest[start..line_end].trim_end();
        let path = marker
            .strip_prefix(OPEN)
            .and_then(|m| m.strip_suffix("-->"))
            .map(str::trim)
            .ok_or_else(|| format!("malformed marker {marker:?}"))?;
        let end = rest[line_end..]
            .find(CLOSE)
            .map(|i| line_end + i)
            .ok_or_else(|| format!("{marker:?} has no {CLOSE}"))?;
        let json = std::fs::read_to_string(root.join(path))
            .map_err(|e| format!("cannot read {path}: {e}"))?;
        let table = if let Ok(report) = serde_json::from_str::<E2eReport>(&json) {
            e2e_table(&report)
        } else {
            let report: Report = serde_json::from_str(&json)
                .map_err(|e| format!("{path} is neither a speed nor an e2e report: {e}"))?;
            results_table(&report)
        };
        out.push_str(&rest[..line_end]);
        out.push_str(&table);
        out.push_str(&rest[end..end + CLOSE.len()]);
        rest = &rest[end + CLOSE.len()..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(symbol: &str, threads: usize, ratio: f64) -> SpeedRow {
        SpeedRow {
            symbol: symbol.into(),
            shape: "4096x4096".into(),
            threads,
            reps: 3,
            ours_median_ms: 1.0,
            stock_median_ms: ratio,
            ratio,
            baseline: "haswell".into(),
            served: None,
        }
    }

    fn report() -> Report {
        Report {
            date: "2026-12-06".into(),
            cpu: "Some CPU".into(),
            cores: 2,
            stock_build: "haswell".into(),
            isa: "avx512".into(),
            forms: "none".into(),
            reps: 3,
            rows: vec![
                row("ggml_vec_dot_q2_0_q8_0", 1, 9.5),
                row("ggml_vec_dot_q2_0_q8_0", 1, 11.25),
                row("ggml_vec_dot_q2_0_q8_0", 2, 10.0),
                row("ggml_lowbit_mul_mat_q2_0_q8_0", 1, 20.0),
                row("quantize_row_q8_K", 1, 3.0),
            ],
        }
    }

    #[test]
    fn symbols_name_their_formats() {
        assert_eq!(format_of("ggml_vec_dot_iq2_xxs_q8_K"), "IQ2_XXS");
        assert_eq!(format_of("ggml_lowbit_mul_mat_tq1_0_q8_K"), "TQ1_0");
        assert_eq!(format_of("ggml_vec_dot_q2_0_q8_0"), "Q2_0");
        assert_eq!(format_of("quantize_row_q8_0"), "quantize q8_0");
        assert_eq!(format_of("quantize_row_q8_K"), "quantize q8_K");
    }

    #[test]
    fn a_table_has_one_line_per_format_with_its_ranges() {
        let t = results_table(&report());
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[0].starts_with("Measured 2026-12-06 on Some CPU (2 cores)"),
            "{t}"
        );
        assert_eq!(
            lines[4], "| Q2_0 | haswell | 9.50–11.25× | 20.00× | 10.00× | — |",
            "{t}"
        );
        assert_eq!(
            lines[5], "| quantize q8_K | haswell | 3.00× | — | — | — |",
            "{t}"
        );
        assert_eq!(lines.len(), 6, "{t}");
    }

    #[test]
    fn e2e_reports_render_their_lines() {
        let r = E2eReport {
            date: "2026-12-06".into(),
            cpu: "Some CPU".into(),
            cores: 2,
            model: "m.gguf".into(),
            lines: vec![E2eLine {
                build: "haswell".into(),
                check: "llama-bench tg4, 2 thread(s)".into(),
                stock: "1.00 tok/s".into(),
                vec_dot: "2.00 tok/s (2.00x)".into(),
                hook: "3.00 tok/s (3.00x)".into(),
                patched: "-".into(),
                result: "speed".into(),
            }],
        };
        let t = e2e_table(&r);
        assert!(
            t.starts_with("Measured 2026-12-06 on Some CPU (2 cores), model `m.gguf`.\n\n| build"),
            "{t}"
        );
        let squeezed = t
            .split(' ')
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            squeezed.contains(
                "| haswell | llama-bench tg4, 2 thread(s) | 1.00 tok/s | 2.00 tok/s (2.00x) |"
            ),
            "{t}"
        );
        let back: E2eReport = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(e2e_table(&back), t);
    }

    #[test]
    fn marked_blocks_are_regenerated_and_the_rest_kept() {
        let dir = std::env::temp_dir().join(format!("ggml-lowbit-results-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let json = serde_json::json!({
            "date": "2026-12-06", "cpu": "Some CPU", "cores": 2, "stock_build": "haswell", "isa": "avx512",
            "forms": "none", "reps": 3, "rows": report().rows,
        });
        std::fs::write(dir.join("r.json"), json.to_string()).unwrap();
        let text = "before `<!-- results: x.json -->` quoted\n<!-- results: r.json -->\nstale\n<!-- /results -->\nafter\n";
        let fresh = regenerate(text, &dir).unwrap();
        assert!(
            fresh.starts_with("before `<!-- results: x.json -->` quoted\n<!-- results: r.json -->\nMeasured 2026-12-06"),
            "{fresh}"
        );
        assert!(
            fresh.ends_with("| — | — | — |\n<!-- /results -->\nafter\n"),
            "{fresh}"
        );
        assert!(!fresh.contains("stale"));
        assert_eq!(regenerate(&fresh, &dir).unwrap(), fresh);
        assert!(regenerate("<!-- results: missing.json -->\n<!-- /results -->\n", &dir).is_err());
        assert!(regenerate("<!-- results: r.json -->\nno end\n", &dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
