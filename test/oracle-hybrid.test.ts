import { describeOracle, type OracleCase } from "./oracle.js";

// The hybrid linear-attention Qwens (qwen35moe, qwen3next: Gated DeltaNet layers beside gated
// attention, a sigmoid-gated shared expert) on the CPU against llama.cpp, over prompts longer than
// llama.cpp's 64-token delta-net chunk: arbitrary ids, plain text and a long context; the same
// distributions where llama.cpp's arithmetic is ours, as for the other architectures (the
// convolution's SiLU is ggml's SIMD one: with libm's exp, F32 parted by a KL of 2e-11 and Q8_0,
// whose activations round to 8 bits, by 2 top-1 misses in 160). On an AVX2 host the convolution's
// products round as llama.cpp's AVX2 build rounds them, none fused (cpu/causal_conv_avx2.cc): with
// them fused, as its AVX-512 builds have them, the distributions parted there by a KL of 3e-11 on
// F32 to 1e-4 on Q8_0.
const PRESETS = ["tiny-qwen35moe", "tiny-qwen3next"];

describeOracle("hybrid linear-attention Qwens: CPU engine vs llama.cpp", {
  positions: 160,
  longPositions: 700,
  cases: [
    ...PRESETS.flatMap((preset) =>
      ["F32", "F16", "Q8_0", "Q4_0", "Q4_K", "Q6_K"].map((type): OracleCase => [preset, type]),
    ),
    // Attention heads of 256, as the real Qwen3.5/3.6 files have.
    ["tiny-qwen35moe-256", "F16"],
  ],
  longCases: PRESETS.map((preset): OracleCase => [preset, "F16"]),
  exactWhereSameArithmetic: true,
});
