#!/usr/bin/env bash
# The main job: builds the library and the A/B harness, builds the pinned stock llama.cpp on first use, then
#   1. bits: 200,000 random and adversarial cases per symbol against both stock builds (exit 1 on any mismatch);
#   2. speed: our symbols against stock haswell on the Bonsai-8B shapes, side by side, one thread and all;
#      report in target/ab/speed.{md,json,svg}.
# Extra arguments go to `speed` (e.g. --reps 11 --shapes 4096x4096).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release
target/release/ggml-lowbit-ab bits
target/release/ggml-lowbit-ab speed "$@"
