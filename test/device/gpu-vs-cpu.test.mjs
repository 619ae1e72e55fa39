// GPU machine: the whole model on the GPU gives the CPU path's distributions and its greedy
// tokens (up to a tie, or a gap the floor below flips), for each tiny fixture and weight type
// (every type with CPU kernels, routed experts included, and tiny-qwen3moe-mix's nine types in
// one pass), over 1,000 tokens, as one
// prompt (for Q4_K, Q6_K and Q8_0 fifteen tiles of 64 rows and a partial one in the tiled products,
// cuda/mmq.cu; for the other types the batched matvec) and as decode steps.
//
// The bar is issue 9's: top-1 agreement >= 99 % (ties counted as the CPU oracle counts them) and
// mean KL <= 1e-3, or, on a fixture where two correct evaluations already part more, twice their
// floor, as the issue's KL rule takes twice llama.cpp's: here the widest of the CPU path's pairs of
// orders of the same sums (its scalar, AVX2 and AVX-512 kernels, as many as the host runs; helpers'
// cpuFloor) on the same file and tokens, measured in the same run. The GPU's logits equal the
// CPU's to ~1e-7 until one activation rounds to the next int8 code on one side only; from there
// the two carry different rounding noise, and on fixtures whose weights are as wide as Q8_0's
// (their near-flat distributions) that flips 0.5-4 % of top-1s between any two orders of the sums,
// the CPU's own pairs included.
// Skips where no NVIDIA device exists.
import { test } from "node:test";
import assert from "node:assert/strict";
import { assertWithinBar, compare, cpuFloor, decodeAll, fixtures, sameGreedy, skip } from "./helpers.mjs";
import { agreementBar, walkTokens } from "../distributions.mjs";
import { loadModel } from "../../dist/index.js";

const { dir, fixture } = fixtures("gpu");
const POSITIONS = 1000;
const CONTEXT = 1024;

const TYPES = [
  "F32",
  "F16",
  "BF16",
  "Q4_0",
  "Q4_1",
  "Q5_0",
  "Q5_1",
  "Q8_0",
  "Q2_K",
  "Q3_K",
  "Q4_K",
  "Q5_K",
  "Q6_K",
  "IQ4_NL",
  "IQ4_XS",
  "MXFP4",
];

