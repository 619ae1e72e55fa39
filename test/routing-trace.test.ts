// Routing traces (bench/routing-trace.mjs): the choices of one-token steps, the file round trip,
// and the statistics the residency benchmarks compare routings by, on routings whose figures are
// known: uniform, one fixed set of experts, and the default model's own (recorded here).
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { loadModel } from "../src/index.js";
import {
  choicesOf,
  readTrace,
  replayTrace,
  routingStatistics,
  uniformChoices,
  writeTrace,
} from "../bench/routing-trace.mjs";
const DEFAULT_MODEL = "models/bloomery-tiny-moe-Q8_0.gguf";

const model = { layers: 3, experts: 64, expertsUsed: 4, moeLayers: [1, 2] };

describe("routing traces", () => {
  it("reads one token's choices per step and refuses a step of several tokens", () => {
    const step = new Uint32Array(3 * 64);
    for (const e of [3, 9, 10, 63]) step[64 + e] = 1;
    for (const e of [0, 1, 2, 5]) step[128 + e] = 1;
    const { moeLayers, choices } = choicesOf({ layers: 3, experts: 64, steps: [step] }, 4);
    expect(moeLayers).toEqual([1, 2]);
    expect([...choices]).toEqual([3, 9, 10, 63, 0, 1, 2, 5]);
    const two = step.slice();
    two[64 + 3] = 2;
    expect(() => choicesOf({ layers: 3, experts: 64, steps: [two] }, 4)).toThrow(/not one token/);
    const short = step.slice();
    short[64 + 3] = 0;
    expect(() => choicesOf({ layers: 3, experts: 64, steps: [short] }, 4)).toThrow(/3 experts, not 4/);
  });

  it("round-trips a trace file", () => {
    const choices = uniformChoices(model, 50, 7);
    const path = join(mkdtempSync(join(tmpdir(), "bloomery-trace-")), "t.json.gz");
    const file = {
      format: "bloomery-routing-trace/1",
      model,
      segments: [{ kind: "prompt" as const, steps: 50 }],
      steps: 50,
      choices,
    };
    writeTrace(path, file);
    const back = readTrace(path);
    expect([...back.choices]).toEqual([...choices]);
    expect(back.model).toEqual(model);
  });

  it("scores uniform routing near a quarter and full entropy, a fixed set as fully concentrated", () => {
    const uniform = routingStatistics({ model, steps: 4000, choices: uniformChoices(model, 4000, 3) });
    expect(uniform.topQuarterShare.mean).toBeGreaterThan(0.25);
    expect(uniform.topQuarterShare.mean).toBeLessThan(0.28);
    expect(uniform.entropy.mean).toBeGreaterThan(0.99);
    // Each expert is called in 1 of 16 steps: the median gap is about 11 steps (geometric).
    expect(uniform.reuse.nextStep).toBeCloseTo(4 / 64, 1);
    const fixed = new Uint8Array(4000 * 2 * 4).map((_, i) => [5, 6, 7, 8][i % 4]!);
    const stuck = routingStatistics({ model, steps: 4000, choices: fixed });
    expect(stuck.topQuarterShare.mean).toBe(1);
    expect(stuck.entropy.mean).toBeCloseTo(Math.log(4) / Math.log(64), 10);
    expect(stuck.reuse.median).toBe(1);
    expect(stuck.reuse.firstCalls).toBeCloseTo(4 / (4000 * 4), 10);
  });

  it("records the default model's routing one token a step", async () => {
    const m = await loadModel(DEFAULT_MODEL, { gpu: false, contextSize: 256 });
    try {
      const trace = m.traceRouting();
      const session = m.createSession();
      for (const t of m.tokenize("A dog is a domesticated animal.")) await session.evaluate([t]);
      const recorded = trace.stop();
      const { moeLayers, choices } = choicesOf(recorded, m.info.expertsUsed);
      expect(moeLayers.length).toBe(m.info.layers);
      expect(choices.length).toBe(recorded.steps.length * m.info.layers * m.info.expertsUsed);
      const stats = routingStatistics({
        model: { layers: m.info.layers, experts: m.info.experts, expertsUsed: m.info.expertsUsed, moeLayers },
        steps: recorded.steps.length,
        choices,
      });
      expect(stats.perLayer).toHaveLength(m.info.layers);
      // The trace replays on its own model, and is refused by one of another expert count.
      const file = {
        format: "bloomery-routing-trace/1",
        model: { layers: m.info.layers, experts: m.info.experts, expertsUsed: m.info.expertsUsed, moeLayers },
        segments: [{ kind: "prompt" as const, steps: recorded.steps.length }],
        steps: recorded.steps.length,
        choices,
      };
      replayTrace(m, file);
      const replayed = m.traceRouting();
      await session.evaluate([1]);
      expect([...replayed.stop().steps[0]!]).toEqual([...recorded.steps[0]!]);
      expect(() => replayTrace(m, { ...file, model: { ...file.model, experts: m.info.experts * 2 } })).toThrow(
        /routes \d+ of \d+ experts/,
      );
    } finally {
      m.dispose();
    }
  });

  it("keeps bench/traces' files true to their statistics, and the donor between uniform and degenerate", () => {
    const files = readdirSync("bench/traces").filter((f) => f.endsWith(".json.gz"));
    const readme = readFileSync("bench/traces/README.md", "utf8");
    const stats = new Map<string, ReturnType<typeof routingStatistics>>();
    for (const name of files) {
      const file = readTrace(join("bench/traces", name));
      expect(file.segments.reduce((n, s) => n + s.steps, 0)).toBe(file.steps);
      const computed = routingStatistics(file);
      const saved = file.statistics!;
      expect(saved.topQuarterShare.mean).toBeCloseTo(computed.topQuarterShare.mean, 12);
      expect(saved.entropy.mean).toBeCloseTo(computed.entropy.mean, 12);
      expect(saved.reuse.nextStep).toBeCloseTo(computed.reuse.nextStep, 12);
      expect(readme).toContain(`\`${name}\``);
      expect(readme).toContain(computed.topQuarterShare.mean.toFixed(3));
      stats.set(name, computed);
    }
    // Issue 28: the trained donor's routing spreads more than the random-weight file's and less than uniform.
    const donor = stats.get("routing-donor-48x128-routing.json.gz")!;
    const synthetic = stats.get("qwen3-30b-a3b-synthetic-routing.json.gz")!;
    const donorFile = readTrace("bench/traces/routing-donor-48x128-routing.json.gz");
    const uniform = routingStatistics({ ...donorFile, choices: uniformChoices(donorFile.model, donorFile.steps, 5) });
    expect(donor.topQuarterShare.mean).toBeGreaterThan(uniform.topQuarterShare.mean + 0.1);
    expect(donor.topQuarterShare.mean).toBeLessThan(synthetic.topQuarterShare.mean - 0.1);
    expect(donor.entropy.mean).toBeLessThan(uniform.entropy.mean);
    expect(donor.entropy.mean).toBeGreaterThan(synthetic.entropy.mean);
  });
});
