// GPU machine: session state on the GPU (gpu_forward's KV copies to and from host memory).
// A restored, forked or file-restored GPU session gives exactly the logits of the original; a
// prompt sharing a prefix with a cached state evaluates only its suffix and draws what an
// uncached model draws. Skips where no NVIDIA device exists.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { expectExactStateRoundTrips, fixtures, skip } from "./helpers.mjs";
import { loadModel } from "../../dist/index.js";

const { dir, fixture } = fixtures("gpu-state");

function tokens(n, seed, vocab) {
  return Array.from({ length: n }, (_, i) => (i * 7919 + seed * 104729 + 13) % vocab);
}

// DeepSeek-V4's state adds its compressed rows (300 positions: 75 rows of 4, 2 of 128) and its
// compressors' rings (recurrent states, mid-block after 300 positions) to the window's rows.
for (const [preset, type, length] of [
  ["tiny-qwen3", "Q4_K", 100],
  ["tiny-deepseek4", "Q8_0", 300],
]) {
  test(
    `${preset}: a GPU session's state restores, forks and round-trips through a file exactly`,
    { skip },
    async () => {
      const path = fixture(preset, type);
      const model = await loadModel(path, { gpu: "auto", contextSize: 512, cacheRam: 0 });
      try {
        const vocab = model.info.vocabSize;
        await expectExactStateRoundTrips(model, tokens(length, 1, vocab), tokens(3, 2, vocab), join(dir, "state.bin"));
      } finally {
        model.dispose();
      }
    },
  );
}

// The restored rows are copied behind the suffix's pass, each layer waited for where it reads them
// (engine/gpu_forward.h: restore_kv). qwen3moe-2b's 24 layers of a 4,000-token prefix take longer
// to copy than the 10-token pass takes to reach its last layers, so a layer that did not wait would
// read rows still on their way. The reference evaluates the same rows in the same passes without a
// cache: the writer's prompt, then the suffix in the session that holds the shared prefix.
for (const [preset, type] of [
  ["tiny-qwen3", "Q4_K"],
  ["qwen3moe-2b", undefined],
  // Windowed layers: the state keeps their windows (4,000 positions moved them on the GPU).
  ["tiny-gpt-oss", "Q8_0"],
  ["tiny-mimo2", "Q8_0"],
  // The lightning indexer's keys ride in the cached rows: the restored prefix's choices are the same.
  ["tiny-glm-dsa", "Q8_0"],
]) {
  test(`${preset}: a GPU session restores a shared prefix from the prompt-state cache`, { skip }, async () => {
    const path = fixture(preset, type);
    const cached = await loadModel(path, { gpu: "auto", contextSize: 4096 });
    const uncached = await loadModel(path, { gpu: "auto", contextSize: 4096, cacheRam: 0 });
    try {
      const vocab = cached.info.vocabSize;
      const shared = tokens(4000, 3, vocab);
      const first = [...shared, ...tokens(10, 4, vocab)];
      const second = [...shared, ...tokens(10, 5, vocab)];
      const options = { maxTokens: 16, logprobs: 4 };
      await cached.createSession().generate(first, { maxTokens: 4 }).result;
      const run = await cached.createSession().generate(second, options).result;
      assert.equal(run.timings.cachedPromptTokens, 4000);
      assert.equal(run.timings.promptTokens, 10);
      assert.equal(run.timings.promptCacheHit, true);
      const holder = uncached.createSession();
      await holder.generate(first, { maxTokens: 4 }).result;
      const reference = await holder.generate(second, options).result;
      assert.equal(reference.timings.cachedPromptTokens, 4000);
      assert.equal(reference.timings.promptCacheHit, false);
      assert.deepEqual(run.tokens, reference.tokens);
      assert.deepEqual(run.logprobs, reference.logprobs);
    } finally {
      cached.dispose();
      uncached.dispose();
    }
  });
}
