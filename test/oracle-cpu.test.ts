import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { getLlama, LlamaLogLevel, type Llama } from "node-llama-cpp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel } from "../src/index.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";
import { idTokens, proseTokens } from "./oracle-inputs.js";
import {
  compare,
  contextFor,
  expectAgreement,
  llamaCppDistributions,
  llamaCppTier,
  ourDistributions,
  sameArithmetic,
} from "./oracle.js";

// The CPU engine against llama.cpp (node-llama-cpp's CPU build) on synthetic fixtures of every
// architecture and weight type: the same tokens, fed one at a time to llama.cpp and both one at
// a time and in one batch to us, must give the same next-token distributions (test/oracle.ts:
// agreementBar everywhere, the same distributions where llama.cpp's arithmetic is ours). Three
// kinds of input: arbitrary token ids and plain text on every case, and a long context on each
// architecture, on a float and a quantized type.
const POSITIONS = 128;
const LONG_POSITIONS = 1_300;
const THREADS = 1; // tiny models: more threads only spin (and CI has two cores)

const TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"];
const MORE_TYPES = ["IQ4_NL", "IQ4_XS", "MXFP4"];
const PRESETS = ["tiny-qwen3moe", "tiny-qwen3", "tiny-qwen2", "tiny-llama"];
// GLM's and DeepSeek's blocks (latent attention, sigmoid routing with groups, shared experts) at
// types of each kernel family: float, 32-value blocks, K-quants, codebooks.
const FAMILY_PRESETS = ["tiny-glm4moe", "tiny-deepseek2"];
const FAMILY_TYPES = ["F32", "F16", "Q8_0", "Q4_0", "Q4_K", "Q6_K", "IQ4_XS"];
const CASES: [preset: string, weightType: string][] = [
  ...PRESETS.flatMap((preset) => [...TYPES, ...MORE_TYPES].map((type): [string, string] => [preset, type])),
  ...FAMILY_PRESETS.flatMap((preset) => FAMILY_TYPES.map((type): [string, string] => [preset, type])),
];
const LONG_CASES: [preset: string, weightType: string][] = [...PRESETS, ...FAMILY_PRESETS].flatMap((preset) =>
  ["F16", "Q8_0"].map((type): [string, string] => [preset, type]),
);

const dir = mkdtempSync(join(tmpdir(), "bloomery-oracle-"));
let llama: Llama;
let exactHere: boolean;

beforeAll(async () => {
  llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
  exactHere = sameArithmetic(llama);
  console.log(`llama.cpp's CPU variant: ${llamaCppTier(llama)}; exact checks ${exactHere ? "on" : "off"}`);
});

afterAll(async () => {
  await llama?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

/** The fixture's file, its vocabulary size and BOS, and the first `textTokens` tokens of the prose in its vocabulary. */
async function fixture(preset: string, weightType: string, textTokens: number) {
  const path = join(dir, `${preset}-${weightType}.gguf`);
  const plan = await writeSyntheticModel(path, { preset, weightType });
  const model = await loadModel(path, { gpu: false, threads: THREADS, contextSize: 256 });
  try {
    const text = proseTokens((prose) => model.tokenize(prose), textTokens);
    return { path, vocabSize: plan.vocab.tokens.length, bos: plan.vocab.bos, text };
  } finally {
    model.dispose();
  }
}

async function check(label: string, path: string, tokens: number[], vocabSize: number, exact: boolean) {
  const options = { threads: THREADS, contextSize: contextFor(tokens.length) };
  const ours = await ourDistributions(path, tokens, options);
  expect(ours.vocab).toBe(vocabSize);
  const reference = await llamaCppDistributions(llama, path, tokens, vocabSize, options);
  expectAgreement(label, reference, ours, exact);
  const batchedVsOneByOne = compare(ours.oneByOne, ours.batched);
  expect(batchedVsOneByOne.top1).toBe(1);
  expect(batchedVsOneByOne.meanKl).toBeLessThanOrEqual(1e-6);
}

describe("CPU engine vs llama.cpp", () => {
  for (const [preset, weightType] of CASES) {
    it(`${preset} ${weightType}: arbitrary ids and plain text`, async () => {
      const { path, vocabSize, bos, text } = await fixture(preset, weightType, POSITIONS);
      await check(`${preset} ${weightType} ids`, path, idTokens(bos, vocabSize, POSITIONS), vocabSize, exactHere);
      await check(`${preset} ${weightType} text`, path, text, vocabSize, exactHere);
    });
  }

  for (const [preset, weightType] of LONG_CASES) {
    it(`${preset} ${weightType}: a long context of plain text`, async () => {
      const { path, vocabSize, text } = await fixture(preset, weightType, LONG_POSITIONS);
      await check(`${preset} ${weightType} long`, path, text, vocabSize, exactHere);
    });
  }
});
