#!/usr/bin/env bash
# The main job: builds the library and the A/B harness, builds the pinned stock llama.cpp on first use, then
#   1. bits: 200,000 random and adversarial cases per symbol against both stock builds (exit 1 on any mismatch);
#   2. speed: our symbols against stock haswell on the Bonsai-8B shapes, side by side, one thread and all.
# Prints a short summary (per symbol: comparisons and mismatches, then rows and min/median ratio); the full tables
# are in target/ab/bits.md and target/ab/speed.{md,json,svg}.
# Extra arguments go to `speed` (e.g. --reps 11 --shapes 4096x4096).
# Stock llama.cpp builds go to ~/.cache/ggml-lowbit (one line each; compiler output in a log file there).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
elapsed() { local s=$((SECONDS - $1)); if [ "$s" -ge 60 ]; then printf '%dm%02ds' $((s / 60)) $((s % 60)); else printf '%ds' "$s"; fi; }
echo "== [1/4] building the library and the harness"
cargo build --release
echo "== [2/4] stock llama.cpp builds (cached after the first run)"
scripts/stock-llama.sh haswell >/dev/null
scripts/stock-llama.sh x64 >/dev/null
echo "== [3/4] bits against both stock builds ($(elapsed $started) so far)"
mkdir -p target/ab
set +e
target/release/ggml-lowbit-ab bits > target/ab/bits.md
bits_status=$?
set -e
echo "== bits summary (full table: target/ab/bits.md)"
awk -F'|' 'NF >= 7 && $5 ~ /^ *[0-9]+ *$/ {
             s = $3; gsub(/ /, "", s)
             if (!(s in cases)) order[n++] = s
             cases[s] += $5; bad[s] += $6
           }
           /^bits:/ { total = $0 }
           END {
             printf "%-40s %12s %11s\n", "symbol", "comparisons", "mismatches"
             for (i = 0; i < n; i++) printf "%-40s %12d %11d\n", order[i], cases[order[i]], bad[order[i]]
             print total
           }' target/ab/bits.md
if [ "$bits_status" -ne 0 ]; then
  echo "ab.sh: bits found mismatches (exit $bits_status); see target/ab/bits.md" >&2
  exit "$bits_status"
fi
echo "== [4/4] speed against stock haswell ($(elapsed $started) so far)"
target/release/ggml-lowbit-ab speed "$@"
echo "== done in $(elapsed $started)"
