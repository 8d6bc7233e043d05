#!/usr/bin/env bash
# Deploys the eight shards (wrangler environments s0…s7) to your Cloudflare account: builds the
# Worker once, then `wrangler deploy --env sN` for each. Needs `wrangler login` (or
# CLOUDFLARE_API_TOKEN) and the R2 bucket named in wrangler.toml. Extra arguments go to wrangler.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
scripts/build-worker.sh
mkdir -p target
sed '/^\[build\]/,/^$/d; s|^main = "|main = "../|' wrangler.toml >target/wrangler.nobuild.toml
for i in 0 1 2 3 4 5 6 7; do
  npx wrangler deploy -c target/wrangler.nobuild.toml --env "s$i" "$@"
done
