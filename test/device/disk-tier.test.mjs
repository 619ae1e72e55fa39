// GPU machine: the disk tier in hybrid runs. The experts a plan puts on the CPU are paged from
// the model file through a small RAM arena (the minimum: one layer's paged experts); the greedy
// tokens are the all-GPU run's and the distributions agree as hybrid.test.mjs asks of host
// experts in RAM. Against the same split with those experts in RAM, short prompts and the decode
// steps after them (both hand their rows to the CPU) give the same logits bit for bit; long prompts,
// which with experts in RAM copy them to the GPU, hand their rows to the CPU too with a disk
// tier (no streamed pass, no prompt staging). stats().residency puts every routed call in one tier
// (GPU, RAM: the arena's hits, disk: its reads). Skips where no NVIDIA device exists.
import { test } from "node:test";
import assert from "node:assert/strict";
import { compare, fixtures, missBound, skip } from "./helpers.mjs";
import { loadModel } from "../../dist/index.js";

const { dir, fixture } = fixtures("disk-tier");
const CONTEXT = 1024;

// Logits of a 600-token prompt (one pass); of a 12-token prompt in a new session
// (under StreamChoice's floor of 16 rows: the CPU runs its host experts with experts in RAM too)
// and 24 decode steps of given tokens after it; then 24 greedy tokens of another session.
async function runOf(model) {
  const vocab = model.info.vocabSize;
  const tokens = (count, seed) => Array.from({ length: count }, (_, i) => (i * 7919 + seed) % vocab);
  const session = model.createSession();
  const long = await session.evaluate(tokens(600, 13), { logits: "all" });
  session.dispose();
  const fresh = model.createSession();
  const short = await fresh.evaluate(tokens(12, 29), { logits: "all" });
  const steps = new Float32Array(24 * vocab);
  for (const [i, token] of tokens(24, 101).entries()) steps.set(await fresh.evaluate([token]), i * vocab);
  fresh.dispose();
  const greedy = model.createSession();
  const { tokens: generated } = await greedy.generate(tokens(8, 131), { maxTokens: 24 }).result;
  greedy.dispose();
  return { long, steps, short, generated };
}

// The all-GPU plan with each layer's experts split: `onGpu(e)` on the GPU, the others on `tier`.
function split(plan, onGpu, tier) {
  const edited = JSON.parse(JSON.stringify(plan));
  for (const layer of edited.layers) {
    const all = [...layer.gpu, ...layer.host, ...(layer.disk ?? [])].sort((a, b) => a - b);
    layer.gpu = all.filter(onGpu);
    layer.host = tier === "host" ? all.filter((e) => !onGpu(e)) : [];
    layer.disk = tier === "disk" ? all.filter((e) => !onGpu(e)) : [];
    layer.reason = `test split, the CPU's experts on ${tier}`;
  }
  return edited;
}

const sameBits = (a, b) => Buffer.from(a.buffer).equals(Buffer.from(b.buffer));

