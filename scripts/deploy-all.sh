#!/usr/bin/env bash
# Deploys the eight shards (wrangler environments s0…s7) to your Cloudflare account and gives them
# one bearer token: builds the Worker once, `wrangler deploy --env sN` for each, then
# `wrangler secret put AUTH_TOKEN --env sN` with the token on standard input (never on a command
# line). Needs `wrangler login` (or CLOUDFLARE_API_TOKEN) and the R2 bucket named in
# wrangler.toml. Extra arguments go to `wrangler deploy`.
#
# The token is COBORDISM_TOKEN if set, else the one in .cobordism/token (COBORDISM_TOKEN_FILE),
# else a new random one written there (mode 600). Shards without a token serve nobody, so a
# shard is never open between its deploy and its secret.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
read -r -a wrangler <<<"${WRANGLER:-npx wrangler}" # a stand-in for tests
token_file=${COBORDISM_TOKEN_FILE:-.cobordism/token}

token=${COBORDISM_TOKEN:-}
if [ -z "$token" ] && [ -s "$token_file" ]; then
  token=$(<"$token_file")
fi
if [ -z "$token" ]; then
  token=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
  mkdir -p "$(dirname "$token_file")"
  (umask 077 && printf '%s\n' "$token" >"$token_file")
  echo "deploy-all: made a new bearer token in $token_file"
fi

scripts/build-worker.sh
mkdir -p target
sed '/^\[build\]/,/^$/d; s|^main = "|main = "../|' wrangler.toml >target/wrangler.nobuild.toml
for i in 0 1 2 3 4 5 6 7; do
  "${wrangler[@]}" deploy -c target/wrangler.nobuild.toml --env "s$i" "$@"
  printf '%s' "$token" | "${wrangler[@]}" secret put AUTH_TOKEN -c target/wrangler.nobuild.toml --env "s$i"
done
echo "deploy-all: eight shards deployed; each requires Authorization: Bearer <token>."
if [ -n "${COBORDISM_TOKEN:-}" ]; then
  echo "The token is the COBORDISM_TOKEN you set; the CLI reads it from there."
else
  echo "Give the token to the CLI (it reads COBORDISM_TOKEN, which keeps it out of 'ps'):"
  echo "  export COBORDISM_TOKEN=\"\$(cat $token_file)\""
fi
