// GPU machine: the hybrid linear-attention Qwens (Gated DeltaNet layers) have no GPU kernels yet,
// so a load on the GPU is refused by name, never run wrong; the same file loads on the CPU.
import { test } from "node:test";
import assert from "node:assert/strict";
import { fixtures, skip } from "./helpers.mjs";
import { loadModel } from "../../dist/index.js";

const { fixture } = fixtures("recurrent");

for (const preset of ["tiny-qwen35moe", "tiny-qwen3next"]) {
  test(`${preset} is refused on the GPU by name and runs on the CPU`, { skip }, async () => {
    const path = fixture(preset, "Q8_0");
    await assert.rejects(loadModel(path, { gpu: { device: 0 } }), (error) => {
      assert.equal(error.code, "UNSUPPORTED_FEATURE");
      assert.match(error.message, /linear-attention/);
      return true;
    });
    const model = await loadModel(path, { gpu: false, contextSize: 256 });
    const logits = await model.createSession().evaluate([1, 2, 3]);
    assert.equal(logits.length, model.info.vocabSize);
    model.dispose();
  });
}
