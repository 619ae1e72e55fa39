// GPU machine: session state on the GPU (gpu_forward's KV copies to and from host memory).
// A restored, forked or file-restored GPU session gives exactly the logits of the original; a
// prompt sharing a prefix with a cached state evaluates only its suffix and draws what an
// uncached model draws. Skips where no NVIDIA device exists.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { fixtures, skip } from "./helpers.mjs";
import { loadModel } from "../../dist/index.js";

const { dir, fixture } = fixtures("gpu-state");

function tokens(n, seed, vocab) {
  return Array.from({ length: n }, (_, i) => (i * 7919 + seed * 104729 + 13) % vocab);
}

test("a GPU session's state restores, forks and round-trips through a file exactly", { skip }, async () => {
  const path = fixture("tiny-qwen3", "Q4_K");
  const model = await loadModel(path, { gpu: "auto", contextSize: 256, cacheRam: 0 });
  try {
    const vocab = model.info.vocabSize;
    const prompt = tokens(100, 1, vocab);
    const probe = tokens(3, 2, vocab);
    const original = model.createSession();
    await original.evaluate(prompt);
    const state = await original.save();
    const file = join(dir, "state.bin");
    await original.save(file);
    const fork = await original.fork();
    const expected = await original.evaluate(probe, { logits: "all" });

    assert.deepEqual(await fork.evaluate(probe, { logits: "all" }), expected, "fork");
    const restored = model.createSession();
    await restored.restore(state);
    assert.deepEqual(await restored.evaluate(probe, { logits: "all" }), expected, "restore from memory");
    const fromFile = model.createSession();
    await fromFile.restore(file);
    assert.equal(fromFile.position, prompt.length);
    assert.deepEqual(await fromFile.evaluate(probe, { logits: "all" }), expected, "restore from a file");
  } finally {
    model.dispose();
  }
});

test("a GPU session restores a shared prefix from the prompt-state cache", { skip }, async () => {
  const path = fixture("tiny-qwen3", "Q4_K");
  const cached = await loadModel(path, { gpu: "auto", contextSize: 1100 });
  const uncached = await loadModel(path, { gpu: "auto", contextSize: 1100, cacheRam: 0 });
  try {
    const vocab = cached.info.vocabSize;
    const shared = tokens(1000, 3, vocab);
    const writer = cached.createSession();
    await writer.generate([...shared, ...tokens(10, 4, vocab)], { maxTokens: 4 }).result;
    const second = [...shared, ...tokens(10, 5, vocab)];
    const run = await cached.createSession().generate(second, { maxTokens: 16 }).result;
    assert.equal(run.timings.cachedPromptTokens, 1000);
    assert.equal(run.timings.promptTokens, 10);
    assert.equal(run.timings.promptCacheHit, true);
    const reference = await uncached.createSession().generate(second, { maxTokens: 16 }).result;
    assert.deepEqual(run.tokens, reference.tokens);
  } finally {
    cached.dispose();
    uncached.dispose();
  }
});
