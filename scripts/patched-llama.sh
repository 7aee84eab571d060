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
# the comparisons need anyway). Patched trees and their builds are cached beside the stock ones, outside this
# checkout, keyed by the patches (and, for the fork flavours, bench/c) and the flags, so every clone reuses them;
# ccache shares the objects a patch leaves alone. Builds with the library link a copy of it placed in their own
# bin/ (RUNPATH $ORIGIN); this checkout gets a copy of the cached build under target/patched-llama/<variant>/
# whose libggml_lowbit.so links to target/release/libggml_lowbit.so, so rebuilding the library needs no rebuild
# here.
#
# Prints, as its last line on stdout, the folder holding llama-completion, llama-perplexity and llama-bench with
# their libraries. Progress is one line per build on stderr; compiler output goes to the build's log file.
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
  lowbit) patches=(cpu.patch); lowbit=ON ;;
  fork) patches=(fork-types.patch); lowbit=OFF ;;
  fork-lowbit) patches=(cpu.patch fork-types.patch); lowbit=ON ;;
esac
# The stand-in fork's kernels: this checkout's bench/c files, copied into the tree (fork-types.patch includes them).
fork_c=()
if [ "$flavour" != lowbit ]; then fork_c=("$repo/bench/c/pq2_0_generic.c" "$repo/bench/c/ptq1_0_generic.c"); fi
lib="$repo/target/release/libggml_lowbit.so"
lowbit_args=(-DGGML_LOWBIT=OFF)
if [ "$lowbit" = ON ]; then
  [ -f "$lib" ] || die "$lib is missing: run cargo build --release first"
  lowbit_args=(-DGGML_LOWBIT=ON "-DGGML_LOWBIT_LIB=@BUILD@/bin/libggml_lowbit.so")
fi

SCRIPT_NAME=patched-llama.sh
# shellcheck source=scripts/llama-cache.sh
. "$repo/scripts/llama-cache.sh"

stock_out=$(bash "$repo/scripts/stock-llama.sh" "$isa_name" | tail -n 1)
stock_root=$(dirname "$stock_out")
stock_src="$stock_root/src/llama.cpp"
[ -f "$stock_src/CMakeLists.txt" ] || die "no stock source at $stock_src"

# The patched tree, keyed by the stock source it copies and what is applied to it, in the stock cache beside
# the stock trees and laid out like them (<dir>/src/llama.cpp, <dir>/build-*), so ccache shares every object
# a patch leaves alone.
src_key=$( (echo "$stock_root"; for p in "${patches[@]}"; do echo "$p"; cat "$repo/ggml-patch/$p"; done
            cat "${fork_c[@]}" /dev/null) | llama_cache_key)
tree="$stock_root/patched-$flavour-$src_key"
src="$tree/src/llama.cpp"
cmake_args=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON
  -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=OFF -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=ON
  "${lowbit_args[@]}" "${isa[@]}")
key=$(printf '%s\n' "$src_key" "${cmake_args[@]}" -- "${programs[@]}" | llama_cache_key)
build="$tree/build-$variant-$key"
cmake_args=("${cmake_args[@]//@BUILD@/$build}")
cached="$tree/$variant-$key"
# What this checkout runs: a copy of the cached build whose libggml_lowbit.so is this checkout's library.
out="$repo/target/patched-llama/$variant"

install_here() {
  mkdir -p "$repo/target/patched-llama"
  exec 8>"$repo/target/patched-llama/.lock"
  flock 8
  if [ ! -f "$out/.from-$key" ]; then
    rm -rf "$out" "$out.tmp"
    cp -a "$cached" "$out.tmp"
    rm -f "$out.tmp/.complete"
    if [ "$lowbit" = ON ]; then
      # The build's RUNPATH is $ORIGIN alone (the library was linked from the build's bin/), so this link picks
      # the library; rebuilding the library needs no rebuild of llama.cpp.
      ln -sfn "$lib" "$out.tmp/libggml_lowbit.so"
    fi
    touch "$out.tmp/.from-$key"
    mv "$out.tmp" "$out"
  fi
  flock -u 8
}

if [ -f "$cached/.complete" ]; then
  echo "patched $variant: cached ($cached)" >&2
  install_here
  echo "$out"
  exit 0
fi

llama_cache_tools
exec 9>"$stock_root/.lock"
flock 9
if [ ! -f "$src/.complete" ]; then
  echo "patched $variant: applying ${patches[*]} to a copy of the stock tree" >&2
  rm -rf "$tree/src" "$tree/src.tmp"
  mkdir -p "$tree/src.tmp/llama.cpp"
  # The sdist's tree carries a .git file (it was a submodule) pointing nowhere, which git apply would follow
  # and fail on: left out for the patching.
  tar -C "$stock_src" -cf - --exclude=./models --exclude=./docs --exclude=./.complete --exclude=./.git . \
    | tar -C "$tree/src.tmp/llama.cpp" -xf -
  # git apply (git is there wherever this checkout came from), kept from finding any repository above the
  # copy, so paths are relative to the copy.
  for p in "${patches[@]}"; do
    (cd "$tree/src.tmp/llama.cpp" && GIT_CEILING_DIRECTORIES="$tree" git apply -p1 "$repo/ggml-patch/$p") \
      || die "ggml-patch/$p does not apply"
  done
  if [ ${#fork_c[@]} -gt 0 ]; then cp "${fork_c[@]}" "$tree/src.tmp/llama.cpp/ggml/src/prism/"; fi
  # Put it back afterwards, so the build's commit string reads "unknown" as the stock build's does.
  if [ -e "$stock_src/.git" ]; then cp -a "$stock_src/.git" "$tree/src.tmp/llama.cpp/.git"; fi
  touch "$tree/src.tmp/llama.cpp/.complete"
  mv "$tree/src.tmp" "$tree/src"
fi

if [ ! -f "$cached/.complete" ]; then
  if [ "$lowbit" = ON ]; then
    # Linked from a copy inside the build's bin/, so the RUNPATH names $ORIGIN and no checkout.
    mkdir -p "$build/bin"
    cp "$lib" "$build/bin/libggml_lowbit.so"
  fi
  llama_cache_build "patched $variant" "$src" "$build" -- "${cmake_args[@]}" -- "${programs[@]}"
  llama_cache_collect "$build" "$cached" "${programs[@]}"
fi
flock -u 9
install_here
echo "$out"
