import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel } from "../src/index.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";

// Issue #4's memory criterion: 1,000 create / generate / dispose cycles leave the resident set
// flat (within 5 % of what it is after a warm-up of 3,000 such cycles), with the prompt-state cache storing, restoring
// and evicting states all along (a cache that kept them all would grow by some 20 MB here).
const dir = mkdtempSync(join(tmpdir(), "bloomery-memory-"));
const modelPath = join(dir, "tiny-qwen3moe.gguf");

// Garbage is collected every hundred cycles and before each reading, so that the resident set
// shows what is kept rather than how far V8 let its heap grow before it last collected.
setFlagsFromString("--expose-gc");
const collectGarbage = runInNewContext("gc") as () => void;

beforeAll(async () => {
  await writeSyntheticModel(modelPath, { preset: "tiny-qwen3moe", weightType: "Q8_0" });
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

function residentBytes(): number {
  collectGarbage();
  return process.memoryUsage().rss;
}

describe("memory", () => {
  it("stays flat over 1,000 create/generate/dispose cycles", { timeout: 300_000 }, async () => {
    // Room for about fifteen of the cycles' states: the cache fills during the warm-up, then evicts.
    const model = await loadModel(modelPath, { threads: 2, contextSize: 64, cacheRam: "300KiB" });
    try {
      const cycle = async (i: number) => {
        // Every prompt is new, and shares its first eight tokens with the others.
        const prompt = [1, 2, 3, 4, 5, 6, 7, 8, 10 + (i % 370), 10 + Math.floor(i / 370)];
        const session = model.createSession();
        const run = await session.generate(prompt, { maxTokens: 4 }).result;
        expect(run.timings.promptTokens + run.timings.cachedPromptTokens).toBe(prompt.length);
        session.dispose();
        if (i % 100 === 0) collectGarbage();
      };
      // The warm-up lasts until V8 has sized its heap for this rate of allocation and malloc's
      // free lists have settled: the resident set still grows by 2-6 MB between cycles 2,000 and
      // 3,000 (CI failed once at 5.6 %), then stays within 5 MB, falling as often as rising, to
      // 10,000 (measured on 2026-12-04: 120.4, 122.8, 122.8, 122.8, 122.8, 119.9, 118.0 MiB ...).
      for (let i = 0; i < 3000; i++) await cycle(i);
      const warm = residentBytes();
      for (let i = 3000; i < 4000; i++) await cycle(i);
      const end = residentBytes();
      console.log(
        `RSS after the warm-up ${(warm / 2 ** 20).toFixed(1)} MiB, 1,000 cycles later ${(end / 2 ** 20).toFixed(1)} MiB`,
      );
      expect(end / warm).toBeLessThan(1.05);
    } finally {
      model.dispose();
    }
  });
});