// Each fixture: a preset with one weight type, or tiny-qwen3moe-mix (no type: nine types in one
// pass, layer 1's gate and up experts of different types, which the fused expert kernel cannot
// take: the CPU runs that layer's experts).
const CASES = ["tiny-qwen3moe", "tiny-qwen3", "tiny-llama"].flatMap((preset) => TYPES.map((type) => [preset, type]));
CASES.push(["tiny-qwen3moe-mix", undefined]);
// The 1- to 3-bit types on the MoE fixture (experts, attention, embedding and output of the type),
// and tiny-glm4moe-ud's UD-IQ1_S-like mix (low-bit experts, K-quants elsewhere, a shared expert).
for (const type of ["IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "TQ1_0", "TQ2_0"]) {
  CASES.push(["tiny-qwen3moe", type]);
}
CASES.push(["tiny-glm4moe-ud", undefined]);
// GLM's and DeepSeek's blocks (partial rotary and biases, latent attention, sigmoid routing with
// groups, shared experts, leading dense layers) at a float type, the three tiled types and three
// of the 32-value ones (MLA's per-head matrices fall back to those where K-quants do not fit).
for (const preset of ["tiny-glm4moe", "tiny-deepseek2"]) {
  for (const type of ["F16", "Q8_0", "Q4_K", "Q6_K", "Q5_0", "IQ4_XS", "MXFP4"]) CASES.push([preset, type]);
}
// gpt-oss's blocks (windows of 32 on every other layer, so 1,000 positions slide them far; sinks;
// Q/K/V and output biases; YaRN; biased experts with the clamped SwiGLU; a softmax over the chosen
// experts after the router's bias), at a float type, the tiled types and MXFP4, and as the real
// files mix them (MXFP4 experts, BF16 attention, Q8_0 embeddings and output).
for (const type of ["F16", "Q8_0", "Q4_K", "Q6_K", "MXFP4"]) CASES.push(["tiny-gpt-oss", type]);
CASES.push(["tiny-gpt-oss-mxfp4", undefined]);
// MiniMax-M2's Q/K norms over whole projections, partial rotary, sigmoid routing with a selection bias.
for (const type of ["F16", "Q8_0", "Q4_K"]) CASES.push(["tiny-minimax-m2", type]);
// The hybrid Qwens' Gated DeltaNet layers (a convolution and a recurrent state per value head;
// Qwen3-Next's value heads repeat their key heads, Qwen3.5's tile them, and its projections come
// fused) beside gated attention with the interleaved multi-axis rope (Qwen3.5) and a gated shared expert.
for (const preset of ["tiny-qwen35moe", "tiny-qwen3next"]) {
  for (const type of ["F16", "Q8_0", "Q4_K"]) CASES.push([preset, type]);
}
// DeepSeek sparse attention: each layer's lightning indexer (or GLM-5's shared layers, the last
// one's) picks the 16 or 24 of the 1,000 positions its latent attention reads.
for (const preset of ["tiny-deepseek32", "tiny-glm-dsa"]) {
  for (const type of ["F16", "Q8_0", "Q4_K"]) CASES.push([preset, type]);
}
// DeepSeek-V4's blocks: hyper-connections (4 residual streams), compressed attention (a window of
// 32 raw rows beside rows of 4 positions, chosen by an indexer, or of 128), output groups, the
// square root of softplus with hash routing in its first layer, and the limited SwiGLU.
for (const type of ["F16", "Q8_0", "Q4_K"]) CASES.push(["tiny-deepseek4", type]);
// Their real attention heads are 256 wide (the tiled attention's value columns in two blocks).
CASES.push(["tiny-qwen35moe-256", "F16"]);
// MiMo-V2's: KV heads per layer (1 on full layers, 2 on windowed ones, in cache rows sized for 2),
// value heads half the keys' width, the output scaled, windows with sinks rotating on a base of their own.
for (const type of ["F16", "Q8_0", "Q4_K"]) CASES.push(["tiny-mimo2", type]);

for (const [preset, type] of CASES) {
  const name = type ? `${preset} ${type}` : preset;
  test(`${name}: GPU logits match the CPU's`, { skip }, async () => {
    const path = fixture(preset, type);
    const cpu = await loadModel(path, { gpu: false, contextSize: CONTEXT });
    const gpu = await loadModel(path, { gpu: "auto", contextSize: CONTEXT });
    try {
      assert.equal(gpu.info.gpu, true);
      for (const [l, layer] of gpu.plan.layers.entries()) {
        if (preset !== "tiny-qwen3moe-mix" || l !== 1) {
          // Every weight type's experts run on the GPU (a kernel gap would keep them off it).
          assert.equal(layer.host.length, 0, JSON.stringify(layer));
        } else {
          assert.equal(layer.gpu.length, 0, JSON.stringify(layer));
          assert.match(layer.reason, /ffn_up_exps\.weight \(IQ4_XS\) differ in type.*off the GPU/);
        }
      }
      const vocab = cpu.info.vocabSize;
      const input = walkTokens(cpu.info.bosToken, vocab, POSITIONS);
      const reference = await cpu.createSession().evaluate(input, { logits: "all" });
      const floor = cpuFloor(path, input, reference, vocab, { contextSize: CONTEXT, dir });
      const bar = agreementBar(floor.top1, floor.kl);
      const gpuPrompt = await gpu.createSession().evaluate(input, { logits: "all" });
      const gpuDecode = await decodeAll(gpu, input);
      const prompt = compare(reference, gpuPrompt, vocab);
      const decode = compare(reference, gpuDecode, vocab);
      // The GPU's own batched vs one-by-one: two orders of the same sums, as the floor.
      const own = compare(gpuDecode, gpuPrompt, vocab);
      console.log(
        `${name}: prompt ${JSON.stringify(prompt)}, decode ${JSON.stringify(decode)}; CPU scalar vs SIMD ` +
          `${JSON.stringify(floor)}, bar ${JSON.stringify(bar)}; GPU batched vs one-by-one ${JSON.stringify(own)}`,
      );
      assertWithinBar({ prompt, decode }, bar);
      const greedy = await sameGreedy(cpu, gpu, input.slice(0, 8), 24, floor.widestMiss);
      console.log(`${name}: greedy ${greedy.tieAt < 0 ? "equal" : `equal up to a tie at step ${greedy.tieAt}`}`);
      // Only tiny-qwen3moe-mix keeps experts (layer 1's) off the GPU; the other mixes run whole there.
      if (preset === "tiny-qwen3moe-mix") assert.ok(gpu.stats().offload.passes > 0, "the CPU ran layer 1's experts");
    } finally {
      cpu.dispose();
      gpu.dispose();
    }
  });
}

test("a GPU budget too small is refused by name", { skip }, async () => {
  const path = fixture("tiny-qwen3moe", "Q4_K");
  await assert.rejects(loadModel(path, { gpu: { budget: "1MiB" } }), (error) => {
    assert.equal(error.code, "INSUFFICIENT_MEMORY");
    assert.match(error.message, /weights .* KV cache .* workspace .* budget/);
    return true;
  });
});

test("a missing GPU device is refused by name", { skip }, async () => {
  const path = fixture("tiny-qwen3moe", "Q4_K");
  await assert.rejects(loadModel(path, { gpu: { device: 99 } }), { code: "GPU_UNAVAILABLE" });
});
