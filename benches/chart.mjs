#!/usr/bin/env node
// Draws docs/benchmarks.svg: GB/s of weights streamed per kernel, one group of bars per case,
// from JSON-lines files written by kernel-timing (`{"case","kernel","ms","gbps"}` per line).
//   node benches/chart.mjs OUT.svg RESULTS.jsonl…
import { readFileSync, writeFileSync } from "node:fs";

const [out, ...inputs] = process.argv.slice(2);
if (!out || inputs.length === 0) {
  console.error("usage: chart.mjs OUT.svg RESULTS.jsonl…");
  process.exit(2);
}
const rows = inputs.flatMap((f) =>
  readFileSync(f, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l)),
);
const cases = [...new Set(rows.map((r) => r.case))];
const max = Math.max(...rows.map((r) => r.gbps));
const bar = 16, gap = 4, left = 300, width = 500, top = 40;
let y = top;
const parts = [];
const esc = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;");
for (const c of cases) {
  parts.push(`<text x="8" y="${y + 12}" font-weight="bold">${esc(c)}</text>`);
  y += bar + gap;
  for (const r of rows.filter((r) => r.case === c)) {
    const w = Math.max(1, (r.gbps / max) * width);
    const floor = r.kernel.includes("floor");
    parts.push(
      `<text x="${left - 6}" y="${y + 12}" text-anchor="end">${esc(r.kernel)}</text>`,
      `<rect x="${left}" y="${y}" width="${w.toFixed(1)}" height="${bar}" fill="${floor ? "#999" : "#2a6fdb"}"/>`,
      `<text x="${left + w + 4}" y="${y + 12}">${r.gbps.toFixed(2)} GB/s (${r.ms.toFixed(1)} ms)</text>`,
    );
    y += bar + gap;
  }
  y += 10;
}
const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="${left + width + 200}" height="${y + 10}" font-family="sans-serif" font-size="12">
<text x="8" y="20" font-size="14" font-weight="bold">lm-head mat-vec: GB/s of weights streamed (higher is better; grey = memory floor)</text>
${parts.join("\n")}
</svg>
`;
writeFileSync(out, svg);
console.log(`wrote ${out} (${rows.length} bars)`);
