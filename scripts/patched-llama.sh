#!/usr/bin/env bash
# Build the pinned llama.cpp with patches from ggml-patch/ applied:
#
#   scripts/patched-llama.sh haswell|x64                 ggml-patch/cpu.patch, -DGGML_LOWBIT=ON, linked against
#                                                        this checkout's target/release/libggml_lowbit.so: the
#                                                        second way in, beside LD_PRELOAD
#   scripts/patched-llama.sh fork-haswell|fork-x64       ggml-patch/fork-types.patch only: the stand-in for
#                                                        PrismML's fork (PQ2_0 = 142 and PTQ1_0 = 143 through
#                                                        bench/c's generic C, as the fork runs them on x86);
#                                                        the "stock" of the fork formats' end-to-end checks
#   scripts/patched-llama.sh fork-lowbit-haswell|fork-lowbit-x64
#                                                        both patches, -DGGML_LOWBIT=ON: the stand-in fork
#                                                        with the library linked in
#
# haswell and x64 are the stock build's instruction sets (FMA / none). The source comes from the stock cache
# (scripts/stock-llama.sh fetches and checks it, and builds the stock variant of the same instruction set, which
# the comparisons need anyway); the patched trees and builds live under target/patched-llama/ of this checkout,
# rebuilt when a patch (or, for the fork flavours, bench/c) changes. The library is linked by its SONAME and
# found through the build's RUNPATH, so rebuilding the library needs no rebuild here.
#
# Prints, as its last line on stdout, the folder holding llama-completion, llama-perplexity and llama-bench with
# their libraries. Everything else goes to stderr.
set -euo pipefail

die() { echo "patched-llama.sh: $*" >&2; exit 2; }

variant=${1:-}
case "$variant" in
  haswell|x64) flavour=lowbit; isa_name=$variant ;;
  fork-lowbit-haswell|fork-lowbit-x64) flavour=fork-lowbit; isa_name=${variant#fork-lowbit-} ;;
  fork-haswell|fork-x64) flavour=fork; isa_name=${variant#fork-} ;;
  *) die "usage: scripts/patched-llama.sh haswell|x64|fork-haswell|fork-x64|fork-lowbit-haswell|fork-lowbit-x64" ;;
esac
case "$isa_name" in
  haswell)
    isa=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
         -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_SSE42=ON) ;;
  x64)
    isa=(-DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF
         -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_SSE42=OFF) ;;
esac
programs=(llama-completion llama-perplexity llama-bench)

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case "$flavour" in
  lowbit) patches=(cpu.patch); lowbit=ON; src_name=src ;;
  fork) patches=(fork-types.patch); lowbit=OFF; src_name=src-fork ;;
  fork-lowbit) patches=(cpu.patch fork-types.patch); lowbit=ON; src_name=src-fork-lowbit ;;
esac
# The stand-in fork's kernels: this checkout's bench/c files, copied into the tree (fork-types.patch includes them).
fork_c=()
if [ "$flavour" != lowbit ]; then fork_c=("$repo/bench/c/pq2_0_generic.c" "$repo/bench/c/ptq1_0_generic.c"); fi
lib="$repo/target/release/libggml_lowbit.so"
lowbit_args=(-DGGML_LOWBIT=OFF)
if [ "$lowbit" = ON ]; then
  [ -f "$lib" ] || die "$lib is missing: run cargo build --release first"
  lowbit_args=(-DGGML_LOWBIT=ON -DGGML_LOWBIT_LIB="$lib")
fi

stock_out=$(bash "$repo/scripts/stock-llama.sh" "$isa_name" | tail -n 1)
stock_src="$(dirname "$stock_out")/src/llama.cpp"
[ -f "$stock_src/CMakeLists.txt" ] || die "no stock source at $stock_src"

work="$repo/target/patched-llama"
key=$( (for p in "${patches[@]}"; do cat "$repo/ggml-patch/$p"; done; cat "${fork_c[@]}" /dev/null) | sha256sum | cut -c1-16)
# One build at a time: tests that need the patched tools may start together.
mkdir -p "$work"
exec 9>"$work/.lock"
flock 9
src="$work/$src_name"
out="$work/$variant"
if [ ! -f "$src/.patch-$key" ]; then
  echo "patched-llama.sh: applying ${patches[*]} to a copy of the stock tree" >&2
  rm -rf "$src" "$src.tmp"
  mkdir -p "$src.tmp"
  # The sdist's tree carries a .git file (it was a submodule) pointing nowhere, which git apply would follow
  # and fail on: left out for the patching.
  tar -C "$stock_src" -cf - --exclude=./models --exclude=./docs --exclude=./.complete --exclude=./.git . \
    | tar -C "$src.tmp" -xf -
  # git apply (git is there wherever this checkout came from), kept from finding this checkout's repository
  # above the copy, so paths are relative to the copy.
  for p in "${patches[@]}"; do
    (cd "$src.tmp" && GIT_CEILING_DIRECTORIES="$work" git apply -p1 "$repo/ggml-patch/$p") \
      || die "ggml-patch/$p does not apply"
  done
  if [ ${#fork_c[@]} -gt 0 ]; then cp "${fork_c[@]}" "$src.tmp/ggml/src/prism/"; fi
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
  "${lowbit_args[@]}" \
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
