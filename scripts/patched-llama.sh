#!/usr/bin/env bash
# Build the pinned llama.cpp with ggml-patch/cpu.patch applied (-DGGML_LOWBIT=ON), linked against this checkout's
# target/release/libggml_lowbit.so: the second way in, beside LD_PRELOAD.
#
#   scripts/patched-llama.sh haswell|x64
#
# The source comes from the stock cache (scripts/stock-llama.sh fetches and checks it, and builds the stock
# variant of the same name, which the comparisons need anyway); the patched tree and its build live under
# target/patched-llama/ of this checkout, rebuilt when the patch changes. The library is linked by its SONAME and
# found through the build's RUNPATH, so rebuilding the library needs no rebuild here.
#
# Prints, as its last line on stdout, the folder holding the patched llama-completion, llama-perplexity and
# llama-bench with their libraries. Everything else goes to stderr.
set -euo pipefail

die() { echo "patched-llama.sh: $*" >&2; exit 2; }

variant=${1:-}
case "$variant" in
  haswell)
    isa=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
         -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_SSE42=ON) ;;
  x64)
    isa=(-DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF
         -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_SSE42=OFF) ;;
  *) die "usage: scripts/patched-llama.sh haswell|x64" ;;
esac
programs=(llama-completion llama-perplexity llama-bench)

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
patch_file="$repo/ggml-patch/cpu.patch"
lib="$repo/target/release/libggml_lowbit.so"
[ -f "$lib" ] || die "$lib is missing: run cargo build --release first"

stock_out=$(bash "$repo/scripts/stock-llama.sh" "$variant" | tail -n 1)
stock_src="$(dirname "$stock_out")/src/llama.cpp"
[ -f "$stock_src/CMakeLists.txt" ] || die "no stock source at $stock_src"

work="$repo/target/patched-llama"
key=$(sha256sum "$patch_file" | cut -c1-16)
# One build at a time: tests that need the patched tools may start together.
mkdir -p "$work"
exec 9>"$work/.lock"
flock 9
src="$work/src"
out="$work/$variant"
if [ ! -f "$src/.patch-$key" ]; then
  echo "patched-llama.sh: applying ggml-patch/cpu.patch to a copy of the stock tree" >&2
  rm -rf "$src" "$src.tmp"
  mkdir -p "$src.tmp"
  # The sdist's tree carries a .git file (it was a submodule) pointing nowhere, which git apply would follow
  # and fail on: left out for the patching.
  tar -C "$stock_src" -cf - --exclude=./models --exclude=./docs --exclude=./.complete --exclude=./.git . \
    | tar -C "$src.tmp" -xf -
  # git apply (git is there wherever this checkout came from), kept from finding this checkout's repository
  # above the copy, so paths are relative to the copy.
  (cd "$src.tmp" && GIT_CEILING_DIRECTORIES="$work" git apply -p1 "$patch_file") \
    || die "ggml-patch/cpu.patch does not apply"
  # Put it back afterwards, so the build's commit string reads "unknown" as the stock build's does.
  if [ -e "$stock_src/.git" ]; then cp -a "$stock_src/.git" "$src.tmp/.git"; fi
  touch "$src.tmp/.patch-$key"
  mv "$src.tmp" "$src"
fi
if [ -f "$out/.patch-$key" ]; then
  echo "$out"
  exit 0
fi

build="$work/build-$variant"
echo "patched-llama.sh: building $variant in $build" >&2
cmake -S "$src" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON \
  -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=OFF -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=ON \
  -DGGML_LOWBIT=ON -DGGML_LOWBIT_LIB="$lib" \
  "${isa[@]}" >&2 || die "cmake configure ($variant) failed"
cmake --build "$build" --target "${programs[@]}" >&2 || die "build ($variant) failed"

rm -rf "$out"
mkdir -p "$out"
cp -a "$build"/bin/*.so* "$out"/
for t in "${programs[@]}"; do
  cp -a "$build/bin/$t" "$out/"
done
touch "$out/.patch-$key"
echo "$out"
