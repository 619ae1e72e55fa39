// GPU machine: routing replayed from a trace (benchmarks only: Model's REPLAY_ROUTING symbol) on the
// GPU, whole and with half of each layer's experts on the CPU (hybrid passes): the passes route
// exactly the trace's experts, one step a token, in prompt passes and in the decode graphs' steps
// (whose router launches read the replayed ids uploaded before each step); the logits are the CPU
// path's under the same replay (the GPU-vs-CPU bar of gpu-vs-cpu.test.mjs); null gives the routers
// back, graphs included. Skips where no NVIDIA device exists.
import { test } from "node:test";
import assert from "node:assert/strict";
import { compare, fixtures, skip, split } from "./helpers.mjs";
import { loadModel } from "../../dist/index.js";
import { uniformChoices } from "../../bench/routing-trace.mjs";

const REPLAY_ROUTING = Symbol.for("bloomery.bench.replayRouting");
const { fixture } = fixtures("replay");
const CONTEXT = 512;
const STEPS = 37;

const tokensOf = (count, seed, vocab) => Array.from({ length: count }, (_, i) => (i * 7919 + seed) % vocab);

function expectedCounts(ids, layers, experts, used, first, rows) {
  const counts = new Uint32Array(layers * experts);
  for (let r = 0; r < rows; ++r) {
    const step = (first + r) % STEPS;
    for (let l = 0; l < layers; ++l) {
      for (let k = 0; k < used; ++k) counts[l * experts + ids[(step * layers + l) * used + k]]++;
    }
  }
  return counts;
}

/** The model's trace and logits for a 30-token prompt then 20 decode steps under the replay of `ids`. */
async function replayed(model, ids, layers, vocab) {
  model[REPLAY_ROUTING]({ layers: Int32Array.from({ length: layers }, (_, l) => l), ids });
  const trace = model.traceRouting();
  const session = model.createSession();
  const rows = [await session.evaluate(tokensOf(30, 3, vocab), { logits: "all" })];
  for (const t of tokensOf(20, 5, vocab)) rows.push(await session.evaluate([t]));
  session.dispose();
  const steps = trace.stop().steps;
  model[REPLAY_ROUTING](null);
  const logits = new Float32Array(rows.reduce((a, r) => a + r.length, 0));
  let at = 0;
  for (const r of rows) {
    logits.set(r, at);
    at += r.length;
  }
  return { steps, logits };
}

async function ownLogits(model, vocab) {
  const session = model.createSession();
  const rows = [await session.evaluate(tokensOf(30, 3, vocab), { logits: "all" })];
  for (const t of tokensOf(20, 5, vocab)) rows.push(await session.evaluate([t]));
  session.dispose();
  return rows.map((r) => [...r]).flat();
}

test("tiny-qwen3moe F32: routing replayed on the GPU, whole and hybrid, is the CPU's", { skip }, async () => {
  const path = fixture("tiny-qwen3moe", "F32");
  const cpu = await loadModel(path, { gpu: false, contextSize: CONTEXT });
  const gpu = await loadModel(path, { gpu: "auto", contextSize: CONTEXT });
  const hybrid = await loadModel(path, {
    gpu: "auto",
    contextSize: CONTEXT,
    plan: split(gpu.plan, (e) => e % 2 === 0),
  });
  try {
    const { layers, experts, expertsUsed, vocabSize } = cpu.info;
    const moeLayers = Array.from({ length: layers }, (_, l) => l);
    const ids = Int32Array.from(uniformChoices({ layers, experts, expertsUsed, moeLayers }, STEPS, 5));
    const reference = await replayed(cpu, ids, layers, vocabSize);
    for (const [name, model] of [
      ["whole", gpu],
      ["hybrid", hybrid],
    ]) {
      const before = await ownLogits(model, vocabSize);
      const got = await replayed(model, ids, layers, vocabSize);
      assert.equal(got.steps.length, 21, `${name}: one prompt pass and 20 decode steps`);
      assert.deepEqual([...got.steps[0]], [...expectedCounts(ids, layers, experts, expertsUsed, 0, 30)], name);
      got.steps.slice(1).forEach((step, i) => {
        const want = expectedCounts(ids, layers, experts, expertsUsed, (30 + i) % STEPS, 1);
        assert.deepEqual([...step], [...want], `${name}: decode step ${i}`);
      });
      const { top1, kl } = compare(reference.logits, got.logits, vocabSize);
      console.log(`# ${name}: replayed GPU vs CPU top-1 ${top1}, KL ${kl}`);
      assert.ok(top1 >= 0.99 && kl <= 1e-3, `${name}: top-1 ${top1}, KL ${kl}`);
      // The routers route again (graphs included): the logits of before the replay, to the bit whole on
      // the GPU; a hybrid pass's differ from run to run by ~1e-5 (measured), far below what other experts make.
      const after = await ownLogits(model, vocabSize);
      const back = compare(Float32Array.from(before), Float32Array.from(after), vocabSize);
      if (name === "whole") assert.deepEqual(after, before, "whole: the routers route again after null");
      assert.ok(back.top1 === 1 && back.kl <= 1e-8, `${name}: after null, top-1 ${back.top1}, KL ${back.kl}`);
    }
    assert.ok(hybrid.stats().offload.cpuExpertSeconds > 0, "the CPU ran experts");
  } finally {
    hybrid.dispose();
    gpu.dispose();
    cpu.dispose();
  }
});
