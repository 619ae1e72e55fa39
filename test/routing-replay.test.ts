// Routing replayed from a trace (benchmarks only: Model's REPLAY_ROUTING symbol, engine/routing_replay.h)
// on the CPU engine: the passes route exactly the trace's experts, one step a token in order across
// prompt and decode passes and wrapping at its end; the logits follow the replayed experts with uniform
// weights; the routers take over again after null; a bad trace is refused by name.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel, type Model } from "../src/index.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";
import { uniformChoices } from "../bench/routing-trace.mjs";

const REPLAY_ROUTING = Symbol.for("bloomery.bench.replayRouting");
type Replayable = Model & { [REPLAY_ROUTING](trace: { layers: Int32Array; ids: Int32Array } | null): void };

const dir = mkdtempSync(join(tmpdir(), "bloomery-replay-"));
const modelPath = join(dir, "tiny-qwen3moe.gguf");
beforeAll(async () => {
  await writeSyntheticModel(modelPath, { preset: "tiny-qwen3moe", weightType: "Q8_0" });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const tokensOf = (count: number, seed: number, vocab: number) =>
  Array.from({ length: count }, (_, i) => (i * 7919 + seed) % vocab);

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
