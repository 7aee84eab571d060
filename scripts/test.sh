#!/usr/bin/env bash
# Runs every check: formatting, clippy, and all tests (unit, against both stock builds, through the cdylib,
# the header's freshness, whole models through stock, preloaded and patched llama.cpp). Builds the pinned stock
# llama.cpp first (cached; installs cmake/ninja if missing) and the patched one (under target/).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo >/dev/null || { echo "test.sh: cargo not found (install Rust)" >&2; exit 2; }

echo "== stock builds (cached after the first run)"
scripts/stock-llama.sh haswell
scripts/stock-llama.sh x64
scripts/stock-llama.sh haswell-dl

echo "== the README's length and the product's wording"
scripts/check-docs.sh

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy -D warnings"
cargo clippy --release --all-targets -- -D warnings

echo "== cargo test --release"
# The cdylib is only rebuilt by `cargo build`; the tests refuse a stale one.
cargo build --release
echo "== patched llama.cpp builds (ggml-patch/cpu.patch, linked against the library; rebuilt when the patch changes)"
scripts/patched-llama.sh haswell
scripts/patched-llama.sh x64
echo "== the stand-in fork (ggml-patch/fork-types.patch: PQ2_0/PTQ1_0 through bench/c), plain and with the library"
for v in fork-haswell fork-x64 fork-lowbit-haswell fork-lowbit-x64; do scripts/patched-llama.sh "$v"; done
log=$(mktemp)
set +e
cargo test --release 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
summary=$(awk '/^test result:/ { for (i = 1; i < NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
               END { printf "tests: %d passed, %d failed", p, f }' "$log")
rm -f "$log"
echo "$summary"
exit "$status"
