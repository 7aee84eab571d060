#!/usr/bin/env bash
# Fetch a prebuilt ggml from the package registries into the cache (no compiling):
#
#   scripts/prebuilt-ggml.sh NAME
#
# NAME: node-llama-cpp-3.21.1, node-llama-cpp-3.22.1, node-llama-cpp-app-3.22.1, libggml-python-0.20.2, llama-cpp-py-sync-0.11739,
# debian-libggml0-0.27.0, debian-libggml1-1.1.1 or debian-llama.cpp-0.7.0.
#
# node-llama-cpp-3.22.1 is the CPU package of node-llama-cpp 3.22.1 (`npm pack @node-llama-cpp/linux-x64@3.22.1`:
# ggml 0.25.1, its CPU backend in 14 variants beside libggml-base.so in bins/linux-x64/; glibc 2.34 suffices);
# node-llama-cpp-3.21.1 the same for 3.21.1 (ggml 0.23.0). node-llama-cpp-app-3.22.1 is node-llama-cpp itself
# (`npm install node-llama-cpp@3.22.1` with only its linux-x64 CPU binaries of the optional packages: no CUDA or
# Vulkan), for programs that `import "node-llama-cpp"` from its node_modules/.
# libggml-python-0.20.2 is the wheel of libggml-python 0.20.2.post1 (`pip download`: ggml 0.20.2 alone, its CPU
# backend linked for AVX2 in libggml/lib64/libggml-cpu.so; glibc 2.27 suffices).
# llama-cpp-py-sync-0.11739 is the wheel of llama-cpp-py-sync 0.11739 (upstream b11739: ggml 0.27.0 linked for
# AVX2 + FMA in llama_cpp_py_sync/libggml-cpu.so.0, with libllama and libggml-rpc), with trixie's libc6,
# libstdc++6, libgcc-s1 and libgomp1 unpacked beside it: it needs glibc 2.38, so its programs run through
# trixie's loader as the Debian builds' do; its Python dependencies (cffi, numpy) for this machine's python3 go
# to site/, for PYTHONPATH.
# debian-libggml0-0.27.0 is Debian's libggml0 0.27.0-1~bpo13+1 (trixie-backports: ggml 0.27.0 with its CPU
# backend in 14 variants, dlopened from ggml/backends0/), with trixie's libc6, libstdc++6, libgcc-s1 and libgomp1:
# it needs glibc 2.38, newer than this machine's, so its programs run through trixie's loader,
#   ROOT/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 --library-path ROOT/usr/lib/x86_64-linux-gnu:... PROGRAM
# debian-libggml1-1.1.1 is the same for Debian's libggml1 1.1.1-3~bpo13+1 (ggml 1.1.1, soname .so.1, the CPU
# variants under ggml/backends1/).
# debian-llama.cpp-0.7.0 is Debian's llama.cpp 1:0.7.0+dfsg-2 (unstable: llama.cpp-tools and llama.cpp-tools-extra,
# i.e. llama-completion, llama-perplexity, llama-bench, llama-server, … over libllama0 and libggml0 0.27.0-1),
# with unstable's libc6 (glibc 2.43), libstdc++6, libgcc-s1, libgomp1 and libssl3t64; its programs look for
# their libraries in /usr/lib/x86_64-linux-gnu/llama and their CPU backend in ggml/backends0/, so they run as
#   GGML_BACKEND_PATH=ROOT/usr/lib/x86_64-linux-gnu/ggml/backends0/libggml-cpu-VARIANT.so \
#   ROOT/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 --library-path LIB:LIB/llama ROOT/usr/bin/llama-completion …
# The packages are downloaded with apt-get under a private configuration (this machine's apt is untouched) and
# checked against Debian's archive keyring, then unpacked with dpkg-deb.
#
# Prints, as its last line on stdout, ROOT (the unpacked tree). Idempotent; cache: $GGML_LOWBIT_CACHE_DIR/prebuilt
# (default ~/.cache/ggml-lowbit/prebuilt). Everything else goes to stderr.
set -euo pipefail

die() { echo "prebuilt-ggml.sh: $*" >&2; exit 2; }

