#!/usr/bin/env bash
# Builds packages/kquant (@cobordism/kquant) from the kquant-js crate.
set -euo pipefail
exec "$(dirname "$0")/build-wasm-package.sh" kquant-js packages/kquant
