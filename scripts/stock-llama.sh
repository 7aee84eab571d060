#!/usr/bin/env bash
# Build the pinned stock llama.cpp (vendor/llama.cpp of the PyPI sdist llama-cpp-python==0.3.36) into a cache.
#
#   scripts/stock-llama.sh haswell|x64|haswell-dl|haswell-rpc|native
#
# haswell-rpc is the haswell build with llama.cpp's RPC backend (GGML_RPC=ON): its tools take --rpc, and it has
# ggml-rpc-server, the worker that computes layers a host sends it (docs/rpc.md).
#
# native is built for this CPU (GGML_NATIVE=ON, -march=native): the strongest stock build a user can make here,
# the reference for prefill speed. Its cache key holds this CPU's feature flags, and ccache stays off for it
# (objects compiled for one CPU must not serve another).
#
# haswell-dl is the haswell build the way release binaries load ggml: GGML_BACKEND_DL=ON, the CPU backend a module
# (libggml-cpu.so) that ggml dlopens at run time; it has the tools, not test-quantize-fns.
#
# Prints, as its last line on stdout, the folder holding libggml-cpu.so, libggml-base.so, test-quantize-fns,
# llama-completion and llama-perplexity (and, for haswell, llama-bench). Idempotent: a finished build is reused.
# Cache: $GGML_LOWBIT_STOCK_DIR, default $GGML_LOWBIT_CACHE_DIR/stock-0.3.36 (~/.cache/ggml-lowbit/stock-0.3.36);
# each build in <variant>-<key>, the key a hash of its version, flags and targets (scripts/llama-cache.sh).
# Progress is one line per build on stderr; compiler output goes to the build's log file.
set -euo pipefail

VERSION=0.3.36
SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e

die() { echo "stock-llama.sh: $*" >&2; exit 2; }

variant=${1:-}
backend_dl=OFF
native=OFF
extra=()
cpu_flags=
case "$variant" in
  native)
    isa=()
    native=ON
    cpu_flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
    tools=ON
    programs=(llama-bench llama-completion llama-perplexity) ;;
  haswell-dl)
    isa=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
         -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_SSE42=ON)
    tools=ON
    backend_dl=ON
    programs=(llama-bench llama-completion llama-perplexity) ;;
  haswell-rpc)
    isa=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
         -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_SSE42=ON)
    tools=ON
    extra=(-DGGML_RPC=ON)
    programs=(llama-bench llama-completion llama-perplexity ggml-rpc-server) ;;
  haswell)
    isa=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
         -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_SSE42=ON)
    tools=ON
    programs=(llama-bench llama-completion llama-perplexity test-quantize-fns) ;;
  x64)
    isa=(-DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF
         -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_SSE42=OFF)
    tools=ON
    programs=(llama-completion llama-perplexity test-quantize-fns) ;;
  *) die "usage: scripts/stock-llama.sh haswell|x64|haswell-dl|haswell-rpc|native" ;;
esac

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SCRIPT_NAME=stock-llama.sh
# shellcheck source=scripts/llama-cache.sh
. "$repo/scripts/llama-cache.sh"

root=${GGML_LOWBIT_STOCK_DIR:-$LLAMA_CACHE_ROOT/stock-$VERSION}
cmake_args=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON
  -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=$backend_dl -DGGML_NATIVE=$native -DGGML_OPENMP=OFF
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
  -DLLAMA_BUILD_TESTS=$([ "$backend_dl" = ON ] && echo OFF || echo ON) -DLLAMA_BUILD_TOOLS=$tools
  "${isa[@]}" "${extra[@]}")
targets=(ggml-cpu ggml-base "${programs[@]}")
# The build's key: what decides its output (the sdist is hash-checked, so its version stands for the source).
key=$(printf '%s\n' "$VERSION" "${cmake_args[@]}" -- "${targets[@]}" $cpu_flags | llama_cache_key)
out="$root/$variant-$key"
stamp="$out/.complete"
complete() {
  [ -f "$stamp" ] || return 1
  for p in libggml-cpu.so libggml-base.so "${programs[@]}"; do
    [ -e "$out/$p" ] || return 1
  done
}
if complete; then
  echo "stock $variant: cached ($out)" >&2
  echo "$out"
  exit 0
fi

llama_cache_tools
mkdir -p "$root"
exec 9>"$root/.lock"
flock 9
if complete; then
  echo "stock $variant: cached ($out)" >&2
  echo "$out"
  exit 0
fi

# Source: the sdist, downloaded once and hash-checked every time it is unpacked.
src="$root/src/llama.cpp"
if [ ! -f "$root/src/.complete" ]; then
  dl="$root/download"
  mkdir -p "$dl"
  tarball="$dl/llama_cpp_python-$VERSION.tar.gz"
  if [ ! -f "$tarball" ]; then
    echo "stock-llama.sh: downloading the llama-cpp-python==$VERSION sdist" >&2
    # Straight from the registry's simple index (pip download would build the sdist's build dependencies
    # from source first, minutes on two cores); pip is the fallback where the index page cannot be read.
    python3 - "$VERSION" "$tarball" <<'PY' >&2 \
      || python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python "llama-cpp-python==$VERSION" -d "$dl" >&2 \
      || die "download of the llama-cpp-python==$VERSION sdist failed"
import re, sys, urllib.request
version, dest = sys.argv[1], sys.argv[2]
name = f"llama_cpp_python-{version}.tar.gz"
page = urllib.request.urlopen("https://pypi.org/simple/llama-cpp-python/", timeout=60).read().decode()
url = next(u for u in re.findall(r'href="([^"]+)"', page) if u.split("#")[0].endswith("/" + name))
with urllib.request.urlopen(url.split("#")[0], timeout=600) as r, open(dest + ".part", "wb") as f:
    while chunk := r.read(1 << 20):
        f.write(chunk)
import os
os.replace(dest + ".part", dest)
PY
  fi
  got=$(sha256sum "$tarball" | cut -d' ' -f1)
  if [ "$got" != "$SDIST_SHA256" ]; then
    rm -f "$tarball"
    die "sdist hash mismatch: got $got, want $SDIST_SHA256"
  fi
  rm -rf "$root/src"
  mkdir -p "$root/src.tmp"
  tar -xzf "$tarball" -C "$root/src.tmp"
  mv "$root/src.tmp/llama_cpp_python-$VERSION/vendor/llama.cpp" "$root/src.tmp/llama.cpp"
  rm -rf "$root/src.tmp/llama_cpp_python-$VERSION"
  mv "$root/src.tmp" "$root/src"
  touch "$root/src/.complete"
fi

# The build folder sits beside src/ as every cached tree's does (<dir>/src/llama.cpp, <dir>/build-*), so
# ccache's relative paths agree between trees.
build="$root/build-$variant-$key"
if [ "$native" = ON ]; then
  CCACHE_DISABLE=1 llama_cache_build "stock $variant" "$src" "$build" -- "${cmake_args[@]}" -- "${targets[@]}"
else
  llama_cache_build "stock $variant" "$src" "$build" -- "${cmake_args[@]}" -- "${targets[@]}"
fi

llama_cache_collect "$build" "$out" "${programs[@]}"
echo "$out"
