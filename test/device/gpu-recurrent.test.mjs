// GPU machine: the hybrid linear-attention Qwens (Gated DeltaNet layers beside gated attention) on
// the GPU, where a sequence's recurrent states live on the card beside its KV rows. A saved, forked
// or file-restored GPU session gives exactly the logits of the original (its recurrent states went
// to host memory and back); a prompt that shares a prefix restores the nearest checkpoint inside it
// (from the prompt-state cache, or the session's own) and then draws exactly what the same rows in
// the same passes draw, and a checkpoint taken inside a pass continues as the CPU's evaluation; a state saved on the GPU continues on the CPU within the bar; n-gram drafts
// roll rejected tokens back on the card and keep greedy decoding's tokens, alone and beside another
// session; experts split between the GPU and the CPU give the whole-GPU tokens (up to a tie).
// DeepSeek-V4's compressors' rings, taken inside a GPU pass, continue as the CPU's evaluation too.
// (GPU against CPU logits over 1,000 tokens: gpu-vs-cpu.test.mjs.) Skips where no NVIDIA device exists.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import {
  assertWithinBar,
  compare,
  expectExactStateRoundTrips,
  fixtures,
  generated as run,
  sameGreedy,
  skip,
  split,
} from "./helpers.mjs";
import { agreementBar } from "../distributions.mjs";
import { loadModel } from "../../dist/index.js";

const { dir, fixture } = fixtures("recurrent");
const PRESETS = ["tiny-qwen35moe", "tiny-qwen3next"];

/** `n` token ids of the tiny vocabulary, the same for the same seed. */
function tokens(n, seed) {
  let x = seed * 2654435761;
  return Array.from({ length: n }, () => {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    return 10 + (x % 370);
  });
}

