#!/usr/bin/env bash
# Deploys N shards (default 8) to your Cloudflare account and gives them one bearer token:
#   scripts/deploy-all.sh [--shards N] [--name NAME] [--bucket B] [--prefix P] [--budget-mib M]
#                         [--residency isolate|object] [--replicas R] [--keep-warm-s S]
#                         [--metrics DATASET] [wrangler deploy arguments…]
#   scripts/deploy-all.sh --rotate-token | --finish-rotation | --delete [--shards N] [--name NAME]
# N is the `--shards` you gave `cobordism slice` (`cobordism plan` suggests one). Builds the Worker
# once, then for i in 0…N-1 deploys wrangler.toml's settings as the Worker <name>-s<i>
# (cobordism-lm-head-s0, …) with SHARD_INDEX = i, SHARD_COUNT = N and the settings given here
# (`wrangler deploy --name … --var …`; the bucket in the generated config), and `wrangler secret
# put AUTH_TOKEN` on it with the token on standard input (never on a command line). Settings not
# given keep wrangler.toml's values. The R2 bucket is created if it does not exist. Needs `wrangler login` (or CLOUDFLARE_API_TOKEN) and the R2
# bucket; installs only what a deploy needs (`scripts/setup.sh deploy`). Shards left from an
# earlier deploy of more than N stay until `npx wrangler delete <name>-s<i>`.
#
# --metrics DATASET binds a Workers Analytics Engine dataset as METRICS: one data point per
# answer (docs/DEPLOY.md, "Watching a deployment").
#
# --residency object keeps each shard's slice in its Durable Object (every script carries the
# ShardObject class and its migration; RESIDENCY picks whether it is used), --replicas R gives
# each shard R objects, chosen by the caller's session key, and --keep-warm-s S sets KEEP_WARM_S
# (being redesigned, see issue 43): docs/API.md, "Residency"; the Cloudflare rules behind it are
# in docs/PLATFORM.md.
#
# The token is COBORDISM_TOKEN if set, else the one in .cobordism/token (COBORDISM_TOKEN_FILE),
# else a new random one written there (mode 600). Shards without a token serve nobody, so a
# shard is never open between its deploy and its secret. The shards' workers.dev URLs, in shard
# order, go to .cobordism/endpoints (COBORDISM_ENDPOINTS_FILE), one a line for the CLI's
# `--endpoints-from`, and to .cobordism/shard-urls as one comma-separated line for an inference
# Worker's SHARD_URLS.
#
# --rotate-token changes the token without a failed request: every shard gets the current token
# as AUTH_TOKEN_PREVIOUS, then a new one as AUTH_TOKEN (both accepted meanwhile); the new one goes
# to the token file (the old one beside it, .previous). Once every caller uses the new token,
# --finish-rotation deletes AUTH_TOKEN_PREVIOUS from every shard. --delete removes the shard
# Workers <name>-s0 … (all that a deploy recorded in .cobordism/deployed, at least N, and any
# next ones wrangler still finds), their objects with them. None of the three builds or deploys.
#
# The kernels are relaxed SIMD's (Workers' V8 has it); COBORDISM_WASM_SIMD=plain deploys the plain
# simd128 build instead (scripts/build-worker.sh says why the choice is made when building).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "deploy-all: $1" >&2
  echo "usage: scripts/deploy-all.sh [--shards N] [--name NAME] [--bucket B] [--prefix P] [--budget-mib M]" >&2
  echo "         [--residency isolate|object] [--replicas R] [--keep-warm-s S] [--metrics DATASET]" >&2
  echo "         [wrangler deploy arguments…]" >&2
  echo "       scripts/deploy-all.sh --rotate-token | --finish-rotation | --delete [--shards N] [--name NAME]" >&2
  echo "       (N: 1…500, default 8; R: 1…64; S: 0…86400 seconds)" >&2
  exit 2
}
shards=8 name= bucket= metrics= settings=() deploy_args=() mode=deploy
while [ $# -gt 0 ]; do
  case $1 in
    --rotate-token | --finish-rotation | --delete)
      [ $mode = deploy ] || usage "$1: one of --rotate-token, --finish-rotation, --delete at a time"
      mode=${1#--}; shift ;;
    --shards | --name | --bucket | --prefix | --budget-mib | --residency | --replicas | --keep-warm-s | --metrics)
      [ $# -ge 2 ] || usage "$1 needs a value"
      set -- "$1=$2" "${@:3}"
      ;;
    --shards=*) shards=${1#*=}; shift ;;
    --name=*) name=${1#*=}; shift ;;
    --bucket=*) bucket=${1#*=}; shift ;;
    --metrics=*)
      [[ ${1#*=} =~ ^[A-Za-z0-9_]{1,64}$ ]] || usage "--metrics ${1#*=}: expected a dataset name (letters, digits, _)"
      metrics=${1#*=}; shift ;;
    --prefix=*) settings+=("MODEL_PREFIX:${1#*=}"); shift ;;
    --budget-mib=*)
      [[ ${1#*=} =~ ^[1-9][0-9]{0,5}$ ]] || usage "${1%%=*} ${1#*=}: expected whole MiB"
      settings+=("MEMORY_BUDGET_MIB:${1#*=}"); shift ;;
    --residency=*)
      [[ ${1#*=} =~ ^(isolate|object)$ ]] || usage "--residency ${1#*=}: expected isolate or object"
      settings+=("RESIDENCY:${1#*=}"); shift ;;
    --replicas=*)
      [[ ${1#*=} =~ ^[1-9][0-9]?$ ]] && [ "${1#*=}" -le 64 ] || usage "--replicas ${1#*=}: expected 1…64"
      settings+=("REPLICAS:${1#*=}"); shift ;;
    --keep-warm-s=*)
      [[ ${1#*=} =~ ^[0-9]{1,5}$ ]] && [ "${1#*=}" -le 86400 ] || usage "--keep-warm-s ${1#*=}: expected 0…86400"
      settings+=("KEEP_WARM_S:${1#*=}"); shift ;;
    *) deploy_args+=("$1"); shift ;;
  esac
done
# An account holds at most 500 Workers and 500 Durable Object classes (docs/PLATFORM.md, "Account
# limits"): one shard is one Worker (and, with object residency, one class).
[[ $shards =~ ^[1-9][0-9]{0,2}$ ]] && [ "$shards" -le 500 ] ||
  usage "--shards $shards: expected a whole number from 1 to 500 (an account's Workers)"
[ -z "$name" ] || [[ $name =~ ^[a-z0-9][a-z0-9-]{0,50}$ ]] ||
  usage "--name $name: expected lower-case letters, digits and dashes (a Worker's name)"
[ -z "$bucket" ] || [[ $bucket =~ ^[a-z0-9][a-z0-9-]{1,62}$ ]] ||
  usage "--bucket $bucket: expected an R2 bucket name (lower-case letters, digits, dashes)"
if [ $mode != deploy ] && { [ ${#settings[@]} -gt 0 ] || [ -n "$bucket$metrics" ] || [ ${#deploy_args[@]} -gt 0 ]; }; then
  usage "--$mode takes only --shards and --name"
fi

scripts/setup.sh deploy
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
read -r -a wrangler <<<"${WRANGLER:-npx wrangler}" # a stand-in for tests
token_file=${COBORDISM_TOKEN_FILE:-.cobordism/token}
endpoints_file=${COBORDISM_ENDPOINTS_FILE:-.cobordism/endpoints}
shard_urls_file=$(dirname "$endpoints_file")/shard-urls

deployed_file=$(dirname "$endpoints_file")/deployed
new_token() { od -An -tx1 -N32 /dev/urandom | tr -d ' \n'; }
# Writes token $1 to file $2, readable by its owner only (a file there before keeps no mode).
keep_token() { mkdir -p "$(dirname "$2")" && (umask 077 && printf '%s\n' "$1" >"$2.new") && mv "$2.new" "$2"; }
name=${name:-$(sed -n 's/^name = "\(.*\)"$/\1/p' wrangler.toml | head -n1)}
[ -n "$name" ] || { echo "deploy-all: no top-level name = \"…\" in wrangler.toml" >&2; exit 1; }

token=${COBORDISM_TOKEN:-}
if [ -z "$token" ] && [ -s "$token_file" ]; then
  token=$(<"$token_file")
fi

case $mode in
  rotate-token)
    [ -n "$token" ] || { echo "deploy-all: no current token (COBORDISM_TOKEN or $token_file) to rotate from" >&2; exit 1; }
    next=$(new_token)
    for ((i = 0; i < shards; i++)); do
      # The current token stays accepted as AUTH_TOKEN_PREVIOUS before AUTH_TOKEN changes.
      printf '%s' "$token" | "${wrangler[@]}" secret put AUTH_TOKEN_PREVIOUS --name "$name-s$i"
      printf '%s' "$next" | "${wrangler[@]}" secret put AUTH_TOKEN --name "$name-s$i"
    done
    keep_token "$token" "$token_file.previous"
    keep_token "$next" "$token_file"
    echo "deploy-all: $shards shards accept the new token (in $token_file) and the previous one."
    echo "Move every caller to the new token (export COBORDISM_TOKEN=\"\$(cat $token_file)\"; the"
    echo "inference Worker's SHARD_TOKEN secret), then: scripts/deploy-all.sh --finish-rotation --shards $shards"
    exit 0 ;;
  finish-rotation)
    for ((i = 0; i < shards; i++)); do
      "${wrangler[@]}" secret delete AUTH_TOKEN_PREVIOUS --name "$name-s$i"
    done
    rm -f "$token_file.previous"
    echo "deploy-all: $shards shards accept only the token in $token_file."
    exit 0 ;;
  delete)
    recorded=0
    [ -s "$deployed_file" ] && recorded=$(sed -n "s/^$name //p" "$deployed_file" | head -n1)
    last=$((${recorded:-0} > shards ? ${recorded:-0} : shards))
    deleted=0
    for ((i = 0; i < 4096; i++)); do
      if "${wrangler[@]}" delete "$name-s$i" --force </dev/null; then
        deleted=$((deleted + 1))
      elif [ $i -ge "$last" ]; then
        break # past every recorded shard: the first one wrangler does not find ends the sweep
      fi
    done
    [ ! -s "$deployed_file" ] || sed -i "/^$name /d" "$deployed_file"
    echo "deploy-all: deleted $deleted shard Workers of $name (their Durable Objects with them)."
    echo "The model stays in R2: npx wrangler r2 object delete … or the dashboard, if it should go too."
    exit 0 ;;
esac

if [ -z "$token" ]; then
  token=$(new_token)
  keep_token "$token" "$token_file"
  echo "deploy-all: made a new bearer token in $token_file"
fi

scripts/build-worker.sh
# wrangler reruns [build] on every call: deploy a copy of the settings without it (nor any
# environment), with the bucket given.
config=target/wrangler.deploy.toml
mkdir -p target
sed '/^\[build\]/,/^$/d; /^\[env\./,/^$/d; s|^main = "|main = "../|' wrangler.toml >"$config"
[ -z "$bucket" ] || sed -i "s|^bucket_name = \".*\"|bucket_name = \"$bucket\"|" "$config"
# The Analytics Engine dataset each answer writes a data point to (docs/DEPLOY.md).
[ -z "$metrics" ] || printf '\n[[analytics_engine_datasets]]\nbinding = "METRICS"\ndataset = "%s"\n' "$metrics" >>"$config"

var_args=()
for setting in ${settings[@]+"${settings[@]}"}; do var_args+=(--var "$setting"); done

# The bucket the shards read: created when missing (not in a dry run, which deploys nothing).
bucket_name=$(sed -n 's/^bucket_name = "\(.*\)"$/\1/p' "$config" | head -n1)
if [[ " ${deploy_args[*]-} " != *" --dry-run "* ]] &&
  ! "${wrangler[@]}" r2 bucket info "$bucket_name" >/dev/null 2>&1; then
  echo "deploy-all: the R2 bucket $bucket_name does not exist; creating it"
  "${wrangler[@]}" r2 bucket create "$bucket_name" || {
    echo "deploy-all: could not create the R2 bucket $bucket_name: enable R2 on the account" \
      "(dashboard, R2), then run: npx wrangler r2 bucket create $bucket_name" >&2
    exit 1
  }
fi

outputs=$(mktemp -d)
trap 'rm -rf "$outputs"' EXIT
urls=() unknown=0
for ((i = 0; i < shards; i++)); do
  # wrangler's machine-readable output (one JSON line per command) names the deployed URLs.
  WRANGLER_OUTPUT_FILE_PATH="$outputs/$i.json" "${wrangler[@]}" deploy -c "$config" --name "$name-s$i" \
    --var "SHARD_INDEX:$i" --var "SHARD_COUNT:$shards" ${var_args[@]+"${var_args[@]}"} \
    ${deploy_args[@]+"${deploy_args[@]}"}
  printf '%s' "$token" | "${wrangler[@]}" secret put AUTH_TOKEN -c "$config" --name "$name-s$i"
  # The first URL among the deploy's targets (workers.dev; routes are patterns, not URLs).
  url=$(grep '^{"type":"deploy"' "$outputs/$i.json" 2>/dev/null | grep -o '"https\?://[^"*]*"' |
    head -n1 | tr -d '"') || true
  [ -n "$url" ] || unknown=$((unknown + 1))
  urls+=("$url")
done

# The largest count deployed under this name, for --delete.
recorded=0
[ -s "$deployed_file" ] && recorded=$(sed -n "s/^$name //p" "$deployed_file" | head -n1)
mkdir -p "$(dirname "$deployed_file")"
{ [ ! -s "$deployed_file" ] || sed "/^$name /d" "$deployed_file"; echo "$name $((${recorded:-0} > shards ? ${recorded:-0} : shards))"; } >"$deployed_file.new"
mv "$deployed_file.new" "$deployed_file"
echo "deploy-all: $shards shards deployed ($name-s0 … $name-s$((shards - 1))); each requires Authorization: Bearer <token>."
if [ "$unknown" -gt 0 ]; then
  echo "wrangler reported no workers.dev URL for $unknown of them (a dry run, or workers_dev = false), so"
  echo "$endpoints_file is not written: list the shards' URLs there in shard order, one a line."
else
  mkdir -p "$(dirname "$endpoints_file")"
  printf '%s\n' "# $name, $shards shards, in shard order (scripts/deploy-all.sh)" "${urls[@]}" >"$endpoints_file"
  (IFS=,; printf '%s\n' "${urls[*]}") >"$shard_urls_file"
  echo "Their URLs, in shard order, are in $endpoints_file (cobordism logits --endpoints-from $endpoints_file):"
  printf '  %s\n' "${urls[@]}"
  echo "and, comma-separated for an inference Worker's SHARD_URLS, in $shard_urls_file."
fi
if [ -n "${COBORDISM_TOKEN:-}" ]; then
  echo "The token is the COBORDISM_TOKEN you set; the CLI reads it from there."
else
  echo "Give the token to the CLI (it reads COBORDISM_TOKEN, which keeps it out of 'ps'):"
  echo "  export COBORDISM_TOKEN=\"\$(cat $token_file)\""
fi
