// A package as a Worker author gets it: `npm pack` of packages/<name> (its prepack refuses an
// unbuilt package), `npm install` of the tarball, offline, into a new Worker project outside the
// repository (its own package.json and wrangler.toml), then the project bundled by the
// repository's wrangler as for a deploy (`wrangler deploy --dry-run --outdir`). The packed-worker
// tests in packages/*/test run that bundle in workerd (Miniflare); a tarball missing a file the
// Worker imports fails the install check or the bundle here.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const WRANGLER = join(ROOT, "node_modules", ".bin", "wrangler");

/**
 * @typedef {object} Project
 * @property {string} dir the project's directory (in the system's temporary directory)
 * @property {string} script the bundled Worker (`out/worker.js`, its wasm modules beside it)
 * @property {string} installed the installed package (`node_modules/@cobordism/<name>`)
 * @property {() => void} dispose removes the project
 */

/**
 * Packs `@cobordism/<name>`, installs the tarball into a new Worker project whose entry is
 * `worker.mjs` with `source`, checks that the installed package holds every file its
 * package.json names (types, exports) and its README, and bundles the project with wrangler.
 * @param {"client" | "kquant"} name
 * @param {string} source the Worker's module source (it imports `@cobordism/<name>`)
 * @returns {Project}
 */
export function packedWorkerProject(name, source) {
  const dir = mkdtempSync(join(tmpdir(), `cobordism-packed-${name}-`));
  const dispose = () => rmSync(dir, { recursive: true, force: true });
  try {
    const tarball = pack(name, dir);
    writeFileSync(join(dir, "package.json"), JSON.stringify({ name: `packed-${name}-worker`, private: true, type: "module" }));
    writeFileSync(join(dir, "wrangler.toml"), `name = "packed-${name}-worker"\nmain = "worker.mjs"\ncompatibility_date = "2026-04-01"\n`);
    writeFileSync(join(dir, "worker.mjs"), source);
    run("npm", ["install", "--offline", "--no-audit", "--no-fund", "--silent", `./${tarball}`], dir);
    const installed = join(dir, "node_modules", "@cobordism", name);
    checkInstalled(installed);
    run(WRANGLER, ["deploy", "--dry-run", "--outdir", "out"], dir);
    return { dir, script: join(dir, "out", "worker.js"), installed, dispose };
  } catch (e) {
    dispose();
    throw e;
  }
}

/**
 * `npm pack` of packages/<name> into `dest`; the tarball's file name.
 * @param {string} name
 * @param {string} dest
 * @returns {string}
 */
function pack(name, dest) {
  run("npm", ["pack", "--silent", "--pack-destination", dest], join(ROOT, "packages", name));
  const tarballs = readdirSync(dest).filter((f) => f.startsWith(`cobordism-${name}-`) && f.endsWith(".tgz"));
  if (tarballs.length !== 1) throw new Error(`npm pack of ${name} left ${JSON.stringify(tarballs)}`);
  return tarballs[0];
}

/**
 * Throws unless the installed package holds its README and every file its package.json's `types`
 * and `exports` name (each condition of each export).
 * @param {string} installed
 */
function checkInstalled(installed) {
  const pkg = JSON.parse(readFileSync(join(installed, "package.json"), "utf8"));
  /** @type {string[]} */
  const named = ["README.md", pkg.types];
  /** @param {unknown} target */
  const collect = (target) => {
    if (typeof target === "string") named.push(target);
    else if (target && typeof target === "object") Object.values(target).forEach(collect);
  };
  collect(pkg.exports);
  const missing = named.filter((path) => !existsSync(join(installed, path)));
  if (missing.length) throw new Error(`${pkg.name} installed from its tarball lacks ${missing.join(", ")}`);
}

/**
 * Runs `command` in `cwd` (wrangler told it has no network); its output is shown on failure.
 * @param {string} command
 * @param {string[]} args
 * @param {string} cwd
 */
function run(command, args, cwd) {
  const env = { ...process.env, CLOUDFLARE_CF_FETCH_ENABLED: "false", WRANGLER_SEND_METRICS: "false" };
  try {
    execFileSync(command, args, { cwd, env, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  } catch (e) {
    throw new Error(`${command} ${args.join(" ")} failed in ${cwd}:\n${e.stdout ?? ""}${e.stderr ?? ""}`);
  }
}

/**
 * Miniflare's options for the bundled Worker `script` with `bindings`.
 * @param {string} script
 * @param {Record<string, string>} [bindings]
 */
export function workerOptions(script, bindings = {}) {
  return {
    modules: true,
    scriptPath: script,
    modulesRoot: dirname(script),
    modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
    compatibilityDate: "2026-04-01",
    bindings,
  };
}
