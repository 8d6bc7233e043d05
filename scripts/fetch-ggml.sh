#!/usr/bin/env bash
# Fetches llama.cpp's ggml at a pinned version for the peer benchmark (benches/peers, `ggml`):
# the llama-cpp-python source distribution from PyPI (it vendors llama.cpp), checked against its
# SHA-256, unpacked to target/ggml/ggml. Prints that directory, the GGML_SRC that
# benches/peers/build.rs compiles ggml's CPU quantization kernels from. Idempotent.
# Usage: GGML_SRC=$(scripts/fetch-ggml.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.3.36
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
dir=target/ggml
archive=$dir/llama_cpp_python-$version.tar.gz
mkdir -p "$dir"
if [ ! -f "$dir/ggml/.version" ] || [ "$(cat "$dir/ggml/.version")" != "$version" ]; then
  if ! echo "$sha256  $archive" | sha256sum -c --quiet >/dev/null 2>&1; then
    # The file's URL from PyPI's JSON API (relative on some mirrors: resolved against the API's).
    url=$(python3 - "$version" <<'PY'
import json, sys, urllib.parse, urllib.request
api = f"https://pypi.org/pypi/llama-cpp-python/{sys.argv[1]}/json"
try:
    data = json.load(urllib.request.urlopen(api))
except Exception:
    api = "https://pypi.org/pypi/llama-cpp-python/json"
    data = json.load(urllib.request.urlopen(api))
files = data["releases"][sys.argv[1]] if "releases" in data else data["urls"]
sdist = next(f for f in files if f["packagetype"] == "sdist")
print(urllib.parse.urljoin(api, sdist["url"]))
PY
)
    echo "fetching $url" >&2
    curl -sSfL -o "$archive" "$url"
    echo "$sha256  $archive" | sha256sum -c --quiet || { echo "fetch-ggml: $archive: SHA-256 differs" >&2; exit 1; }
  fi
  rm -rf "$dir/ggml" "$dir/unpack" && mkdir -p "$dir/unpack"
  tar -xzf "$archive" -C "$dir/unpack" --wildcards "*/vendor/llama.cpp/ggml/*" "*/vendor/llama.cpp/LICENSE"
  mv "$dir/unpack/llama_cpp_python-$version/vendor/llama.cpp/ggml" "$dir/ggml"
  mv "$dir/unpack/llama_cpp_python-$version/vendor/llama.cpp/LICENSE" "$dir/ggml/LICENSE"
  rm -rf "$dir/unpack"
  echo "$version" >"$dir/ggml/.version"
fi
realpath "$dir/ggml"
