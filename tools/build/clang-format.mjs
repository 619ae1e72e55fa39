// Checks (--check) or fixes (--fix) the C++ and CUDA sources under native/ with clang-format
// (Debian package clang-format); the style is .clang-format at the root.
import { readdirSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { spawnSync } from "node:child_process";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const mode = process.argv[2];
if (mode !== "--check" && mode !== "--fix") {
  console.error("usage: clang-format.mjs --check|--fix");
  process.exit(2);
}
const files = [];
const walk = (dir) => {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) walk(p);
    else if (/\.(cc|h|cu|cuh)$/.test(e.name)) files.push(p);
  }
};
walk(join(root, "native"));
const args = mode === "--check" ? ["--dry-run", "--Werror", ...files] : ["-i", ...files];
const r = spawnSync("clang-format", args, { stdio: "inherit" });
if (r.error) {
  console.error(`clang-format not found (${r.error.message}): apt-get install clang-format`);
  process.exit(1);
}
process.exit(r.status ?? 1);
