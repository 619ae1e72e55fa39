/**
 * `export-cli <checkpoint dir> <out.gguf> [name]`: the command line of export.ts.
 * @module
 */
import { exportCheckpoint } from "./export.js";

const [dir, out, name = "bloomery tiny MoE"] = process.argv.slice(2);
if (!dir || !out) {
  console.error("usage: export-cli <checkpoint dir> <out.gguf> [name]");
  process.exit(2);
}
const tensors = await exportCheckpoint(dir, out, name);
console.log(`${out}: ${tensors.length} tensors`);
