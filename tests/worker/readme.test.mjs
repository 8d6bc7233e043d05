// The README's deploy blocks, run as written: the `sh` blocks under "Deploy to Cloudflare", line
// by line, in a shadow of the checkout (links to the repository's files, its own `.cobordism/`
// and model), with a stand-in for Cloudflare (stand-in-cloudflare.mjs): `npx wrangler` and the
// CLI's wrangler keep an account in a JSON file, run `r2 object` commands on the real wrangler
// against a local R2 state, and answer a front's deploy with the URL of a local shard (workerd)
// reading that state. So every command of the first block runs, in order, and its last two
// (`status`, `logits --verify`) check the shards it deployed; the second block (operating the
// deployment) is checked line by line against the account.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { startShards, BUCKET } from "../../worker/local.mjs";
import { cli, tempDir } from "./helpers.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const STAND_IN = join(root, "tests", "worker", "stand-in-cloudflare.mjs");
/** The token the local shards take: the test writes it where `cobordism deploy` finds it. */
const TOKEN = "the-readme-test-token";

/** The README's `sh` blocks after "## Deploy to Cloudflare": [the deploy, operating it]. */
function deployBlocks() {
  const readme = readFileSync(join(root, "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("## Deploy to Cloudflare"));
  const blocks = [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]);
  return blocks.slice(0, 2);
}

/** A block's commands: continuation lines joined, blank lines dropped. */
const commands = (block) => block.replace(/\\\n/g, " ").split("\n").filter((l) => l.trim());

test("the README's deploy blocks run as written, against a stand-in Cloudflare", { timeout: 900_000 }, async () => {
  const work = tempDir("readme");
  const shadow = join(work, "checkout");
  mkdirSync(shadow);
  for (const entry of readdirSync(root)) {
    if (![".cobordism", ".git", "slices", "model.gguf"].includes(entry)) symlinkSync(join(root, entry), join(shadow, entry));
  }
  cli("synth", "--out", join(shadow, "model.gguf"), "--shape", "tiny", "--type", "q6_k", "--seed", "5");
  const state = join(work, "state");
  const account = join(work, "account.json");
  const local = await startShards({ shards: 8, state, authToken: TOKEN });
  try {
    const env = {
      ...process.env,
      COBORDISM_WRANGLER: STAND_IN,
      COBORDISM_TOKEN: "",
      STAND_IN_ACCOUNT: account,
      STAND_IN_URLS: JSON.stringify(local.endpoints),
      STAND_IN_R2: JSON.stringify({ wrangler: join(root, "node_modules", ".bin", "wrangler"), state, lock: join(work, "r2.lock"), bucket: "my-lm-head", as: BUCKET }),
    };
    // `npx wrangler` is the stand-in and `npm ci` nothing (a shadow checkout must not reinstall);
    // each line runs in the environment the lines before it exported.
    const saved = join(work, "env.sh");
    writeFileSync(saved, "");
    const prelude = `set -euo pipefail
npx() { if [ "$1" = wrangler ]; then shift; "${STAND_IN}" "$@"; else command npx "$@"; fi; }
npm() { if [ "$1" = ci ]; then return 0; fi; command npm "$@"; }
. ${saved}
`;
    const run = (line) => {
      const r = spawnSync("bash", ["-c", `${prelude}${line}\nexport -p >${saved}`], { cwd: shadow, encoding: "utf8", env });
      return { ...r, text: `${line}\n${r.stdout}\n${r.stderr}` };
    };
    const ran = (line) => {
      const r = run(line);
      assert.equal(r.status, 0, r.text);
      return r;
    };
    mkdirSync(join(shadow, ".cobordism"));
    writeFileSync(join(shadow, ".cobordism", "token"), `${TOKEN}\n`);
    const [deploying, operating] = deployBlocks().map(commands);
    const outputs = deploying.map((line) => ran(line).stdout).join("\n");
    assert.match(outputs, /8 shards, 8 healthy/);
    assert.match(outputs, /identical/);
    const fronts = () => {
      const { workers } = JSON.parse(readFileSync(account, "utf8"));
      return Array.from({ length: 8 }, (_, i) => workers[`cobordism-lm-head-s${i}`]);
    };
    assert.ok(fronts().every((w, i) => w.bucket === "my-lm-head" && w.vars.SHARD_INDEX === `${i}`));
    assert.equal(readFileSync(join(shadow, ".cobordism", "endpoints"), "utf8").split("\n").filter((l) => l.startsWith("http")).length, 8);

    // Operating it: each line, and what it must have done.
    const expect = [
      [/--keep-warm-s/, (r) => {
        assert.match(r.stdout, /keep-warm \(s\): 0 → 300/);
        assert.match(r.stdout, /shard 7 warm after/, "an upgrade warms each shard before the next");
        assert.ok(fronts().every((w) => w.vars.KEEP_WARM_S === "300" && w.bucket === "my-lm-head" && w.vars.MODEL_PREFIX === "model"));
      }],
      [/--rotate-token/, () => {
        const next = readFileSync(join(shadow, ".cobordism", "token"), "utf8").trim();
        assert.ok(fronts().every((w) => w.secrets.AUTH_TOKEN === next && w.secrets.AUTH_TOKEN_PREVIOUS === TOKEN));
        const again = run("cobordism deploy --rotate-token");
        assert.equal(again.status, 1, `a second rotation is refused until the first finishes: ${again.text}`);
      }],
      [/^export/, () => {}],
      [/--finish-rotation/, () => {
        const next = readFileSync(join(shadow, ".cobordism", "token"), "utf8").trim();
        assert.ok(fronts().every((w) => JSON.stringify(w.secrets) === JSON.stringify({ AUTH_TOKEN: next })));
        ran("cobordism deploy --rotate-token");
        ran("cobordism deploy --finish-rotation");
      }],
      [/--delete/, () => {
        assert.deepEqual(JSON.parse(readFileSync(account, "utf8")).workers, {});
        assert.equal(existsSync(join(shadow, ".cobordism", "deployment.toml")), false);
      }],
    ];
    assert.equal(operating.length, expect.length, operating.join("\n"));
    operating.forEach((line, i) => {
      assert.match(line, expect[i][0]);
      expect[i][1](ran(line));
    });
  } finally {
    await local.dispose();
  }
});
