#!/usr/bin/env node
// Every line of the repository's Rust files (git ls-files '*.rs') fits in 100 columns, the
// max_width rustfmt formats to: a statement it cannot fit there (a long string literal, a long
// chain) it leaves as it is, unformatted, so `cargo fmt --check` means something only when none
// is. Columns are characters, not bytes, as rustfmt counts them (`·`, `≤`, `→` are one each).
// Exits 1 naming each line that is longer.
//   node scripts/check-line-length.mjs [FILE.rs…]   (default: every tracked .rs file)
// It first proves it can fail: of scripts/fixtures/long-lines.rs it must refuse exactly line 3.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join, relative } from "node:path";

const root = join(import.meta.dirname, "..");
const MAX = 100;
const FIXTURES = "scripts/fixtures/";

/** The lines of one file longer than MAX characters, as `file:line: length`. */
function long(file) {
  const lines = readFileSync(file, "utf8").split("\n");
  const out = [];
  lines.forEach((line, i) => {
    const length = [...line].length;
    if (length > MAX) out.push(`${relative(root, file)}:${i + 1}: ${length} characters`);
  });
  return out;
}

const fixture = join(root, FIXTURES, "long-lines.rs");
const caught = long(fixture);
if (caught.length !== 1 || !caught[0].startsWith(`${relative(root, fixture)}:3:`)) {
  console.error(`check-line-length: the fixture's one long line (3) was not the one found: ${caught}`);
  process.exit(1);
}
const files = process.argv.length > 2
  ? process.argv.slice(2)
  : execFileSync("git", ["ls-files", "-z", "*.rs"], { cwd: root, encoding: "utf8" })
      .split("\0")
      .filter((f) => f && !f.startsWith(FIXTURES))
      .map((f) => join(root, f));
const all = files.flatMap(long);
for (const l of all) console.error(`longer than ${MAX}: ${l}`);
if (all.length) process.exit(1);
console.log(`check-line-length: ${files.length} Rust files, every line within ${MAX} characters`);
