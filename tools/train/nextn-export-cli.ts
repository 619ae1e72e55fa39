/**
 * `train-nextn-export <model.gguf> <nextn.safetensors> <out.gguf>`: the command line of nextn-export.ts.
 * @module
 */
import { exportWithNextn } from "./nextn-export.js";

const [model, nextn, out] = process.argv.slice(2);
if (!model || !nextn || !out) {
  console.error("usage: train-nextn-export <model.gguf> <nextn.safetensors> <out.gguf>");
  process.exit(2);
}
const tensors = await exportWithNextn(model, nextn, out);
console.log(`${out}: ${tensors.length} tensors`);
