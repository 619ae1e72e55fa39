// Builds the default model that `npm start` runs, once, after `npm install`.
// Until the trained model of models/README.md ships, it is a tiny synthetic MoE.
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { spawnSync } from "node:child_process";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const { bloomery } = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const out = join(root, bloomery.defaultModel);
if (!existsSync(out)) {
  mkdirSync(dirname(out), { recursive: true });
  const r = spawnSync(process.execPath, [join(root, "dist", "synth-cli.js"), "tiny-qwen3moe", out, "--type", "Q8_0"], {
    stdio: "inherit",
  });
  process.exit(r.status ?? 1);
}
