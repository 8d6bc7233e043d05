#!/usr/bin/env node
// Every relative link and file path in the docs resolves: Markdown links `[text](path)` and
// paths in backticks that name a file of this repository (`crates/…`, `docs/…`, `scripts/…`, …),
// in README.md, SECURITY.md, docs/*.md and the packages' and examples' READMEs. Anchors
// (`#…`) and URLs are not checked. Exits 1 naming each broken one.
//   node scripts/check-links.mjs [FILE.md…]      (default: the documentation listed above)
// It first proves it can fail: scripts/fixtures/broken-links.md must be refused.
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { dirname, join, relative } from "node:path";

const root = join(import.meta.dirname, "..");
const TOP = ["crates", "docs", "scripts", "packages", "examples", "tests", "benches", "worker", "fuzz", ".github"];

/** The broken links and paths of one Markdown file, as `file:line: target`. */
function broken(file) {
  const out = [];
  const text = readFileSync(file, "utf8");
  text.split("\n").forEach((line, i) => {
    const targets = [];
    for (const m of line.matchAll(/\]\(([^)\s]+)\)/g)) targets.push([m[1], dirname(file)]);
    for (const m of line.matchAll(/`([^`\s]+)`/g)) {
      const p = m[1].replace(/[:,.]+$/, "");
      if (TOP.some((t) => p.startsWith(`${t}/`)) && !/[*<>{}…$]/.test(p)) targets.push([p, root]);
    }
    for (const [target, base] of targets) {
      if (/^[a-z]+:/i.test(target) || target.startsWith("#")) continue;
      const path = decodeURIComponent(target.split("#")[0]);
      if (path && !existsSync(join(base, path))) out.push(`${relative(root, file)}:${i + 1}: ${target}`);
    }
  });
  return out;
}

const fixture = join(root, "scripts", "fixtures", "broken-links.md");
if (broken(fixture).length !== 2) {
  console.error("check-links: the fixture's two broken links were not both found");
  process.exit(1);
}
const docs = (dir) => readdirSync(join(root, dir)).filter((f) => f.endsWith(".md")).map((f) => join(root, dir, f));
const files = process.argv.length > 2
  ? process.argv.slice(2)
  : [join(root, "README.md"), join(root, "SECURITY.md"), ...docs("docs"),
     ...["packages/client", "packages/kquant", "examples/inference-worker"].map((d) => join(root, d, "README.md"))];
const all = files.flatMap(broken);
for (const b of all) console.error(`broken link: ${b}`);
if (all.length) process.exit(1);
console.log(`check-links: ${files.length} files, every relative link and path resolves`);
