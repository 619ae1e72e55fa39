// Run as a child process by hybrid-first-pass.test.mjs: `node hybrid-first-pass.mjs <model>
// <plan.json> <tokens.json> <out.f32>` loads the model with the plan (experts on the CPU beside
// the GPU) and writes the logits of its first pass, the tokens evaluated from position 0. A pass
// is the process's first only in a process of its own: kernels the driver has loaded once stay
// loaded. A BloomeryError exits with status 3 and its code on stderr. Without arguments (node
// --test loads every module under test/) it does nothing.
import { readFileSync, writeFileSync } from "node:fs";
import { loadModel } from "../../dist/index.js";

const [path, planFile, tokensFile, out] = process.argv.slice(2);
if (path) {
  try {
    const plan = JSON.parse(readFileSync(planFile, "utf8"));
    const model = await loadModel(path, { gpu: "auto", contextSize: 1024, plan });
    const tokens = JSON.parse(readFileSync(tokensFile, "utf8"));
    writeFileSync(out, await model.createSession().evaluate(tokens, { logits: "all" }));
    model.dispose();
  } catch (error) {
    if (error?.code === undefined) throw error;
    process.stderr.write(`${error.code}: ${error.message}\n`);
    process.exit(3);
  }
}
