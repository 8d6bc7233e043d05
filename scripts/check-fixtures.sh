#!/usr/bin/env bash
# Regenerates the gguf-oracle fixtures in a temporary copy and checks they equal the committed ones.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=crates/kquant/tests/fixtures
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$dir/make_fixtures.py" "$tmp/"
# The gguf package from scripts/setup.sh's virtual environment.
target/oracle-venv/bin/python3 -W ignore "$tmp/make_fixtures.py" >/dev/null
for f in "$dir"/*.blocks "$dir"/*.f32; do
  cmp "$f" "$tmp/$(basename "$f")"
done
echo "fixtures match a fresh run of the gguf oracle"
