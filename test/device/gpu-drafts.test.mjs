// GPU machine: speculative decoding's verify passes (a pending token and its drafts in one pass
// of several rows) and the context shift's K re-rotation, on the GPU and on a hybrid placement.
// Greedy runs with drafts give the tokens greedy runs without give, alone and two at once; a run
// that shifts its context on the GPU gives the CPU's tokens past the shift. Drafts run on the
// default model (trained, so that n-gram drafts on repetitive text get kept); MTP drafts beside the
// GPU on the tiny fixtures with next-token-prediction layers. Skips where no NVIDIA device exists.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fixtures, generated as run, skip, split } from "./helpers.mjs";
import { loadModel } from "../../dist/index.js";
import { writeDraftModel } from "../../bench/draft-model.mjs";

const DEFAULT_MODEL = "models/bloomery-tiny-moe-Q8_0.gguf";
const PROMPTS = [
  "A river is",
  "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,",
  "To run means to move fast. To walk means to move slowly. To run means to move fast. To walk means",
];
const NGRAM = { source: "ngram", adaptive: false, max: 6 };
const { fixture } = fixtures("drafts");

/** Greedy tokens with `draft` equal those without, alone and with the prompts run at once. */
async function expectDraftsKeepTokens(model, draft, what) {
  let drafted = 0;
  let kept = 0;
  for (const prompt of PROMPTS) {
    const plain = await run(model, prompt, { maxTokens: 80, draft: false });
    const drafting = await run(model, prompt, { maxTokens: 80, draft });
    assert.deepEqual(drafting.tokens, plain.tokens, `${what}: ${JSON.stringify(prompt)}`);
    drafted += drafting.timings.draftTokens;
    kept += drafting.timings.draftAccepted;
  }
  console.log(`${what}: ${kept} of ${drafted} drafted tokens kept`);
  assert.ok(kept > 0 && kept < drafted, `${what}: drafts verified, some kept and some rolled back`);
  const alone = [];
  for (const prompt of PROMPTS) alone.push((await run(model, prompt, { maxTokens: 80, draft })).tokens);
  const together = await Promise.all(PROMPTS.map((prompt) => run(model, prompt, { maxTokens: 80, draft })));
  assert.deepEqual(
    together.map((r) => r.tokens),
    alone,
    `${what}: sessions sharing verify passes`,
  );
}

test("n-gram drafts on the whole-GPU default model keep greedy tokens", { skip }, async () => {
  const model = await loadModel(DEFAULT_MODEL, { gpu: "auto", contextSize: 512, parallel: 3 });
  try {
    assert.ok(
      model.plan.layers.every((l) => l.host.length === 0),
      "the whole model on the GPU",
    );
    await expectDraftsKeepTokens(model, NGRAM, "whole GPU, ngram");
  } finally {
    model.dispose();
  }
});

test("n-gram and draft-model drafts on a hybrid placement keep greedy tokens", { skip }, async () => {
  const whole = await loadModel(DEFAULT_MODEL, { gpu: "auto", contextSize: 512 });
  const plan = split(whole.plan, (e) => e % 2 === 0);
  whole.dispose();
  const draftModel = await writeDraftModel(
    DEFAULT_MODEL,
    join(mkdtempSync(join(tmpdir(), "bloomery-gpu-drafts-")), "draft.gguf"),
  );
  const model = await loadModel(DEFAULT_MODEL, { gpu: "auto", contextSize: 512, parallel: 3, plan, draftModel });
  try {
    assert.ok(
      model.plan.layers.every((l) => l.host.length > 0),
      "every layer has experts on the CPU",
    );
    await expectDraftsKeepTokens(model, NGRAM, "hybrid, ngram");
    await expectDraftsKeepTokens(model, { source: "model", adaptive: false, max: 4 }, "hybrid, draft model");
    assert.ok(model.stats().offload.cpuExpertSeconds > 0, "the CPU ran experts");
  } finally {
    model.dispose();
  }
});

