import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel, modelFootprint, planOffload, type Model } from "../src/index.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";
import { uniformChoices } from "../bench/routing-trace.mjs";

// Routing counts on the CPU engine: every routed call counts for the host tier, counts decay
// by the engine's factor each step and gain the step's calls, a trace replays to the same
// counts, and a profile seats the hottest experts in a plan.
const DECAY = 0.9786;
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

// Routing replayed from a trace (benchmarks only: Model's REPLAY_ROUTING symbol, engine/routing_replay.h)
// on the CPU engine: the passes route exactly the trace's experts, one step a token in order across
// prompt and decode passes and wrapping at its end; the logits follow the replayed experts with uniform
// weights; the routers take over again after null; a bad trace is refused by name.
const REPLAY_ROUTING = Symbol.for("bloomery.bench.replayRouting");
type Replayable = Model & { [REPLAY_ROUTING](trace: { layers: Int32Array; ids: Int32Array } | null): void };

/** Per step, the calls of `ids` steps first..first+rows (wrapping) per (layer, expert), as traceRouting counts them. */
function expectedCounts(ids: Int32Array, steps: number, layers: number, experts: number, used: number) {
  return (first: number, rows: number) => {
    const counts = new Uint32Array(layers * experts);
    for (let r = 0; r < rows; ++r) {
      const step = (first + r) % steps;
      for (let l = 0; l < layers; ++l) {
        for (let k = 0; k < used; ++k) counts[l * experts + ids[(step * layers + l) * used + k]!]!++;
      }
    }
    return counts;
  };
}

describe("routing replayed from a trace (benchmarks)", () => {
  it("routes the trace's experts token by token across prompt and decode passes, wrapping", async () => {
    const model = (await loadModel(modelPath, { threads: 2, contextSize: 256 })) as Replayable;
    try {
      const { layers, experts, expertsUsed, vocabSize } = model.info;
      const steps = 23;
      const moeLayers = Array.from({ length: layers }, (_, l) => l);
      const ids = Int32Array.from(uniformChoices({ layers, experts, expertsUsed, moeLayers }, steps, 11));
      const expected = expectedCounts(ids, steps, layers, experts, expertsUsed);
      model[REPLAY_ROUTING]({ layers: Int32Array.from(moeLayers), ids });
      const trace = model.traceRouting();
      const session = model.createSession();
      await session.evaluate(tokensOf(20, 3, vocabSize)); // steps 0-19
      for (const t of tokensOf(6, 5, vocabSize)) await session.evaluate([t]); // steps 20, 21, 22, 0, 1, 2
      const recorded = trace.stop().steps;
      expect(recorded).toHaveLength(7);
      expect([...recorded[0]!]).toEqual([...expected(0, 20)]);
      [20, 21, 22, 0, 1, 2].forEach((first, i) => expect([...recorded[i + 1]!]).toEqual([...expected(first, 1)]));
      session.dispose();
    } finally {
      model.dispose();
    }
  });

  it("changes the logits as the replayed experts do, and gives the routers back after null", async () => {
    const model = (await loadModel(modelPath, { threads: 2, contextSize: 256 })) as Replayable;
    try {
      const { layers, experts, expertsUsed, vocabSize } = model.info;
      const prompt = tokensOf(12, 9, vocabSize);
      const logitsOf = async () => {
        const session = model.createSession();
        const logits = await session.evaluate(prompt, { logits: "all" });
        session.dispose();
        return logits;
      };
      const own = await logitsOf();
      // The routers' own choices for this prompt, replayed, give the same experts; only the
      // weights differ (uniform), so the logits move but stay those of the same experts.
      const trace = model.traceRouting();
      const session = model.createSession();
      for (const t of prompt) await session.evaluate([t]);
      session.dispose();
      const steps = trace.stop().steps;
      const moeLayers = Array.from({ length: layers }, (_, l) => l);
      const ids = new Int32Array(steps.length * layers * expertsUsed);
      steps.forEach((step, t) => {
        for (let l = 0; l < layers; ++l) {
          let k = 0;
          for (let e = 0; e < experts; ++e) if (step[l * experts + e]) ids[(t * layers + l) * expertsUsed + k++] = e;
        }
      });
      model[REPLAY_ROUTING]({ layers: Int32Array.from(moeLayers), ids });
      const sameExperts = await logitsOf();
      // Other experts (each step's shifted by one): other logits.
      model[REPLAY_ROUTING]({ layers: Int32Array.from(moeLayers), ids: ids.map((e) => (e + 1) % experts) });
      const otherExperts = await logitsOf();
      model[REPLAY_ROUTING](null);
      const back = await logitsOf();
      expect([...back]).toEqual([...own]);
      const gap = (a: Float32Array, b: Float32Array) => Math.max(...a.map((x, i) => Math.abs(x - b[i]!)));
      expect(gap(sameExperts, own)).toBeGreaterThan(0);
      expect(gap(otherExperts, own)).toBeGreaterThan(gap(sameExperts, own));
    } finally {
      model.dispose();
    }
  });

  it("refuses a trace that does not fit the model by name", async () => {
    const model = (await loadModel(modelPath, { threads: 2, contextSize: 256 })) as Replayable;
    try {
      const { layers, experts, expertsUsed } = model.info;
      const layersOf = Int32Array.from({ length: layers }, (_, l) => l);
      const good = new Int32Array(layers * expertsUsed).map((_, i) => i % expertsUsed);
      const refuse = (trace: { layers: Int32Array; ids: Int32Array }, message: RegExp) =>
        expect(() => model[REPLAY_ROUTING](trace)).toThrow(
          expect.objectContaining({ code: "INVALID_ARGUMENT", message: expect.stringMatching(message) }),
        );
      refuse({ layers: Int32Array.from([layers]), ids: good.subarray(0, expertsUsed) }, /not one of the model's MoE/);
      refuse({ layers: layersOf, ids: good.subarray(1) }, /not a whole number of steps/);
      refuse({ layers: layersOf, ids: good.map((e) => (e === 0 ? experts : e)) }, new RegExp(`expert ${experts} of`));
      refuse({ layers: layersOf, ids: good.map(() => 2) }, /twice in a step/);
      model[REPLAY_ROUTING]({ layers: layersOf, ids: good });
    } finally {
      model.dispose();
    }
  });
});
