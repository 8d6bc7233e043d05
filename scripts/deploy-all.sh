#!/usr/bin/env bash
# Deploys N shards (default 8) to your Cloudflare account and gives them one bearer token:
#   scripts/deploy-all.sh [--shards N] [wrangler deploy arguments…]
# N is the `--shards` you gave `cobordism slice` (`cobordism plan` suggests one). Builds the Worker
# once, then for i in 0…N-1 deploys wrangler.toml's top-level settings as the Worker
# <name>-s<i> (cobordism-lm-head-s0, …) with SHARD_INDEX = i and SHARD_COUNT = N
# (`wrangler deploy --name … --var …`), and `wrangler secret put AUTH_TOKEN` on it with the token on
# standard input (never on a command line). Needs `wrangler login` (or CLOUDFLARE_API_TOKEN) and
# the R2 bucket named in wrangler.toml; installs only what a deploy needs (`scripts/setup.sh
# deploy`). Shards left from an earlier deploy of more than N stay until
# `npx wrangler delete <name>-s<i>`.
#
# The token is COBORDISM_TOKEN if set, else the one in .cobordism/token (COBORDISM_TOKEN_FILE),
# else a new random one written there (mode 600). Shards without a token serve nobody, so a
# shard is never open between its deploy and its secret. The shards' workers.dev URLs, in shard
# order, go to .cobordism/endpoints (COBORDISM_ENDPOINTS_FILE), for `--endpoints-from`.
#
# The kernels are relaxed SIMD's (Workers' V8 has it); COBORDISM_WASM_SIMD=plain deploys the plain
# simd128 build instead (scripts/build-worker.sh says why the choice is made when building).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "deploy-all: $1" >&2
  echo "usage: scripts/deploy-all.sh [--shards N] [wrangler deploy arguments…] (N: 1…4096, default 8)" >&2
  exit 2
}
shards=8
deploy_args=()
while [ $# -gt 0 ]; do
  case $1 in
    --shards) [ $# -ge 2 ] || usage "--shards needs a number"; shards=$2; shift 2 ;;
    --shards=*) shards=${1#*=}; shift ;;
    *) deploy_args+=("$1"); shift ;;
  esac
done
[[ $shards =~ ^[1-9][0-9]{0,3}$ ]] && [ "$shards" -le 4096 ] ||
  usage "--shards $shards: expected a whole number from 1 to 4096"

scripts/setup.sh deploy
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
read -r -a wrangler <<<"${WRANGLER:-npx wrangler}" # a stand-in for tests
token_file=${COBORDISM_TOKEN_FILE:-.cobordism/token}
endpoints_file=${COBORDISM_ENDPOINTS_FILE:-.cobordism/endpoints}

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
# wrangler reruns [build] on every call, and the environments s0…s7 are for deploying eight
# shards by hand: deploy a copy of the top-level settings without either.
config=target/wrangler.deploy.toml
mkdir -p target
sed '/^\[build\]/,/^$/d; /^\[env\./,/^$/d; s|^main = "|main = "../|' wrangler.toml >"$config"
name=$(sed -n 's/^name = "\(.*\)"$/\1/p' "$config")
[ -n "$name" ] || { echo "deploy-all: no top-level name = \"…\" in wrangler.toml" >&2; exit 1; }

outputs=$(mktemp -d)
trap 'rm -rf "$outputs"' EXIT
urls=() unknown=0
for ((i = 0; i < shards; i++)); do
  # wrangler's machine-readable output (one JSON line per command) names the deployed URLs.
  WRANGLER_OUTPUT_FILE_PATH="$outputs/$i.json" "${wrangler[@]}" deploy -c "$config" --name "$name-s$i" \
    --var "SHARD_INDEX:$i" --var "SHARD_COUNT:$shards" ${deploy_args[@]+"${deploy_args[@]}"}
  printf '%s' "$token" | "${wrangler[@]}" secret put AUTH_TOKEN -c "$config" --name "$name-s$i"
  url=$(grep '^{"type":"deploy"' "$outputs/$i.json" 2>/dev/null | grep -o '"https://[^"]*\.workers\.dev"' |
    head -n1 | tr -d '"') || true
  [ -n "$url" ] || unknown=$((unknown + 1))
  urls+=("$url")
done

echo "deploy-all: $shards shards deployed ($name-s0 … $name-s$((shards - 1))); each requires Authorization: Bearer <token>."
if [ "$unknown" -gt 0 ]; then
  echo "wrangler reported no workers.dev URL for $unknown of them (a dry run, or workers_dev = false), so"
  echo "$endpoints_file is not written: list the shards' URLs there in shard order, one a line."
else
  mkdir -p "$(dirname "$endpoints_file")"
  printf '%s\n' "# $name, $shards shards, in shard order (scripts/deploy-all.sh)" "${urls[@]}" >"$endpoints_file"
  echo "Their URLs, in shard order, are in $endpoints_file (cobordism logits --endpoints-from $endpoints_file):"
  printf '  %s\n' "${urls[@]}"
fi
if [ -n "${COBORDISM_TOKEN:-}" ]; then
  echo "The token is the COBORDISM_TOKEN you set; the CLI reads it from there."
else
  echo "Give the token to the CLI (it reads COBORDISM_TOKEN, which keeps it out of 'ps'):"
  echo "  export COBORDISM_TOKEN=\"\$(cat $token_file)\""
fi
