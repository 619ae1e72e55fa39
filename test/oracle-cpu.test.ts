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
// gpt-oss's (sliding windows of 32 positions, sinks, biased clamped-SwiGLU experts): the same
// types, MXFP4, and the released files' mix (MXFP4 experts); the long context runs 40 windows.
// MiniMax-M2's (Q/K norms over whole projections) and MiMo-V2's (windows of 32 with a rope base
// of their own, KV heads per layer, narrower values, scaled output, sinks on windowed layers).
const FAMILY_PRESETS = ["tiny-glm4moe", "tiny-deepseek2", "tiny-gpt-oss", "tiny-minimax-m2", "tiny-mimo2"];
const FAMILY_TYPES = ["F32", "F16", "Q8_0", "Q4_0", "Q4_K", "Q6_K", "IQ4_XS"];
// The 1- to 3-bit types on the MoE preset (routed experts, dense attention, the embedding table and
// the output matrix all of the type).
const LOW_BIT_TYPES = ["IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "TQ1_0", "TQ2_0"];
// DeepSeek sparse attention (deepseek32: an indexer on every layer, neox; glm-dsa: indexers on
// some layers, the others attending their choice, normal rope): every context here is longer than
// the indexer's top-k (16, 24), so each later query attends a chosen subset of its positions.
const SPARSE_PRESETS = ["tiny-deepseek32", "tiny-glm-dsa"];
const SPARSE_TYPES = ["F16", "Q8_0", "Q4_K"];
const CASES: [preset: string, weightType: string | undefined][] = [
  ...PRESETS.flatMap((preset) => [...TYPES, ...MORE_TYPES].map((type): [string, string] => [preset, type])),
  ...FAMILY_PRESETS.flatMap((preset) => FAMILY_TYPES.map((type): [string, string] => [preset, type])),
  ...SPARSE_PRESETS.flatMap((preset) => SPARSE_TYPES.map((type): [string, string] => [preset, type])),
  ...LOW_BIT_TYPES.map((type): [string, string] => ["tiny-qwen3moe", type]),
  ["tiny-gpt-oss", "MXFP4"],
  ["tiny-gpt-oss-mxfp4", undefined],
];
// Fixed mixes: UD-style low-bit routed experts with K-quant attention and shared experts.
const MIX_PRESETS = ["tiny-glm4moe-ud"];
const LONG_CASES: [preset: string, weightType: string | undefined][] = [
  ...[...PRESETS, ...FAMILY_PRESETS, ...SPARSE_PRESETS].flatMap((preset) =>
    ["F16", "Q8_0"].map((type): [string, string | undefined] => [preset, type]),
  ),
  ["tiny-gpt-oss-mxfp4", undefined],
];

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
async function fixture(preset: string, weightType: string | undefined, textTokens: number) {
  const path = join(dir, `${preset}-${weightType ?? "mix"}.gguf`);
  const plan = await writeSyntheticModel(path, weightType === undefined ? { preset } : { preset, weightType });
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
    const label = `${preset} ${weightType ?? "mix"}`;
    it(`${label}: arbitrary ids and plain text`, async () => {
      const { path, vocabSize, bos, text } = await fixture(preset, weightType, POSITIONS);
      await check(`${label} ids`, path, idTokens(bos, vocabSize, POSITIONS), vocabSize, exactHere);
      await check(`${label} text`, path, text, vocabSize, exactHere);
    });
  }

  for (const preset of MIX_PRESETS) {
    it(`${preset}: arbitrary ids and plain text`, async () => {
      const { path, vocabSize, bos, text } = await fixture(preset, undefined, POSITIONS);
      await check(`${preset} ids`, path, idTokens(bos, vocabSize, POSITIONS), vocabSize, exactHere);
      await check(`${preset} text`, path, text, vocabSize, exactHere);
    });
  }

  for (const [preset, weightType] of LONG_CASES) {
    const label = `${preset} ${weightType ?? "mix"}`;
    it(`${label}: a long context of plain text`, async () => {
      const { path, vocabSize, text } = await fixture(preset, weightType, LONG_POSITIONS);
      await check(`${label} long`, path, text, vocabSize, exactHere);
    });
  }
});
