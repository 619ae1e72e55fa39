import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel } from "../src/index.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";

// Issue #4's memory criterion: 1,000 create / generate / dispose cycles leave the resident set
// flat (within 5 % of what it is after a warm-up of 1,500 such cycles), with the prompt-state cache storing, restoring
// and evicting states all along (a cache that kept them all would grow by some 20 MB here).
const dir = mkdtempSync(join(tmpdir(), "bloomery-memory-"));
const modelPath = join(dir, "tiny-qwen3moe.gguf");

// Garbage is collected before each reading, so that it shows what is kept rather than when V8 last ran.
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
      };
      // The warm-up lasts until V8 has grown its heap for this rate of allocation (some 1,500 cycles).
      for (let i = 0; i < 1500; i++) await cycle(i);
      const warm = residentBytes();
      for (let i = 1500; i < 2500; i++) await cycle(i);
      expect(residentBytes() / warm).toBeLessThan(1.05);
    } finally {
      model.dispose();
    }
  });
});
