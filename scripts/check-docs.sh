#!/usr/bin/env bash
# Checks the project's text speaks of the product: the README stays short enough to read in five minutes; the
# README, docs, sources, scripts and patches carry no process words (work history belongs in git log); and the
# results tables in the README and docs are the ones their committed reports give (regenerated and compared).
set -euo pipefail
cd "$(dirname "$0")/.."

words=$(wc -w < README.md)
if [ "$words" -gt 1500 ]; then
  echo "check-docs.sh: README.md has $words words (at most 1500)" >&2
  exit 1
fi
pattern='\bsessions?\b|\bstop [0-9]+|\bissue [0-9]+|\bissue-[0-9]+'
if grep -rnIiE "$pattern" README.md docs src tests bench scripts ggml-patch include build.rs Cargo.toml \
     --exclude=check-docs.sh; then
  echo "check-docs.sh: process words above (history goes in git log, not in the product's files)" >&2
  exit 1
fi
if ! cargo run --release --quiet --bin ggml-lowbit-ab -- tables README.md docs/*.md; then
  echo "check-docs.sh: a results table differs from its report (docs/results/*.json)" >&2
  exit 1
fi
echo "check-docs.sh: README.md $words words; no process words; results tables current"