name=${1:-}
case "$name" in
  debian-libggml0-0.27.0)
    packages=(libggml0=0.27.0-1~bpo13+1 libc6 libstdc++6 libgcc-s1 libgomp1) ;;
  debian-libggml1-1.1.1)
    packages=(libggml1=1.1.1-3~bpo13+1 libc6 libstdc++6 libgcc-s1 libgomp1) ;;
  debian-llama.cpp-0.7.0)
    suite=sid
    packages=(llama.cpp-tools=1:0.7.0+dfsg-2 llama.cpp-tools-extra=1:0.7.0+dfsg-2 libllama0=1:0.7.0+dfsg-2
      libggml0=0.27.0-1 libggml0-backend-rpc=0.27.0-1 libc6 libstdc++6 libgcc-s1 libgomp1 libssl3t64) ;;
  node-llama-cpp-3.21.1 | node-llama-cpp-3.22.1)
    npm_package=@node-llama-cpp/linux-x64@${name#node-llama-cpp-} ;;
  node-llama-cpp-app-3.22.1)
    npm_install=(node-llama-cpp@3.22.1 @node-llama-cpp/linux-x64@3.22.1) ;;
  libggml-python-0.20.2)
    wheel=libggml-python==0.20.2.post1
    wheel_check=libggml/lib64/libggml-cpu.so ;;
  llama-cpp-py-sync-0.11739)
    wheel=llama-cpp-py-sync==0.11739
    wheel_check=llama_cpp_py_sync/libggml-cpu.so.0
    wheel_deps=(cffi numpy)
    packages=(libc6 libstdc++6 libgcc-s1 libgomp1) ;;
  *) die "usage: scripts/prebuilt-ggml.sh node-llama-cpp-3.21.1|node-llama-cpp-3.22.1|node-llama-cpp-app-3.22.1|libggml-python-0.20.2|llama-cpp-py-sync-0.11739|debian-libggml0-0.27.0|debian-libggml1-1.1.1|debian-llama.cpp-0.7.0" ;;
esac

root_dir=${GGML_LOWBIT_CACHE_DIR:-$HOME/.cache/ggml-lowbit}/prebuilt
out="$root_dir/$name"
# A finished fetch records what it holds; a tree fetched for another list is fetched again.
stamp="${packages[*]:-}${npm_package:-}${npm_install[*]:-}${wheel:-}${wheel_deps[*]:-}"
if [ -f "$out/.complete" ] && [ "$(cat "$out/.complete")" = "$stamp" ]; then
  echo "prebuilt $name: cached ($out)" >&2
  echo "$out"
  exit 0
fi
mkdir -p "$root_dir"
exec 9>"$root_dir/.lock"
flock 9
log="$root_dir/$name.log"

