import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { getLlama, LlamaLogLevel, type Llama } from "node-llama-cpp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel } from "../src/index.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";
import { idTokens, proseTokens } from "./oracle-inputs.js";
import { compare, contextFor, expectAgreement, llamaCppDistributions, ourDistributions } from "./oracle.js";

// The hybrid linear-attention Qwens (qwen35moe, qwen3next: Gated DeltaNet layers beside gated
// attention, a sigmoid-gated shared expert) on the CPU against llama.cpp, over prompts longer than
// llama.cpp's 64-token delta-net chunk: arbitrary ids, plain text and a long context. The bar is
// agreementBar only: F32 agrees to a KL of 2e-11 (llama.cpp's own batched vs one-by-one: 3e-11), not
// bit for bit. Q8_0 is not among the types yet: on tiny-qwen35moe's arbitrary ids it parts from
// llama.cpp by 2 top-1 misses in 160 (KL 1.2e-5) where llama.cpp's own two runs agree; the remaining
// float difference, amplified by the activations' rounding to 8 bits, is not found yet.
const POSITIONS = 160;
const LONG_POSITIONS = 700;
const THREADS = 1;
const CASES: [preset: string, weightType: string][] = ["tiny-qwen35moe", "tiny-qwen3next"].flatMap((preset) =>
  ["F32", "F16", "Q4_0", "Q4_K", "Q6_K"].map((type): [string, string] => [preset, type]),
);

const dir = mkdtempSync(join(tmpdir(), "bloomery-oracle-hybrid-"));
let llama: Llama;

beforeAll(async () => {
  llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
});

afterAll(async () => {
  await llama?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

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

async function check(label: string, path: string, tokens: number[], vocabSize: number) {
  const options = { threads: THREADS, contextSize: contextFor(tokens.length) };
  const ours = await ourDistributions(path, tokens, options);
  expect(ours.vocab).toBe(vocabSize);
  const reference = await llamaCppDistributions(llama, path, tokens, vocabSize, options);
  expectAgreement(label, reference, ours, false);
  // A recurrent state stepped token by token and over a whole prompt: the same arithmetic.
  const batchedVsOneByOne = compare(ours.oneByOne, ours.batched);
  expect(batchedVsOneByOne.top1).toBe(1);
  expect(batchedVsOneByOne.meanKl).toBeLessThanOrEqual(1e-6);
}

describe("hybrid linear-attention Qwens: CPU engine vs llama.cpp", () => {
  for (const [preset, weightType] of CASES) {
    const label = `${preset} ${weightType}`;
    it(`${label}: arbitrary ids and plain text`, async () => {
      const { path, vocabSize, bos, text } = await fixture(preset, weightType, POSITIONS);
      await check(`${label} ids`, path, idTokens(bos, vocabSize, POSITIONS), vocabSize);
      await check(`${label} text`, path, text, vocabSize);
    });
  }
  for (const preset of ["tiny-qwen35moe", "tiny-qwen3next"]) {
    it(`${preset} F16: a long context of plain text`, async () => {
      const { path, vocabSize, text } = await fixture(preset, "F16", LONG_POSITIONS);
      await check(`${preset} F16 long`, path, text, vocabSize);
    });
  }
});