for (const preset of PRESETS) {
  test(`${preset}: a GPU session's recurrent states save, fork and restore exactly`, { skip }, async () => {
    // F32 weights: the GPU and the CPU agree to KL ~1e-10, so three rows of each can be held to the bar.
    const path = fixture(preset, "F32");
    const model = await loadModel(path, { gpu: "auto", contextSize: 1024, cacheRam: 0 });
    const cpu = await loadModel(path, { gpu: false, contextSize: 1024, cacheRam: 0 });
    try {
      assert.equal(model.info.gpu, true);
      const probe = tokens(3, 2);
      const file = join(dir, `${preset}.state`);
      const { expected } = await expectExactStateRoundTrips(model, tokens(300, 1), probe, file);

      // The same state continues on the CPU: its logits within the bar of the GPU's.
      const onCpu = cpu.createSession();
      await onCpu.restore(file);
      const cpuNext = await onCpu.evaluate(probe, { logits: "all" });
      const m = compare(cpuNext, expected, model.info.vocabSize);
      console.log(`${preset}: a GPU state continued on the CPU ${JSON.stringify(m)}`);
      assertWithinBar({ "GPU state on the CPU": m }, agreementBar(1, 0));
    } finally {
      model.dispose();
      cpu.dispose();
    }
  });

  test(`${preset}: a shared prefix restores the nearest checkpoint on the GPU`, { skip }, async () => {
    const path = fixture(preset, "Q8_0");
    const cached = await loadModel(path, { gpu: "auto", contextSize: 1300, cacheRam: "256MiB" });
    const plain = await loadModel(path, { gpu: "auto", contextSize: 1300, cacheRam: 0 });
    try {
      // A prompt of 1,200 tokens leaves checkpoints at 176, 688, its tail 1,196 and 1,200.
      const prompt = tokens(1200, 8);
      const options = { maxTokens: 8, logprobs: 4 };
      await cached.createSession().generate(prompt, { maxTokens: 1 }).result;
      for (const [shared, restored] of [
        [687, 176],
        [688, 688],
        [700, 688],
      ]) {
        const next = [...prompt.slice(0, shared), ...tokens(40, 9 + shared)];
        const reuse = await run(cached, next, options);
        assert.equal(reuse.timings.cachedPromptTokens, restored, `a prefix of ${shared} from the cache`);
        // The session's own checkpoint: the same rows evaluated in the same passes.
        const holder = plain.createSession();
        await holder.generate(prompt, { maxTokens: 1 }).result;
        const own = await holder.generate(next, options).result;
        holder.dispose();
        assert.equal(own.timings.cachedPromptTokens, restored, `a prefix of ${shared}, the session's own`);
        assert.deepEqual(reuse.tokens, own.tokens, `a prefix of ${shared}`);
        assert.deepEqual(reuse.logprobs, own.logprobs, `a prefix of ${shared}`);
      }
      // The same prompt again: its tail checkpoint, 4 tokens before its end.
      const session = plain.createSession();
      const first = await session.generate(prompt, options).result;
      const again = await session.generate(prompt, options).result;
      assert.equal(again.timings.cachedPromptTokens, 1196);
      assert.deepEqual(again.tokens, first.tokens);
      session.dispose();
    } finally {
      cached.dispose();
      plain.dispose();
    }
  });

  test(`${preset}: checkpoints taken inside a GPU pass continue as the CPU's whole evaluation`, { skip }, async () => {
    // F32 weights: the GPU and the CPU agree to KL ~1e-10, so a state taken a row early or late
    // (a token seen twice or not at all) is far outside the bar. Whole on the GPU, and with half
    // the experts on the CPU (the hybrid pass).
    const path = fixture(preset, "F32");
    const whole = await loadModel(path, { gpu: "auto", contextSize: 1300, cacheRam: 0 });
    const hybrid = await loadModel(path, {
      gpu: "auto",
      contextSize: 1300,
      cacheRam: 0,
      plan: split(whole.plan, (e) => e % 2 === 0),
    });
    const cpu = await loadModel(path, { gpu: false, contextSize: 1300, cacheRam: 0 });
    try {
      // A prompt of 1,200 tokens: one pass of the whole model's step (the hybrid's may be shorter),
      // its checkpoints at 176, 688 and the tail 1,196 taken inside it.
      const prompt = tokens(1200, 8);
      const probe = tokens(3, 2);
      const greedy = { maxTokens: 1, temperature: 0 };
      for (const model of [whole, hybrid]) {
        for (const [shared, restored] of [
          [687, 176],
          [700, 688],
          [1199, 1196],
        ]) {
          const next = [...prompt.slice(0, shared), ...tokens(5, 9 + shared)];
          const session = model.createSession();
          const before = model.stats().passes;
          await session.generate(prompt, greedy).result;
          if (model === whole) assert.equal(model.stats().passes - before, 1, "the prompt ran in one pass");
          const reuse = await session.generate(next, greedy).result;
          assert.equal(reuse.timings.cachedPromptTokens, restored, `a prefix of ${shared}`);
          const onGpu = await session.evaluate(probe, { logits: "all" });
          session.dispose();
          const reference = cpu.createSession();
          const cpuRun = await reference.generate(next, greedy).result;
          assert.deepEqual(reuse.tokens, cpuRun.tokens, `a prefix of ${shared}`);
          const onCpu = await reference.evaluate(probe, { logits: "all" });
          reference.dispose();
          const m = compare(onCpu, onGpu, model.info.vocabSize);
          assertWithinBar({ [`the checkpoint at ${restored}`]: m }, agreementBar(1, 0));
        }
      }
    } finally {
      whole.dispose();
      hybrid.dispose();
      cpu.dispose();
    }
  });

  test(
    `${preset}: n-gram drafts on the GPU keep greedy tokens, alone and beside another session`,
    { skip },
    async () => {
      const path = fixture(preset, "F32");
      const model = await loadModel(path, { gpu: "auto", contextSize: 1024, cacheRam: 0, parallel: 2 });
      try {
        const unit = tokens(12, 21);
        const prompt = [...unit, ...unit, ...unit, ...unit];
        const other = tokens(30, 22);
        const greedy = { maxTokens: 160, temperature: 0 };
        // Drafts from any one-token match, every step: many are rejected and rolled back.
        const ngram = { source: "ngram", max: 4, ngramMin: 1, adaptive: false };
        const plainRun = await run(model, prompt, { ...greedy, draft: false });
        const otherRun = await run(model, other, { ...greedy, draft: false });
        const drafted = await run(model, prompt, { ...greedy, draft: ngram });
        assert.deepEqual(drafted.tokens, plainRun.tokens);
        console.log(
          `${preset}: ${drafted.timings.draftAccepted} of ${drafted.timings.draftTokens} drafted tokens kept`,
        );
        assert.ok(drafted.timings.draftTokens > drafted.timings.draftAccepted, "drafts were rejected");
        const [beside, alongside] = await Promise.all([
          run(model, prompt, { ...greedy, draft: ngram }),
          run(model, other, { ...greedy, draft: false }),
        ]);
        assert.deepEqual(beside.tokens, plainRun.tokens);
        assert.deepEqual(alongside.tokens, otherRun.tokens);
      } finally {
        model.dispose();
      }
    },
  );

  test(`${preset}: experts split between the GPU and the CPU give the whole-GPU tokens`, { skip }, async () => {
    const path = fixture(preset, "F32");
    const whole = await loadModel(path, { gpu: "auto", contextSize: 1024 });
    const plan = split(whole.plan, (e) => e % 2 === 0);
    const hybrid = await loadModel(path, { gpu: "auto", contextSize: 1024, plan });
    try {
      assert.ok(
        hybrid.plan.layers.every((l) => l.host.length > 0),
        "every layer has experts on the CPU",
      );
      for (const seed of [30, 31]) {
        const greedy = await sameGreedy(whole, hybrid, tokens(200, seed), 48);
        console.log(`${preset} hybrid: ${greedy.tieAt < 0 ? "equal" : `equal up to a tie at ${greedy.tieAt}`}`);
      }
      assert.ok(hybrid.stats().offload.cpuExpertSeconds > 0, "the CPU ran experts");
    } finally {
      whole.dispose();
      hybrid.dispose();
    }
  });
}

