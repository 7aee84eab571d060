#!/usr/bin/env bash
# Checks the project's text speaks of the product: the README stays short enough to read in five minutes, and the
# README, sources, scripts and patches carry no process words (work history belongs in git log).
set -euo pipefail
cd "$(dirname "$0")/.."

words=$(wc -w < README.md)
if [ "$words" -gt 1500 ]; then
  echo "check-docs.sh: README.md has $words words (at most 1500)" >&2
  exit 1
fi
pattern='\bsessions?\b|\bstop [0-9]+|\bissue [0-9]+|\bissue-[0-9]+'
if grep -rnIiE "$pattern" README.md src tests bench scripts ggml-patch include build.rs Cargo.toml \
     --exclude=check-docs.sh; then
  echo "check-docs.sh: process words above (history goes in git log, not in the product's files)" >&2
  exit 1
fi
echo "check-docs.sh: README.md $words words; no process words"
