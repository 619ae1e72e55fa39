import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { getLlama, LlamaLogLevel, type Llama } from "node-llama-cpp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { writeSyntheticModel } from "../tools/synth/synth.js";
import { agreementBar, walkTokens } from "./distributions.mjs";
import { compare, llamaCppDistributions, ourDistributions } from "./oracle.js";

// The CPU engine against llama.cpp (node-llama-cpp's CPU build) on synthetic fixtures: the same
// tokens, fed one at a time to both, must give the same next-token distributions. The bar is
// top-1 agreement >= 99 % and mean KL(llama.cpp || ours) <= 1e-3, or, where llama.cpp's own
// batched and one-at-a-time evaluations of the same tokens part more, twice their misses and
// twice their KL (agreementBar, which the GPU tests share).
const POSITIONS = 128;
const THREADS = 2;

const TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"];
const MORE_TYPES = ["IQ4_NL", "IQ4_XS", "MXFP4"];
// GLM's and DeepSeek's blocks (latent attention, sigmoid routing with groups, shared experts) at
// types of each kernel family: float, 32-value blocks, K-quants, codebooks.
const FAMILY_TYPES = ["F32", "F16", "Q8_0", "Q4_0", "Q4_K", "Q6_K", "IQ4_XS"];
const CASES: [preset: string, weightType: string][] = [
  ...["tiny-qwen3moe", "tiny-qwen3", "tiny-qwen2", "tiny-llama"].flatMap((preset) =>
    [...TYPES, ...MORE_TYPES].map((type): [string, string] => [preset, type]),
  ),
  ...["tiny-glm4moe", "tiny-deepseek2"].flatMap((preset) =>
    FAMILY_TYPES.map((type): [string, string] => [preset, type]),
  ),
];

const dir = mkdtempSync(join(tmpdir(), "bloomery-oracle-"));
let llama: Llama;

beforeAll(async () => {
  llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
});

afterAll(async () => {
  await llama?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

describe("CPU engine vs llama.cpp", () => {
  for (const [preset, weightType] of CASES) {
    it(`${preset} ${weightType}`, async () => {
      const path = join(dir, `${preset}-${weightType}.gguf`);
      const plan = await writeSyntheticModel(path, { preset, weightType });
      const vocabSize = plan.vocab.tokens.length;
      const tokens = walkTokens(plan.vocab.bos, vocabSize, POSITIONS);

      const ours = await ourDistributions(path, tokens, THREADS);
      expect(ours.vocab).toBe(vocabSize);
      const reference = await llamaCppDistributions(llama, path, tokens, vocabSize, THREADS);

      const noise = compare(reference.oneByOne, reference.batched);
      const vsLlama = compare(reference.oneByOne, ours.oneByOne);
      const batchedVsOneByOne = compare(ours.oneByOne, ours.batched);
      const bar = agreementBar(noise.top1, noise.meanKl);
      console.log(
        `${preset} ${weightType}: top-1 ${(vsLlama.top1 * 100).toFixed(1)} %, KL ${vsLlama.meanKl.toExponential(2)}` +
          ` (bar ${(bar.top1 * 100).toFixed(1)} %, ${bar.kl.toExponential(2)}; llama.cpp batched vs one-by-one: top-1 ${(noise.top1 * 100).toFixed(1)} %,` +
          ` KL ${noise.meanKl.toExponential(2)};` +
          ` ours batched vs one-by-one ${batchedVsOneByOne.meanKl.toExponential(2)})`,
      );
      expect(vsLlama.top1).toBeGreaterThanOrEqual(bar.top1);
      expect(vsLlama.meanKl).toBeLessThanOrEqual(bar.kl);
      expect(batchedVsOneByOne.top1).toBe(1);
      expect(batchedVsOneByOne.meanKl).toBeLessThanOrEqual(1e-6);
    });
  }
});
