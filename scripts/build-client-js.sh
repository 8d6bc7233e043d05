#!/usr/bin/env bash
# Builds packages/client (@cobordism/client): the merge and sampling math from the client-js crate.
set -euo pipefail
exec "$(dirname "$0")/build-wasm-package.sh" client-js packages/client
