#!/usr/bin/env node
// Puts a generated benchmark section into docs/BENCHMARKS.md: the section file starts with its
// "## " heading; the doc's section of that heading (up to the next "## " heading) is replaced,
// or, if the doc has none, the section goes in before "## What the numbers say" (the notes).
//   node scripts/splice-section.mjs docs/BENCHMARKS.md docs/BENCHMARKS-cold.md
import { readFileSync, writeFileSync } from "node:fs";

const [docPath, sectionPath] = process.argv.slice(2);
if (!docPath || !sectionPath) {
  console.error("usage: splice-section.mjs DOC SECTION");
  process.exit(2);
}
const doc = readFileSync(docPath, "utf8");
const section = readFileSync(sectionPath, "utf8").trimEnd() + "\n\n";
const heading = section.split("\n", 1)[0];
if (!heading.startsWith("## ")) throw new Error(`${sectionPath} must start with a "## " heading`);
// Only the heading's first words: a generated heading may carry a date or figures.
const key = heading.split(":")[0];
const starts = [...doc.matchAll(/^## .*$/gm)].map((m) => ({ at: m.index, key: m[0].split(":")[0] }));
const mine = starts.findIndex((h) => h.key === key);
let out;
if (mine >= 0) {
  const end = starts[mine + 1]?.at ?? doc.length;
  out = doc.slice(0, starts[mine].at) + section + doc.slice(end);
} else {
  const notes = doc.indexOf("## What the numbers say");
  if (notes < 0) throw new Error(`${docPath} has no "## What the numbers say" to put ${sectionPath} before`);
  out = doc.slice(0, notes) + section + doc.slice(notes);
}
writeFileSync(docPath, out);
