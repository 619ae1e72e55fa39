// The CPU benchmarks' model: a bloomery-synth preset written once and kept under the temp
// directory, so runs after the first skip the minutes of writing it.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, renameSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

/** The path of `preset`'s file, writing it first when it is not there yet. */
export function benchModel(preset) {
  const dir = join(tmpdir(), "bloomery-bench");
  const path = join(dir, `${preset}.gguf`);
  if (!existsSync(path)) {
    mkdirSync(dir, { recursive: true });
    console.log(`writing ${path} ...`);
    execFileSync(process.execPath, [join(root, "dist/synth-cli.js"), preset, `${path}.partial`], { stdio: "inherit" });
    renameSync(`${path}.partial`, path);
  }
  return path;
}
