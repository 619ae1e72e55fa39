// Run as a child process by helpers.mjs's cpuLogits(): `node cpu-logits.mjs <model> <tokens.json>
// <out.f32> <contextSize>` writes the CPU path's logits for every position of the tokens (one
// prompt) under the BLOOMERY_CPU_ISA its parent set: the cap is read once per process, so another
// tier needs another process. Without arguments (node --test loads every module under test/) it
// does nothing.
import { readFileSync, writeFileSync } from "node:fs";
import { loadModel } from "../../dist/index.js";

const [path, tokensFile, out, contextSize] = process.argv.slice(2);
if (path) {
  const model = await loadModel(path, { gpu: false, contextSize: Number(contextSize) });
  const logits = await model.createSession().evaluate(JSON.parse(readFileSync(tokensFile, "utf8")), { logits: "all" });
  writeFileSync(out, logits);
  model.dispose();
}
