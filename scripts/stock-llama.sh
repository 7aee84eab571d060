#!/usr/bin/env bash
# Build the pinned stock llama.cpp (vendor/llama.cpp of the PyPI sdist llama-cpp-python==0.3.36) into a cache.
#
#   scripts/stock-llama.sh haswell|x64|haswell-dl
#
# haswell-dl is the haswell build the way release binaries load ggml: GGML_BACKEND_DL=ON, the CPU backend a module
# (libggml-cpu.so) that ggml dlopens at run time; it has the tools, not test-quantize-fns.
#
# Prints, as its last line on stdout, the folder holding libggml-cpu.so, libggml-base.so, test-quantize-fns,
# llama-completion and llama-perplexity (and, for haswell, llama-bench). Idempotent: a finished build is reused.
# Cache root: $GGML_LOWBIT_STOCK_DIR, default ~/.cache/ggml-lowbit/stock-0.3.36. Everything else goes to stderr.
set -euo pipefail

VERSION=0.3.36
SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e

die() { echo "stock-llama.sh: $*" >&2; exit 2; }

variant=${1:-}
backend_dl=OFF
case "$variant" in
  haswell-dl)
    isa=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
         -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_SSE42=ON)
    tools=ON
    backend_dl=ON
    programs=(llama-bench llama-completion llama-perplexity) ;;
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
  *) die "usage: scripts/stock-llama.sh haswell|x64|haswell-dl" ;;
esac

root=${GGML_LOWBIT_STOCK_DIR:-$HOME/.cache/ggml-lowbit/stock-$VERSION}
out="$root/$variant"
stamp="$out/.complete"
complete() {
  [ -f "$stamp" ] || return 1
  for p in libggml-cpu.so libggml-base.so "${programs[@]}"; do
    [ -e "$out/$p" ] || return 1
  done
}
if complete; then
  echo "$out"
  exit 0
fi

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
if [ ${#need[@]} -gt 0 ]; then
  echo "stock-llama.sh: installing ${need[*]} with apt-get" >&2
  command -v apt-get >/dev/null || die "need ${need[*]} and apt-get is not available"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq "${need[@]}"; } >&2 || die "apt-get install ${need[*]} failed"
fi

mkdir -p "$root"
exec 9>"$root/.lock"
flock 9

# Source: the sdist, downloaded once and hash-checked every time it is unpacked.
src="$root/src/llama.cpp"
if [ ! -f "$root/src/.complete" ]; then
  dl="$root/download"
  mkdir -p "$dl"
  tarball="$dl/llama_cpp_python-$VERSION.tar.gz"
  if [ ! -f "$tarball" ]; then
    echo "stock-llama.sh: downloading llama-cpp-python==$VERSION sdist" >&2
    python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$dl" >&2 \
      || die "pip download of llama-cpp-python==$VERSION failed"
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

build="$root/build-$variant"
echo "stock-llama.sh: building $variant in $build" >&2
cmake -S "$src" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON \
  -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=$backend_dl -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DLLAMA_BUILD_TESTS=$([ "$backend_dl" = ON ] && echo OFF || echo ON) -DLLAMA_BUILD_TOOLS=$tools \
  "${isa[@]}" >&2 || die "cmake configure ($variant) failed"

targets=(ggml-cpu ggml-base "${programs[@]}")
cmake --build "$build" --target "${targets[@]}" >&2 || die "build ($variant) failed"

rm -rf "$out"
mkdir -p "$out"
cp -a "$build"/bin/*.so* "$out"/
for t in "${programs[@]}"; do
  cp -a "$build/bin/$t" "$out/"
done
touch "$stamp"
echo "$out"
