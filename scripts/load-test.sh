#!/usr/bin/env bash
# Load test of one local shard (workerd via Miniflare, loopback only) with wrk: C concurrent
# connections (default 4) for a fixed time against a 32768×5376 Q4_K slice; reports throughput, latency,
# errors (must be zero) and memory before/after. Usage: scripts/load-test.sh [SECONDS] [CONNECTIONS]
# The default 330 s at ~30 requests/s is over 10,000 requests.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-330}
connections=${2:-4}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH" CLOUDFLARE_CF_FETCH_ENABLED=false WRANGLER_SEND_METRICS=false
[ -f worker/build/index.js ] || scripts/build-worker.sh >/dev/null
cargo build --release -q -p cobordism
work=target/load-test
rm -rf "$work" && mkdir -p "$work"
cli=target/release/cobordism
$cli synth --out "$work/m.gguf" --hidden 5376 --vocab 32768 --type q4_k --seed 1 >/dev/null
$cli slice --gguf "$work/m.gguf" --shards 1 --out "$work/slices" >/dev/null
$cli upload --dir "$work/slices" --bucket cobordism-lm-head --prefix model --local \
  --persist-to "$work/state" >/dev/null
python3 -c "import struct,random; random.seed(1); open('$work/h.f32','wb').write(b''.join(struct.pack('<f', random.uniform(-2,2)) for _ in range(5376)))"

# Anonymous on purpose (loopback only): wrk sends no token.
coproc SHARDS { node scripts/local-shards.mjs --shards 1 --state "$work/state" --prefix model --allow-anonymous; }
trap 'kill $SHARDS_PID 2>/dev/null || true' EXIT
read -r ready <&"${SHARDS[0]}"
endpoint=$(node -e 'console.log(JSON.parse(process.argv[1]).endpoints[0])' "$ready")
rss() { grep VmRSS "/proc/$(pgrep -f 'workerd serve' | head -n1)/status" | awk '{print $2/1024 " MiB"}'; }
wasm() { curl -s "$endpoint/healthz" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log((JSON.parse(s).wasm_memory_bytes/1048576).toFixed(1)+" MiB"))'; }

curl -s -o /dev/null --data-binary @"$work/h.f32" "$endpoint/cobordism-lm-head" # cold load
# Warm up at full concurrency so the buffers of concurrent requests are allocated once.
HIDDEN_FILE="$work/h.f32" wrk -t2 -c"$connections" -d10s -s benches/load/post.lua "$endpoint" >/dev/null
before=$(wasm)
echo "before: wasm memory $before, workerd RSS $(rss)"
HIDDEN_FILE="$work/h.f32" wrk -t2 -c"$connections" -d"${seconds}s" --latency --timeout 30s \
  -s benches/load/post.lua "$endpoint" | tee "$work/wrk.txt"
after=$(wasm)
echo "after:  wasm memory $after, workerd RSS $(rss)"
if grep -q 'non-2xx 0$' "$work/wrk.txt" && grep -q 'errors (socket) 0,' "$work/wrk.txt" &&
  [ "$before" = "$after" ]; then
  echo "load test: PASS (no errors, no wasm memory growth)"
else
  echo "load test: FAIL (errors or wasm memory growth above)"
  exit 1
fi
