import { getSystemInfo } from "../src/index.js";
import { describeOracle, type OracleCase } from "./oracle.js";

// The hybrid linear-attention Qwens (qwen35moe, qwen3next: Gated DeltaNet layers beside gated
// attention, a sigmoid-gated shared expert) on the CPU against llama.cpp, over prompts longer than
// llama.cpp's 64-token delta-net chunk: arbitrary ids, plain text and a long context; the same
// distributions where llama.cpp's arithmetic is ours, as for the other architectures (the
// convolution's SiLU is ggml's SIMD one: with libm's exp, F32 parted by a KL of 2e-11 and Q8_0,
// whose activations round to 8 bits, by 2 top-1 misses in 160). Exact on AVX-512 hosts only: on an
// AVX2 host (an AMD EPYC without AVX-512, 2026-12-06) both our paths part from both of llama.cpp's
// (its avx2 variant's) by a KL of 3e-11 on F32 to 1e-4 on Q8_0, within the bar, while the other
// families there are exact: the delta-net's AVX2 arithmetic is not yet llama.cpp's (a known gap).
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
  exactWhereSameArithmetic: getSystemInfo().cpu.simdTier !== "avx2",
});
