#!/usr/bin/env bash
# Prints, as its last line on stdout, the folder holding QEMU's x86-64 user-mode emulator (qemu-x86_64),
# installing Debian's qemu-user with apt-get where it is missing. The old-CPU tests (tests/qemu.rs) run the
# library under CPU models that lack AVX2 or AVX-512: QEMU 7.2's TCG executes SSE4.2, AVX, AVX2, FMA and F16C
# and raises SIGILL for what the model lacks.
#
#   scripts/qemu-user.sh x86_64
set -euo pipefail

die() { echo "qemu-user.sh: $*" >&2; exit 2; }
[ "${1:-x86_64}" = x86_64 ] || die "usage: scripts/qemu-user.sh x86_64"

if ! command -v qemu-x86_64 >/dev/null; then
  command -v apt-get >/dev/null || die "qemu-x86_64 is missing and apt-get is not available"
  root=${GGML_LOWBIT_CACHE_DIR:-$HOME/.cache/ggml-lowbit}
  mkdir -p "$root"
  log="$root/apt-get-qemu.log"
  echo "qemu-user.sh: installing qemu-user with apt-get (log: $log)" >&2
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq qemu-user; } >"$log" 2>&1 || {
    tail -n 20 "$log" >&2
    die "apt-get install qemu-user failed (log: $log)"
  }
fi
dirname "$(command -v qemu-x86_64)"
