// The CPU kernel table: per weight type, its dequantizer, the activation format its dot
// reads (with that format's quantizer) and the dot itself, at a SIMD tier. A tier that
// lacks a kernel uses the next tier down and records which one it used, so tests and
// system reports can say what really runs. Selection by CPU features lives in
// cpu/cpu_dispatch.h; this layer knows nothing of the host.
//
// Activation pairings follow ggml: Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4 with Q8_0; Q4_1, Q5_1
// with Q8_1; the K-quants, IQ4_XS and the 1- to 3-bit types (IQ1_S .. IQ3_S, TQ1_0, TQ2_0) with Q8_K; F32, F16, BF16
// each with itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace bloomery::quant {

enum class SimdTier : uint8_t {
  kScalar,
  kAvx2,    // AVX2 + FMA + F16C
  kAvx512,  // AVX-512 F/BW/VL/VNNI (plus the AVX2 tier's features)
};
std::string_view simd_tier_name(SimdTier tier);

using DequantizeRowFn = void (*)(const void* src, float* dst, int64_t n);
using QuantizeRowFn = void (*)(const float* src, void* dst, int64_t n);
using VecDotFn = float (*)(const void* weights, const void* activations, int64_t n);

// Activation rows a multi-row dot takes at most.
constexpr int kDotRows = 8;
// out[r] = vec_dot(weights, activations[r], n) for r < rows (1 to kDotRows), bit for bit, with
// the weight row decoded once for all of them: prompts reuse each decoded weight block up to
// kDotRows times.
using VecDotRowsFn = void (*)(const void* weights, const void* const* activations, int rows, int64_t n, float* out);
// Weight rows a several-weight-row dot takes.
constexpr int kWeightRows = 8;
// out[r * kWeightRows + j] = vec_dot(weights + j * row_bytes, activations[r], n) for j <
// kWeightRows and r < rows (1 to kDotRows), bit for bit: eight weight rows against a decode
// step's activation row or a prompt's several at once. The repacked kernels decode each weight
// block once for all the activation rows and load each activation block once for all eight rows,
// their block sums scaled in one vector; Q8_0's (its own layout) takes tiles of four weight rows
// by two activation rows, one FMA chain per product. The `ahead_bytes` bytes at `ahead` (the rows
// that come next; none: 0) are prefetched meanwhile, a few cache lines per block: eight rows read
// side by side are eight short streams, which the hardware prefetcher hardly follows, while these
// loads keep the next rows' one stream coming at memory speed (a burst of them at once would stall
// on the line fill buffers instead).
using VecDotWeightRowsFn = void (*)(const void* weights, size_t row_bytes, const void* const* activations, int rows,
                                    int64_t n, float* out, const void* ahead, size_t ahead_bytes);

struct QuantKernels {
  uint32_t type;             // ggml id of the weight type
  uint32_t activation_type;  // ggml id of the format vec_dot reads activations in
  DequantizeRowFn dequantize_row;
  QuantizeRowFn quantize_activations;  // float row -> activation_type row
  VecDotFn vec_dot;
  SimdTier vec_dot_tier;      // the tier vec_dot comes from: at most the tier asked for
  VecDotRowsFn vec_dot_rows;  // nullptr where the tier has none: callers loop over vec_dot
  // vec_dot's, eight weight rows at once (Q8_0 from the AVX2 tier, through VNNI on AVX-512 hosts;
  // nullptr for the others).
  VecDotWeightRowsFn vec_dot_weight_rows = nullptr;
  // The same product in the order of llama.cpp's repacked kernels: on x86 its CPU backend stores
  // Q4_0, IQ4_NL, MXFP4 and Q4_K weights (Q2_K too on AVX-512 hosts) whose row count is a multiple
  // of 8 interleaved eight rows at a time, and sums each block's integer dot in one FMA per block.
  // nullptr where llama.cpp does not repack the type at this tier (cpu/matmul.h says which weights).
  VecDotFn vec_dot_repacked = nullptr;
  VecDotRowsFn vec_dot_rows_repacked = nullptr;
  // vec_dot_repacked's, eight weight rows at once (Q4_0, IQ4_NL, MXFP4; nullptr for the others).
  VecDotWeightRowsFn vec_dot_weight_rows_repacked = nullptr;
};

// The kernels of weight type `type` for a CPU of `tier`; `avx512_bf16`: the CPU has AVX-512 BF16
// too, which llama.cpp's BF16 dot uses where it has it (and so, for the same rounding, do we).
// Throws Error UNSUPPORTED_QUANT for a type without CPU kernels.
const QuantKernels& quant_kernels(uint32_t type, SimdTier tier, bool avx512_bf16 = false);

// Weight types that have CPU kernels, in ggml id order.
std::span<const uint32_t> cpu_weight_types();

}  // namespace bloomery::quant
