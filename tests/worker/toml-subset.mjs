// Reads the generated wrangler configs in tests, with no code of the CLI (which writes them with a
// TOML library).

/** The subset of TOML the generated configs and the deployment record use: tables, arrays of
 * tables, strings, numbers, booleans and arrays of strings (over several lines too). */
export function readToml(text) {
  const root = {};
  let at = root;
  let open = "";
  for (const raw of text.split("\n")) {
    let line = raw.trim();
    if (open || /^[A-Za-z0-9_-]+ = \[$/.test(line)) {
      open += line;
      if (line !== "]") continue;
      [line, open] = [open.replace(/,\]$/, "]"), ""];
    }
    if (!line || line.startsWith("#")) continue;
    let m;
    if ((m = /^\[\[(.+)\]\]$/.exec(line))) {
      const path = m[1].split(".");
      let parent = root;
      for (const p of path.slice(0, -1)) parent = parent[p] ??= {};
      (parent[path.at(-1)] ??= []).push((at = {}));
    } else if ((m = /^\[(.+)\]$/.exec(line))) {
      at = root;
      for (const p of m[1].split(".")) at = at[p] ??= {};
    } else if ((m = /^([A-Za-z0-9_-]+) = (.+)$/.exec(line))) {
      at[m[1]] = JSON.parse(m[2]);
    } else {
      throw new Error(`stand-in: cannot read the TOML line ${JSON.stringify(line)}`);
    }
  }
  return root;
}
