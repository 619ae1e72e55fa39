import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel, modelFootprint, planOffload, type Model } from "../src/index.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";

// Routing counts on the CPU engine: every routed call counts for the host tier, counts decay
// by the engine's factor each step and gain the step's calls, a trace replays to the same
// counts, and a profile seats the hottest experts in a plan.
const DECAY = 0.9946;
const dir = mkdtempSync(join(tmpdir(), "bloomery-residency-"));
const modelPath = join(dir, "tiny-qwen3moe.gguf");

beforeAll(async () => {
  await writeSyntheticModel(modelPath, { preset: "tiny-qwen3moe", weightType: "Q8_0" });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const tokensOf = (count: number, seed: number, vocab: number) =>
  Array.from({ length: count }, (_, i) => (i * 7919 + seed) % vocab);

const layerSums = (model: Model) => model.routingProfile().counts.map((row) => row.reduce((a, b) => a + b, 0));

describe("routing counts on the CPU engine", () => {
  it("count each step's routed calls for the host, decaying per step", async () => {
    const model = await loadModel(modelPath, { threads: 2, contextSize: 256 });
    try {
      const { layers, experts, expertsUsed, vocabSize } = model.info;
      expect(experts).toBeGreaterThan(expertsUsed);
      expect(
        model
          .routingProfile()
          .counts.flat()
          .every((c) => c === 0),
      ).toBe(true);
      const session = model.createSession();
      await session.evaluate(tokensOf(20, 3, vocabSize));
      let r = model.stats().residency;
      expect(r).toMatchObject({ steps: 1, gpuCalls: 0, diskCalls: 0, moves: 0, adaptive: false });
      expect(r.hostCalls).toBe(20 * layers * expertsUsed);
      expect(r.hostHitRate).toBe(1);
      expect(layerSums(model)).toEqual(Array(layers).fill(20 * expertsUsed));

      await session.evaluate([5]);
      r = model.stats().residency;
      expect(r.steps).toBe(2);
      expect(r.hostCalls).toBe(21 * layers * expertsUsed);
      for (const sum of layerSums(model)) expect(sum).toBeCloseTo(20 * expertsUsed * DECAY + expertsUsed, 9);
      session.dispose();
    } finally {
      model.dispose();
    }
  });

  it("trace each step's calls, which replay to the exported counts", async () => {
    const model = await loadModel(modelPath, { threads: 2, contextSize: 256 });
    try {
      const { layers, experts, expertsUsed, vocabSize } = model.info;
      const trace = model.traceRouting();
      const session = model.createSession();
      const { tokens } = await session.generate(tokensOf(12, 7, vocabSize), { maxTokens: 6, temperature: 0 }).result;
      const { steps } = trace.stop();
      expect(steps.length).toBe(model.stats().residency.steps);
      // The prompt's step, then one per generated token fed back (the last one is not evaluated).
      expect(steps.length).toBe(1 + tokens.length - 1);
      const replay = new Float64Array(layers * experts);
      steps.forEach((step, i) => {
        for (let l = 0; l < layers; ++l) {
          const rows = i === 0 ? 12 : 1;
          expect(step.subarray(l * experts, (l + 1) * experts).reduce((a, b) => a + b, 0)).toBe(rows * expertsUsed);
        }
        for (let j = 0; j < replay.length; ++j) replay[j] = replay[j]! * DECAY + step[j]!;
      });
      expect(model.routingProfile().counts.flat()).toEqual(Array.from(replay));
      expect(model.traceRouting().stop().steps).toEqual([]);
      session.dispose();
    } finally {
      model.dispose();
    }
  });

  it("are the same for the same request history, and a profile seats the hottest experts", async () => {
    const profiles = [];
    for (let run = 0; run < 2; ++run) {
      const model = await loadModel(modelPath, { threads: 2, contextSize: 256 });
      const session = model.createSession();
      await session.generate(tokensOf(30, 11, model.info.vocabSize), { maxTokens: 4, temperature: 0 }).result;
      profiles.push(model.routingProfile());
      model.dispose();
    }
    const [profile, again] = profiles;
    expect(again).toEqual(profile);
    const footprint = await modelFootprint(modelPath, { contextSize: 256 });
    const fixed = footprint.denseBytes + footprint.kvBytes + footprint.workspaceBytes + footprint.streamBytes;
    const perRound = footprint.expertBytes.reduce((a, b) => a + b, 0);
    const plan = planOffload(footprint, { gpu: fixed + 2 * perRound, hostRam: 1e12 }, { profile: profile! });
    plan.layers.forEach((layer, l) => {
      expect(layer.gpu.length).toBe(2);
      const counts = profile!.counts[l]!;
      const coldestGpu = Math.min(...layer.gpu.map((e) => counts[e]!));
      const hottestHost = Math.max(...layer.host.map((e) => counts[e]!));
      expect(coldestGpu).toBeGreaterThanOrEqual(hottestHost);
    });
  });

  it("refuses a residency that is neither adaptive nor static", async () => {
    await expect(loadModel(modelPath, { residency: "lru" as "static" })).rejects.toMatchObject({
      code: "INVALID_ARGUMENT",
    });
  });
});