if [ -n "${npm_package:-}" ]; then
  command -v npm >/dev/null || die "needs npm (Node.js)"
  echo "prebuilt $name: downloading $npm_package (log: $log)" >&2
  rm -rf "$out" "$out.tmp"
  mkdir -p "$out.tmp"
  if ! (cd "$out.tmp" && npm pack --silent "$npm_package") >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    die "npm pack $npm_package failed (log: $log)"
  fi
  tar -xzf "$out.tmp"/*.tgz -C "$out.tmp"
  rm -f "$out.tmp"/*.tgz
  [ -f "$out.tmp/package/bins/linux-x64/libggml-base.so" ] || die "no bins/linux-x64/libggml-base.so in $npm_package"
  mv "$out.tmp" "$out"
  echo "$stamp" >"$out/.complete"
  echo "$out"
  exit 0
fi

if [ -n "${npm_install:-}" ]; then
  command -v npm >/dev/null || die "needs npm (Node.js)"
  echo "prebuilt $name: installing ${npm_install[*]} (log: $log)" >&2
  rm -rf "$out" "$out.tmp"
  mkdir -p "$out.tmp"
  if ! (cd "$out.tmp" && npm install --no-audit --no-fund --omit=optional "${npm_install[@]}") >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    die "npm install ${npm_install[*]} failed (log: $log)"
  fi
  [ -f "$out.tmp/node_modules/node-llama-cpp/dist/index.js" ] || die "no node_modules/node-llama-cpp in $out.tmp"
  mv "$out.tmp" "$out"
  echo "$stamp" >"$out/.complete"
  echo "$out"
  exit 0
fi

rm -rf "$out.tmp"
mkdir -p "$out.tmp"
if [ -n "${wheel:-}" ]; then
  python=$(command -v python3 || true)
  [ -n "$python" ] && "$python" -m pip --version >/dev/null 2>&1 || die "needs python3 with pip"
  echo "prebuilt $name: downloading the wheel $wheel (log: $log)" >&2
  if ! "$python" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 --platform \
    manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$out.tmp/wheel" "$wheel" >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    die "pip download $wheel failed (log: $log)"
  fi
  "$python" -m zipfile -e "$out.tmp"/wheel/*.whl "$out.tmp"
  rm -rf "$out.tmp/wheel"
  [ -f "$out.tmp/$wheel_check" ] || die "no $wheel_check in the wheel $wheel"
  if [ -n "${wheel_deps:-}" ] && ! "$python" -m pip install --quiet --only-binary=:all: --target "$out.tmp/site" \
    "${wheel_deps[@]}" >>"$log" 2>&1; then
    tail -n 20 "$log" >&2
    die "pip install ${wheel_deps[*]} failed (log: $log)"
  fi
  if [ -z "${packages:-}" ]; then
    mv "$out.tmp" "$out"
    echo "$stamp" >"$out/.complete"
    echo "$out"
    exit 0
  fi
fi

command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || die "needs apt-get and dpkg-deb (Debian)"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || die "no Debian archive keyring at $keyring"

# One private APT tree per suite: trixie with its backports, or unstable (whose Release file may be older than
# its validity window on a mirror snapshot, hence Check-Valid-Until off; the signatures are still checked).
suite=${suite:-trixie}
apt_root="$root_dir/apt-$suite"
mkdir -p "$apt_root"/etc/apt/{apt.conf.d,preferences.d,sources.list.d} "$apt_root"/var/lib/apt/lists/partial \
  "$apt_root"/var/cache/apt/archives/partial
if [ "$suite" = sid ]; then
  echo "deb [signed-by=$keyring] http://deb.debian.org/debian sid main" >"$apt_root/etc/apt/sources.list"
else
  cat >"$apt_root/etc/apt/sources.list" <<LIST
deb [signed-by=$keyring] http://deb.debian.org/debian trixie main
deb [signed-by=$keyring] http://deb.debian.org/debian trixie-backports main
LIST
fi
cat >"$apt_root/apt.conf" <<CONF
Dir::Etc "$apt_root/etc/apt";
Dir::State "$apt_root/var/lib/apt";
Dir::Cache "$apt_root/var/cache/apt";
Dir::Etc::SourceList "$apt_root/etc/apt/sources.list";
Dir::Etc::SourceParts "$apt_root/etc/apt/sources.list.d";
Dir::Etc::PreferencesParts "$apt_root/etc/apt/preferences.d";
APT::Architecture "amd64";
Acquire::Languages "none";
Acquire::Check-Valid-Until "false";
CONF
echo "prebuilt $name: downloading ${packages[*]} (log: $log)" >&2
dl="$root_dir/$name.debs"
rm -rf "$dl"
mkdir -p "$dl"
if ! (export APT_CONFIG="$apt_root/apt.conf"; apt-get update -qq && cd "$dl" && apt-get download -qq "${packages[@]}") \
  >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  die "apt-get download failed (log: $log)"
fi
for deb in "$dl"/*.deb; do dpkg-deb -x "$deb" "$out.tmp"; done
[ -x "$out.tmp/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" ] || die "no loader in the unpacked libc6"
# Programs run through the fetched loader see it as their executable, and ggml looks for backends beside the
# executable: the RPC backend is linked there so that llama.cpp's --rpc and ggml-rpc-server find it.
if [ -f "$out.tmp/usr/lib/x86_64-linux-gnu/ggml/backends0/libggml-rpc.so" ]; then
  ln -sf ggml/backends0/libggml-rpc.so "$out.tmp/usr/lib/x86_64-linux-gnu/libggml-rpc.so"
fi
rm -rf "$out" "$dl"
mv "$out.tmp" "$out"
echo "$stamp" >"$out/.complete"
echo "$out"