for (const [preset, type] of [
  ["tiny-qwen3moe", "Q4_K"],
  ["tiny-qwen3moe", "Q8_0"],
  ["tiny-glm4moe", "Q4_K"],
  ["tiny-deepseek2", "Q8_0"],
  ["tiny-glm-dsa", "Q8_0"],
  ["tiny-deepseek4", "Q4_K"],
  ["tiny-gpt-oss", "Q8_0"],
  // Not its Q8_0: there the CPU's own scalar and SIMD sums already part by a top-1 miss of 0.57
  // nats (gpu-vs-cpu's floor), so missBound would allow 1.1; its Q4_K keeps the bound at 0.1.
  ["tiny-mimo2", "Q4_K"],
]) {
  test(`${preset} ${type}: hybrid runs with the CPU's experts paged from disk`, { skip }, async () => {
    const path = fixture(preset, type);
    const reference = await loadModel(path, { gpu: "auto", contextSize: CONTEXT });
    const slotBytes = reference.plan.arena.slotBytes;
    const experts = reference.info.experts;
    const expected = await runOf(reference);
    const vocab = reference.info.vocabSize;
    const long = Array.from({ length: 600 }, (_, i) => (i * 7919 + 13) % vocab);
    const widestMiss = await missBound(path, long, { contextSize: CONTEXT, dir });
    try {
      for (const [what, onGpu, paged] of [
        ["even experts on the GPU, odd ones paged", (e) => e % 2 === 0, experts / 2],
        ["every expert paged", () => false, experts],
      ]) {
        // Static residency: adaptive would move experts between the GPU and the CPU (a disk
        // tier keeps the plan's placement), and their dots round differently.
        const inRam = await loadModel(path, {
          gpu: "auto",
          contextSize: CONTEXT,
          plan: split(reference.plan, onGpu, "host"),
          residency: "static",
        });
        const fromRam = await runOf(inRam);
        inRam.dispose();
        const hybrid = await loadModel(path, {
          gpu: "auto",
          contextSize: CONTEXT,
          hostRam: paged * slotBytes,
          plan: split(reference.plan, onGpu, "disk"),
        });
        try {
          assert.equal(hybrid.plan.arena.slots, paged, `${what}: the arena is one layer's paged experts`);
          assert.equal(hybrid.plan.bytes.gpu.staging, 0, `${what}: no prompt staging with a disk tier`);
          const got = await runOf(hybrid);
          const offload = hybrid.stats().offload;
          const disk = hybrid.stats().disk;
          console.log(`${path} ${what}: offload ${JSON.stringify(offload)}\n  disk ${JSON.stringify(disk)}`);
          assert.equal(offload.streamedPasses, 0, `${what}: a disk tier never copies host experts to the GPU`);
          assert.equal(offload.streamedBytes, 0, `${what}: no bytes streamed`);
          assert.ok(disk.misses > 0 && disk.hits > 0, `${what}: the arena read and reused experts`);
          // Every routed call in one tier: the GPU's slots, RAM (the arena's hits) or disk (the arena's reads).
          const { residency, promptTokens, decodeTokens } = hybrid.stats();
          console.log(`  residency ${JSON.stringify(residency)}`);
          // Layers without routed experts (GLM's and DeepSeek's leading dense ones) route nothing.
          const moeLayers = hybrid.plan.layers.filter((l) => l.gpu.length + l.host.length + l.disk.length > 0).length;
          const routed = (promptTokens + decodeTokens) * hybrid.info.expertsUsed * moeLayers;
          assert.equal(
            residency.gpuCalls + residency.hostCalls + residency.diskCalls,
            routed,
            `${what}: calls by tier`,
          );
          assert.ok(residency.diskCalls > 0 && residency.hostCalls > 0, `${what}: disk calls and RAM hits`);
          assert.equal(
            residency.gpuCalls > 0,
            paged < hybrid.info.experts,
            `${what}: GPU calls only with experts on the GPU`,
          );
          assert.ok(sameBits(fromRam.steps, got.steps), `${what}: decode steps differ from the experts in RAM`);
          assert.ok(sameBits(fromRam.short, got.short), `${what}: a short prompt differs from the experts in RAM`);
          for (const [name, a, b] of [
            ["long prompt", expected.long, got.long],
            ["decode", expected.steps, got.steps],
            ["short prompt", expected.short, got.short],
          ]) {
            const m = compare(a, b, vocab);
            console.log(`  ${name} vs all-GPU: ${JSON.stringify(m)}`);
            assert.ok(m.top1 >= 0.9, `${what} ${name}: top-1 agreement ${m.top1}`);
            assert.ok(
              m.widestMiss <= widestMiss,
              `${what} ${name}: a top-1 miss ${m.widestMiss} nats below the best (bound ${widestMiss})`,
            );
            assert.ok(m.kl <= 1e-3, `${what} ${name}: mean KL ${m.kl}`);
          }
          assert.deepEqual(got.generated, expected.generated, `${what}: greedy tokens differ from the all-GPU run`);
        } finally {
          hybrid.dispose();
        }
      }
    } finally {
      reference.dispose();
    }
  });
}
