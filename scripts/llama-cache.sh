# Shared by scripts/stock-llama.sh and scripts/patched-llama.sh (sourced, not run): the cache root, the build
# tools, ccache, build keys, and quiet builds with one progress line each.
#
# Every compiled llama.cpp tree lives under the cache root ($GGML_LOWBIT_CACHE_DIR, default
# ~/.cache/ggml-lowbit), outside any checkout, so a fresh clone reuses it. Each build folder is named by a key: a
# hash of everything that decides its output (version, cmake flags, targets, patches). ccache (its cache under
# the root too) lets trees that differ in a few files (a patched tree beside the stock one) recompile only those.
# A build's compiler output goes to a log file beside it; the terminal gets one line per build.

LLAMA_CACHE_ROOT=${GGML_LOWBIT_CACHE_DIR:-$HOME/.cache/ggml-lowbit}

# Installs cmake, ninja, g++ and ccache with apt-get when one is missing (output to a log under the root).
llama_cache_tools() {
  local need=()
  command -v cmake >/dev/null || need+=(cmake)
  command -v ninja >/dev/null || need+=(ninja-build)
  command -v g++ >/dev/null || need+=(g++)
  command -v ccache >/dev/null || need+=(ccache)
  [ ${#need[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null || die "need ${need[*]} and apt-get is not available"
  mkdir -p "$LLAMA_CACHE_ROOT"
  local log="$LLAMA_CACHE_ROOT/apt-get.log"
  echo "$SCRIPT_NAME: installing ${need[*]} with apt-get (log: $log)" >&2
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq "${need[@]}"; } >"$log" 2>&1 || {
    tail -n 20 "$log" >&2
    die "apt-get install ${need[*]} failed (log: $log)"
  }
}

# Routes every compile through ccache, whose cache is shared by all trees: sets its environment and fills the
# array LLAMA_CCACHE_ARGS with the cmake arguments. Paths are rewritten relative to the build folder (base_dir),
# so trees laid out alike (<dir>/src/llama.cpp beside <dir>/build-*) share objects wherever their sources and
# flags agree.
llama_cache_ccache() {
  export CCACHE_DIR="$LLAMA_CACHE_ROOT/ccache"
  export CCACHE_BASEDIR="$LLAMA_CACHE_ROOT"
  export CCACHE_NOHASHDIR=1
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
  LLAMA_CCACHE_ARGS=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
}

# A 16-hex-digit key of the lines on stdin.
llama_cache_key() {
  sha256sum | cut -c1-16
}

# Seconds as "1m05s" or "42s".
llama_cache_elapsed() {
  local s=$1
  if [ "$s" -ge 60 ]; then printf '%dm%02ds' $((s / 60)) $((s % 60)); else printf '%ds' "$s"; fi
}

# llama_cache_build LABEL SRC BUILD -- CMAKE_ARGS... -- TARGETS...
# Configures and builds quietly: everything to BUILD.log; on a terminal one line updated in place ("[k/n]",
# elapsed), elsewhere a start and an end line; on failure the log's tail and its path, then exit 2.
llama_cache_build() {
  local label=$1 src=$2 build=$3
  shift 3
  [ "$1" = -- ] || die "llama_cache_build: usage"
  shift
  local cmake_args=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do cmake_args+=("$1"); shift; done
  shift
  local targets=("$@")
  local log="$build.log"
  local start=$SECONDS
  mkdir -p "$(dirname "$build")"
  : >"$log"
  local tty=0
  [ -t 2 ] && tty=1
  if [ $tty = 1 ]; then
    printf '%s: configuring (log: %s)' "$label" "$log" >&2
  else
    echo "$label: building (log: $log)" >&2
  fi
  local before
  llama_cache_ccache
  before=$(llama_cache_ccache_counts)
  if ! cmake -S "$src" -B "$build" -G Ninja "${LLAMA_CCACHE_ARGS[@]}" "${cmake_args[@]}" >>"$log" 2>&1; then
    [ $tty = 1 ] && echo >&2
    tail -n 30 "$log" >&2
    die "$label: cmake configure failed (log: $log)"
  fi
  local status
  set +e
  cmake --build "$build" --target "${targets[@]}" 2>&1 | while IFS= read -r line; do
    printf '%s\n' "$line" >>"$log"
    if [ $tty = 1 ] && [[ $line =~ ^\[([0-9]+/[0-9]+)\] ]]; then
      printf '\r\033[K%s: building [%s] %s' "$label" "${BASH_REMATCH[1]}" "$(llama_cache_elapsed $((SECONDS - start)))" >&2
    fi
  done
  status=${PIPESTATUS[0]}
  set -e
  [ $tty = 1 ] && printf '\r\033[K' >&2
  if [ "$status" -ne 0 ]; then
    tail -n 40 "$log" >&2
    die "$label: build failed (log: $log)"
  fi
  local after
  after=$(llama_cache_ccache_counts)
  echo "$label: built in $(llama_cache_elapsed $((SECONDS - start))) ($(llama_cache_ccache_delta "$before" "$after"); log: $log)" >&2
}

# "HITS MISSES" of the shared ccache so far.
llama_cache_ccache_counts() {
  ccache --print-stats 2>/dev/null | awk -F'\t' '
    $1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { h += $2 }
    $1 == "cache_miss" { m += $2 }
    END { print h + 0, m + 0 }'
}

# "N of M compiles from ccache" between two llama_cache_ccache_counts readings.
llama_cache_ccache_delta() {
  local h0 m0 h1 m1
  read -r h0 m0 <<<"$1"
  read -r h1 m1 <<<"$2"
  echo "$((h1 - h0)) of $((h1 - h0 + m1 - m0)) compiles from ccache"
}

# llama_cache_collect BUILD OUT PROGRAMS...: OUT becomes the build's libraries and PROGRAMS, then is stamped
# complete (OUT/.complete).
llama_cache_collect() {
  local build=$1 out=$2
  shift 2
  rm -rf "$out"
  mkdir -p "$out"
  cp -a "$build"/bin/*.so* "$out"/
  local t
  for t in "$@"; do
    cp -a "$build/bin/$t" "$out/"
  done
  touch "$out/.complete"
}
