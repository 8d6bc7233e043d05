#!/usr/bin/env bash
# Installs what the project needs on a fresh Debian machine of this kind; idempotent.
# `scripts/setup.sh demo` (scripts/demo.sh) and `scripts/setup.sh deploy` (the build command in
# wrangler.toml, which `cobordism deploy` and `wrangler dev` run):
# only what building and running the shard Worker needs — the wasm32 target and the npm packages
# (wrangler, Miniflare, esbuild); nothing from apt, so any OS with rustup and Node.js will do. The
# wasm-bindgen step is a workspace binary (crates/bindgen), built with the rest.
# `scripts/setup.sh toolchain`: the Rust toolchain and the wasm32 target alone (scripts/demo.sh
# installs the rest while it compiles).
# `scripts/setup.sh` (scripts/test.sh): everything, also the cross compiler and qemu, the other
# targets, nightly and cargo-fuzz, and the Python gguf oracle (in target/oracle-venv). Nobody
# needs to run it by hand.
# `scripts/setup.sh bench` (scripts/bench.sh): all that, and clang, lld, the WASI libc and clang's
# wasm32 builtins for llama.cpp's ggml wasm kernels (scripts/build-ggml-wasm.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
purpose=${1:-test}
case $purpose in toolchain | demo | deploy | test | bench) ;; *) echo "usage: scripts/setup.sh [toolchain|demo|deploy|test|bench]" >&2; exit 2 ;; esac

log() { printf '\033[1;34m[setup]\033[0m %s\n' "$*"; }

export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
cargo_install() { # crate version [cargo install flags…]
  local crate=$1 version=$2
  shift 2
  if ! cargo install --list | grep -q "^$crate v$version:"; then
    log "cargo install $crate $version (once)"
    cargo install --quiet "$crate" --version "$version" "$@"
  fi
}

# The toolchain comes from rust-toolchain.toml.
log "rust toolchain: $(rustup show active-toolchain 2>/dev/null | head -n1)"
rustup toolchain install >/dev/null 2>&1 || true
rustup target add wasm32-unknown-unknown >/dev/null
[ "$purpose" != toolchain ] || exit 0
if [ ! -x node_modules/.bin/wrangler ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  log "npm ci (wrangler, miniflare)"
  npm ci --no-audit --no-fund --loglevel=error
fi

node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt 20 ]; then
  echo "setup: Node.js 20 or newer is required (found: $(node --version 2>/dev/null || echo none))" >&2
  exit 1
fi
[ "$purpose" = test ] || [ "$purpose" = bench ] || exit 0

# The tests (and the benchmarks) only from here on.
apt_packages=()
command -v aarch64-linux-gnu-gcc >/dev/null || apt_packages+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
command -v qemu-aarch64 >/dev/null || apt_packages+=(qemu-user)
if [ ${#apt_packages[@]} -gt 0 ]; then
  log "apt-get install ${apt_packages[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${apt_packages[@]}" >/dev/null
fi

rustup target add aarch64-unknown-linux-gnu wasm32-wasip1 thumbv7em-none-eabihf >/dev/null
# Fuzzing alone uses nightly (libFuzzer's sanitizer coverage).
if ! rustup toolchain list | grep -q '^nightly'; then
  log "rustup toolchain install nightly (for cargo fuzz only)"
  rustup toolchain install nightly --profile minimal >/dev/null
fi
cargo_install cargo-fuzz 0.13.2 --locked

# The independent oracle for block decoding (the PyPI gguf package and numpy), in a virtual
# environment of the project's own, target/oracle-venv: Debian's Python refuses system-wide pip
# installs (PEP 668) and has no venv module without python3-venv. scripts/test.sh puts its bin/
# first on PATH, so the tests' `python3` is this one.
venv=target/oracle-venv
if ! "$venv/bin/python3" -c 'import gguf, numpy' 2>/dev/null; then
  if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    log "apt-get install python3-venv"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq python3-venv >/dev/null
  fi
  log "python3 -m venv $venv; pip install gguf numpy (once)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check 'gguf==0.19.0' numpy
fi

# The benchmarks alone: ggml's wasm build. Not fatal: without it the engine benchmark leaves ggml
# out and says so.
[ "$purpose" = bench ] || exit 0
wasm_c=(clang lld wasi-libc libclang-rt-dev-wasm32)
if ! dpkg -s "${wasm_c[@]}" >/dev/null 2>&1; then
  log "apt-get install ${wasm_c[*]} (ggml's wasm kernels, for the benchmarks)"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq "${wasm_c[@]}" >/dev/null; } ||
    log "could not install ${wasm_c[*]}: the engine benchmark leaves ggml out"
fi
