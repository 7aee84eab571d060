#!/usr/bin/env bash
# Runs tests/concurrency.rs under ThreadSanitizer: nightly Rust with the standard library rebuilt with the
# sanitizer (so its OnceLock, atomics and threads are instrumented too), in its own target folder.
#
#   scripts/tsan.sh      exit 0 when the run passes, 1 when a test fails or TSan reports a race, 2 when nightly
#                        Rust with rust-src cannot be had (the reason is printed)
set -euo pipefail
cd "$(dirname "$0")/.."

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  timeout 600 rustup toolchain install nightly --profile minimal --component rust-src >/dev/null 2>&1 || true
fi
if ! rustup component list --toolchain nightly --installed 2>/dev/null | grep -q '^rust-src'; then
  timeout 600 rustup component add rust-src --toolchain nightly >/dev/null 2>&1 || true
fi
if ! rustup component list --toolchain nightly --installed 2>/dev/null | grep -q '^rust-src'; then
  echo "tsan.sh: SKIPPED: nightly Rust with rust-src could not be installed (ThreadSanitizer needs both)" >&2
  exit 2
fi
target=$(rustc -vV | sed -n 's/^host: //p')
# halt_on_error: the first report fails the run; the report itself names both accesses.
RUSTFLAGS="-Zsanitizer=thread" TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  cargo +nightly test -Zbuild-std --target "$target" --target-dir target/tsan --test concurrency "$@"
