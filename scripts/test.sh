#!/usr/bin/env bash
# Runs every check: formatting, clippy, and all tests (unit, against both stock builds, through the cdylib,
# the header's freshness). Builds the pinned stock llama.cpp first (cached; installs cmake/ninja if missing).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo >/dev/null || { echo "test.sh: cargo not found (install Rust)" >&2; exit 2; }

echo "== stock builds (cached after the first run)"
scripts/stock-llama.sh haswell
scripts/stock-llama.sh x64

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy -D warnings"
cargo clippy --release --all-targets -- -D warnings

echo "== cargo test --release"
cargo build --release
cargo test --release