test(
  "tiny-deepseek4: checkpoints taken inside a GPU pass continue as the CPU's whole evaluation",
  { skip },
  async () => {
    // DeepSeek-V4's recurrent states are its compressors' rings (blocks of 4 and of 128 positions);
    // its windows of 32 drop the rows before a checkpoint as the prompt goes on, so the prompt-state
    // cache takes each checkpoint's state at once and serves it. The prompt of 1,200 runs in one
    // pass with its checkpoints at 176, 688 and 1,196 inside it; a prompt sharing 687 or 700 of its
    // tokens then restores 176 (mid-block of the 128-position compressor) or 688 and goes on as
    // the CPU's evaluation of the whole prompt does.
    const path = fixture("tiny-deepseek4", "F16");
    const gpu = await loadModel(path, { gpu: "auto", contextSize: 1300, cacheRam: "256MiB" });
    const cpu = await loadModel(path, { gpu: false, contextSize: 1300, cacheRam: 0 });
    try {
      const prompt = tokens(1200, 8);
      const probe = tokens(3, 2);
      const greedy = { maxTokens: 1, temperature: 0 };
      const before = gpu.stats().passes;
      await gpu.createSession().generate(prompt, greedy).result;
      assert.equal(gpu.stats().passes - before, 1, "the prompt ran in one pass");
      for (const [shared, restored] of [
        [687, 176],
        [700, 688],
      ]) {
        const next = [...prompt.slice(0, shared), ...tokens(200, 9 + shared)];
        const session = gpu.createSession();
        const reuse = await session.generate(next, greedy).result;
        assert.equal(reuse.timings.cachedPromptTokens, restored, `a prefix of ${shared}`);
        const onGpu = await session.evaluate(probe, { logits: "all" });
        session.dispose();
        const reference = cpu.createSession();
        await reference.generate(next, greedy).result;
        const onCpu = await reference.evaluate(probe, { logits: "all" });
        reference.dispose();
        assertWithinBar(
          { [`the checkpoint at ${restored}`]: compare(onCpu, onGpu, gpu.info.vocabSize) },
          agreementBar(1, 0),
        );
      }
    } finally {
      gpu.dispose();
      cpu.dispose();
    }
  },
);