// MTP drafts beside a model on the GPU: the next-token-prediction layer runs on the CPU from the
// normed hidden states the GPU's passes return (GpuSequenceRows::keep_hidden); the GPU verifies.
// Greedy tokens with them equal those without, alone and three at once (the tiny fixtures' random
// layers keep few drafts: the rollback is what is exercised), on GLM's and DeepSeek's layouts and
// beside Qwen3.5's recurrent states; MiMo-V2's layer (hidden states before the norm) is refused by name.
const MTP = { source: "mtp", adaptive: false, max: 4 };
const MTP_PROMPTS = [
  Array.from({ length: 24 }, (_, i) => 10 + ((i * 37) % 300)),
  Array.from({ length: 40 }, (_, i) => 10 + (i % 12)),
  Array.from({ length: 16 }, (_, i) => 10 + ((i * 101) % 350)),
];
for (const preset of ["tiny-glm4moe", "tiny-deepseek2", "tiny-qwen35moe-mtp"]) {
  test(`${preset} F32: MTP drafts beside the GPU keep greedy tokens`, { skip }, async () => {
    const model = await loadModel(fixture(preset, "F32"), { gpu: "auto", contextSize: 512, parallel: 3 });
    try {
      assert.equal(model.info.gpu, true);
      const options = { maxTokens: 48, temperature: 0 };
      let drafted = 0;
      const plain = [];
      for (const prompt of MTP_PROMPTS) {
        const expected = await run(model, prompt, { ...options, draft: false });
        const drafting = await run(model, prompt, { ...options, draft: MTP });
        assert.deepEqual(drafting.tokens, expected.tokens, JSON.stringify(prompt));
        drafted += drafting.timings.draftTokens;
        plain.push(expected.tokens);
      }
      assert.ok(drafted > 0, "drafts were verified");
      const together = await Promise.all(MTP_PROMPTS.map((prompt) => run(model, prompt, { ...options, draft: MTP })));
      assert.deepEqual(
        together.map((r) => r.tokens),
        plain,
        "sessions sharing verify passes",
      );
    } finally {
      model.dispose();
    }
  });
}

for (const [preset, takes] of [
  ["tiny-mimo2", /before the output norm/],
  ["tiny-deepseek4", /hyper-connection streams/],
]) {
  test(`${preset}: MTP drafts beside the GPU are refused by name`, { skip }, async () => {
    await assert.rejects(loadModel(fixture(preset, "F32"), { gpu: "auto", draft: "mtp" }), (error) => {
      assert.equal(error.code, "DRAFT_UNSUPPORTED");
      assert.match(error.message, takes);
      return true;
    });
  });
}

// GPU and CPU round a Q8_0 model's activations apart (issue 9), so their greedy runs part within
// a few dozen tokens whether or not they shift; on F32 weights they agree to KL ~1e-10, so a run
// well past its first shift stays token for token the same unless the shift itself differs.
for (const preset of ["tiny-qwen3moe", "tiny-deepseek2"]) {
  test(`${preset} F32: a context shift on the GPU gives the CPU's tokens past the shift`, { skip }, async () => {
    const context = 128;
    const path = fixture(preset, "F32");
    const tokensOn = async (gpu) => {
      const model = await loadModel(path, { gpu, contextSize: context });
      try {
        const vocab = model.info.vocabSize;
        const prompt = Array.from({ length: 24 }, (_, i) => (i * 7919 + 13) % vocab);
        // End tokens banned, so that the run goes on past the context.
        const logitBias = Object.fromEntries(model.info.endTokens.map((t) => [t, -Infinity]));
        const options = { maxTokens: context + 64, contextShift: { keep: 4 }, logitBias };
        return (await run(model, prompt, options)).tokens;
      } finally {
        model.dispose();
      }
    };
    const gpu = await tokensOn("auto");
    const cpu = await tokensOn(false);
    assert.equal(gpu.length, context + 64, "generation went past the context: it shifted");
    let same = 0;
    while (same < gpu.length && gpu[same] === cpu[same]) same += 1;
    console.log(`${preset} context shift: GPU and CPU agree on the first ${same} of ${gpu.length} tokens`);
    assert.equal(same, gpu.length, `GPU and CPU part at token ${same}`);
  });
}
