#!/usr/bin/env bash
# The bit-exact suite in one command: the same seeded cases through every backend this machine
# runs (scalar, SSE2, AVX2, AVX-512 and VNNI when present), NEON (and its dot product) under
# qemu-aarch64, simd128 under Node (wasm32-wasip1), simd128 and its relaxed-SIMD form in workerd
# (the engine module built with kquant's relaxed-simd), and the shard Worker in workerd over HTTP
# (its relaxed-SIMD and plain builds, rows named by their /healthz backend) against the native
# CLI; the independent oracle (crates/kquant/tests/oracle.rs) on each architecture; then one table —
# architecture × backend → hash per format and mode — and the last must-fail matrix
# (scripts/must-fail.sh). Exits non-zero on any difference.
# Runs alone from a fresh clone: installs what it needs (scripts/setup.sh) and builds what it uses
# (scripts/lib/builds.sh). `--built`: scripts/test.sh's last stage, after its build stage and its
# native, aarch64 and wasm32 stages (which ran the oracle): no setup, no build, no second oracle run.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH" CLOUDFLARE_CF_FETCH_ENABLED=false WRANGLER_SEND_METRICS=false
unset RUSTFLAGS # it would replace .cargo/config.toml's per-target rustflags (simd128)
case ${1:-} in
  --built) built=true ;;
  "") built=false ;;
  *) echo "usage: scripts/bit-exact.sh [--built]" >&2; exit 2 ;;
esac
if ! $built; then
  scripts/setup.sh
  # shellcheck source=lib/builds.sh
  source scripts/lib/builds.sh
  need engine worker worker_plain cli >&2
fi
out=target/bit-exact
mkdir -p "$out"
: >"$out/lines"
# The host without --target: the same build as the native tests.
for target in host aarch64-unknown-linux-gnu wasm32-wasip1; do
  flags=()
  [ "$target" = host ] || flags=(--target "$target")
  if ! $built; then
    echo "bit-exact: $target: the oracle" >&2
    cargo test -q -p kquant "${flags[@]}" --test oracle >"$out/oracle-$target.log" 2>&1 ||
      { cat "$out/oracle-$target.log"; echo "bit-exact: the oracle test failed on $target" >&2; exit 1; }
  fi
  echo "bit-exact: $target: the hashes" >&2
  # The test profile: the build the tests made (cargo test builds the examples too).
  cargo run -q --profile test -p kquant "${flags[@]}" --example bit_exact_hashes >>"$out/lines"
done
echo "bit-exact: wasm32 in workerd, with relaxed SIMD: the hashes" >&2
node benches/engine/run.mjs --jobs bit-exact \
  --wasm target/engine-relaxed/wasm32-unknown-unknown/release/cobordism_engine_bench.wasm >>"$out/lines"
echo "bit-exact: the shard in workerd over HTTP" >&2
node scripts/bit-exact-http.mjs >"$out/http"

status=0
node - "$out/lines" "$out/http" <<'JS' || status=$?
const fs = require("node:fs");
const read = (f) => fs.readFileSync(f, "utf8").trim().split("\n").map((l) => l.split(" "));
let failed = false;
function table(title, rows) {
  const cols = [...new Set(rows.map(([, , f, m]) => `${f} ${m}`))];
  const keys = [...new Set(rows.map(([a, b]) => `${a} ${b}`))];
  const cell = (k, c) => rows.find(([a, b, f, m]) => `${a} ${b}` === k && `${f} ${m}` === c)?.[4] ?? "-";
  console.log(`\n${title}\n`);
  console.log(`| architecture | backend | ${cols.join(" | ")} |`);
  console.log(`|---|---|${cols.map(() => "---").join("|")}|`);
  for (const k of keys) console.log(`| ${k.replace(" ", " | ")} | ${cols.map((c) => cell(k, c)).join(" | ")} |`);
  for (const c of cols) {
    const hashes = new Set(keys.map((k) => cell(k, c)));
    const same = hashes.size === 1;
    failed ||= !same;
    console.log(`${same ? "equal" : "DIFFERENT"}: ${c} (${keys.length} rows)`);
  }
}
table("kquant: the same seeded cases (96×2048, 12 vectors incl. edge cases) on every backend", read(process.argv[2]));
table("the shard over HTTP (workerd, two shards) against the native CLI (6000×1024, 4 vectors)", read(process.argv[3]));
process.exitCode = failed ? 1 : 0;
JS
echo
echo "independent oracle (crates/kquant/tests/oracle.rs): passed on x86_64, aarch64 (qemu), wasm32 (Node)$($built && echo " (scripts/test.sh's native, aarch64 and wasm32 stages)")"
if [ -f target/must-fail/summary.txt ]; then
  echo "must-fail matrix (scripts/must-fail.sh, $(date -r target/must-fail/summary.txt -u '+%F %R UTC')):"
  sed 's/^/  /' target/must-fail/summary.txt
else
  echo "must-fail matrix: not run yet (scripts/must-fail.sh; scripts/test.sh runs it last)"
fi
exit $status
