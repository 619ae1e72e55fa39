// GPU machine: adaptive residency on a hybrid model (a small GPU pool: a quarter of each
// layer's experts) moves experts between steps without changing the output: greedy tokens
// equal the static placement's and the all-GPU run's; experts did move (residency events,
// stats().residency.moves) and the GPU served a larger share of routed calls than with the
// same placement held static. Skips where no NVIDIA device exists.
import { test } from "node:test";
import assert from "node:assert/strict";
import { fixtures, skip } from "./helpers.mjs";
import { loadModel } from "../../dist/index.js";

const { fixture } = fixtures("residency");
const CONTEXT = 1024;

// The requests every run gets: a prompt long enough to stream its host experts (>= 64 rows),
// then one short enough to hand its rows to the CPU, each followed by greedy decoding.
async function requests(model) {
  const vocab = model.info.vocabSize;
  const prompt = (count, seed) => Array.from({ length: count }, (_, i) => (i * 7919 + seed) % vocab);
  const out = [];
  for (const [length, seed] of [
    [100, 13],
    [40, 29],
  ]) {
    const session = model.createSession();
    const { tokens } = await session.generate(prompt(length, seed), { maxTokens: 48 }).result;
    out.push(tokens);
    session.dispose();
  }
  return out;
}

// The all-GPU plan with the lowest quarter of each layer's expert ids on the GPU.
function quarterOnGpu(plan) {
  const edited = JSON.parse(JSON.stringify(plan));
  for (const layer of edited.layers) {
    const all = [...layer.gpu, ...layer.host].sort((a, b) => a - b);
    const gpu = Math.max(1, Math.floor(all.length / 4));
    layer.gpu = all.slice(0, gpu);
    layer.host = all.slice(gpu);
    layer.reason = "test: a quarter on the GPU";
  }
  return edited;
}

for (const [preset, type] of [
  ["tiny-qwen3moe", "Q4_K"],
  ["tiny-qwen3moe", "Q8_0"],
  ["tiny-deepseek2", "Q4_K"],
]) {
  test(`${preset} ${type}: adaptive residency moves experts, output unchanged`, { skip }, async () => {
    const path = fixture(preset, type);
    const reference = await loadModel(path, { gpu: "auto", contextSize: CONTEXT });
    const plan = quarterOnGpu(reference.plan);
    const allGpu = await requests(reference);
    assert.equal(reference.stats().residency.adaptive, false, "nothing to move with every expert on the GPU");
    assert.equal(reference.stats().residency.gpuHitRate, 1);
    reference.dispose();

    const fixed = await loadModel(path, { gpu: "auto", contextSize: CONTEXT, plan, residency: "static" });
    const staticTokens = await requests(fixed);
    const staticStats = fixed.stats().residency;
    fixed.dispose();
    assert.equal(staticStats.adaptive, false);
    assert.equal(staticStats.moves, 0);

    const adaptive = await loadModel(path, { gpu: "auto", contextSize: CONTEXT, plan });
    const events = [];
    adaptive.on("residency", (event) => events.push(event));
    const adaptiveTokens = await requests(adaptive);
    const adaptiveStats = adaptive.stats().residency;
    adaptive.dispose();
    console.log(`${type}: static ${JSON.stringify(staticStats)}`);
    console.log(`${type}: adaptive ${JSON.stringify(adaptiveStats)}, ${events.length} residency events`);

    assert.deepEqual(staticTokens, allGpu, "static: greedy tokens differ from the all-GPU run's");
    assert.deepEqual(adaptiveTokens, allGpu, "adaptive: greedy tokens differ from the all-GPU run's");
    assert.equal(adaptiveStats.adaptive, true);
    assert.ok(adaptiveStats.moves > 0, "experts moved");
    const moved = events.reduce((n, e) => n + e.moves.length, 0);
    assert.equal(moved, adaptiveStats.moves, "every move was reported in a residency event");
    for (const e of events) {
      assert.equal(
        e.movesPerLayer.reduce((a, b) => a + b, 0),
        e.moves.length,
      );
      for (const m of e.moves) assert.ok(plan.layers[m.layer] && m.seated !== m.evicted, JSON.stringify(m));
    }
    assert.equal(adaptiveStats.gpuCalls + adaptiveStats.hostCalls, staticStats.gpuCalls + staticStats.hostCalls);
    assert.ok(
      adaptiveStats.gpuHitRate > staticStats.gpuHitRate,
      `GPU hit rate ${adaptiveStats.gpuHitRate} (adaptive) vs ${staticStats.gpuHitRate} (static)`,
    );
  });
}

test("adaptive residency is deterministic for a given request history", { skip }, async () => {
  const path = fixture("tiny-qwen3moe", "Q4_K");
  const reference = await loadModel(path, { gpu: "auto", contextSize: CONTEXT });
  const plan = quarterOnGpu(reference.plan);
  reference.dispose();
  const runs = [];
  for (let run = 0; run < 2; ++run) {
    const model = await loadModel(path, { gpu: "auto", contextSize: CONTEXT, plan });
    const moves = [];
    model.on("residency", (event) => moves.push(...event.moves));
    await requests(model);
    runs.push({ moves, profile: model.routingProfile() });
    model.dispose();
  }
  assert.deepEqual(runs[1].moves, runs[0].moves);
  assert.deepEqual(runs[1].profile, runs[0].profile);
});
