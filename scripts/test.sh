#!/usr/bin/env bash
# Runs the checks.
#
#   scripts/test.sh           every check: formatting, clippy, and all tests (unit, against both stock builds,
#                             through the cdylib, the header's freshness, whole models through stock, preloaded
#                             and patched llama.cpp); the README's test command and CI's
#   scripts/test.sh --quick   the tier to run after every change: formatting, clippy, the unit tests, the bit
#                             tests against both stock builds, and one preloaded end-to-end run (minutes once the
#                             stock builds are cached)
#
# llama.cpp trees are built on first use into ~/.cache/ggml-lowbit (scripts/llama-cache.sh), each keyed by its
# version, flags and patches, and reused by every later run and every clone ("cached" in the log).
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
case "${1:-}" in
  "") ;;
  --quick) quick=1 ;;
  *) echo "usage: scripts/test.sh [--quick]" >&2; exit 2 ;;
esac
command -v cargo >/dev/null || { echo "test.sh: cargo not found (install Rust)" >&2; exit 2; }

started=$SECONDS
phase_start=$SECONDS
phase_name=
phase_times=()
elapsed() { local s=$1; if [ "$s" -ge 60 ]; then printf '%dm%02ds' $((s / 60)) $((s % 60)); else printf '%ds' "$s"; fi; }
# One line per phase: its name now, its time when the next begins; all of them again at the end.
phase() {
  end_phase
  phase_name=$1
  phase_start=$SECONDS
  echo "== $phase_name"
}
end_phase() {
  if [ -n "$phase_name" ]; then
    local t=$((SECONDS - phase_start))
    phase_times+=("$(printf '%8s  %s' "$(elapsed $t)" "$phase_name")")
  fi
  phase_name=
}
summary() {
  end_phase
  echo "== time per phase ($([ $quick = 1 ] && echo quick || echo full) suite, $(elapsed $((SECONDS - started))) in all)"
  printf '%s\n' "${phase_times[@]}"
}
trap summary EXIT

phase "stock llama.cpp builds (cached after the first run)"
scripts/stock-llama.sh haswell >/dev/null
scripts/stock-llama.sh x64 >/dev/null
scripts/stock-llama.sh haswell-dl >/dev/null

phase "the README's length and the product's wording"
scripts/check-docs.sh

phase "cargo fmt --check"
cargo fmt --all -- --check

phase "cargo clippy -D warnings"
cargo clippy --quiet --release --all-targets -- -D warnings

phase "cargo build --release"
# The cdylib is only rebuilt by `cargo build`; the tests refuse a stale one.
cargo build --quiet --release

# Runs `cargo test --release ARGS`, printing its output and one line of totals; returns its status.
run_tests() {
  local log status
  log=$(mktemp)
  set +e
  cargo test --release --no-fail-fast "$@" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  set -e
  awk '/^test result:/ { for (i = 1; i < NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
       END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
  rm -f "$log"
  return "$status"
}

if [ $quick = 1 ]; then
  phase "unit tests and the bit tests against both stock builds"
  run_tests --lib --test stock_bits
  phase "one preloaded end-to-end run (a tiny model through the DL build)"
  run_tests --test e2e -- --exact backend_dl_build_gives_identical_outputs_and_the_probe_finds_the_dlopened_backend
  exit 0
fi

phase "patched llama.cpp builds (ggml-patch/cpu.patch; the stand-in fork, plain and with the library)"
for v in haswell x64 fork-haswell fork-x64 fork-lowbit-haswell fork-lowbit-x64; do
  scripts/patched-llama.sh "$v" >/dev/null
done

phase "cargo test --release (every tier)"
run_tests

phase "ThreadSanitizer over tests/concurrency.rs (nightly Rust)"
set +e
scripts/tsan.sh --quiet
tsan=$?
set -e
case $tsan in
  0) ;;
  2) echo "SKIPPED: the ThreadSanitizer run (nightly Rust with rust-src could not be installed; see above)" ;;
  *) exit "$tsan" ;;
esac
