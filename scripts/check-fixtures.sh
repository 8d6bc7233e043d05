#!/usr/bin/env bash
# Regenerates the gguf-oracle fixtures in a temporary copy and checks they equal the committed ones.
set -euo pipefail
dir=crates/kquant/tests/fixtures
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$dir/make_fixtures.py" "$tmp/"
python3 -W ignore "$tmp/make_fixtures.py" >/dev/null
for f in "$dir"/*.blocks "$dir"/*.f32; do
  cmp "$f" "$tmp/$(basename "$f")"
done
echo "fixtures match a fresh run of the gguf oracle"
