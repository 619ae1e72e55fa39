// Warp-level activation quantizers, shared by quantize.cu and the kernels that quantize the
// rows they produce (norm.cu). A warp holds 256 consecutive values, 8 per lane (lane l holds
// values 8 l .. 8 l + 7), and writes their 8 ActivationBlocks exactly as the CPU path
// quantizes them (quant/quantize_activations.cc); see quantize.cu for the three formats.
#pragma once

#include "cuda/common.cuh"

namespace bloomery::cuda {

inline constexpr int kQuantizeValuesPerLane = 8;
inline constexpr int kQuantizeValuesPerWarp = kQuantizeValuesPerLane * kWarp;

// Q8_K, the activations of the K-quants and IQ4_XS: the signed value of largest magnitude of the 256 maps to
// -127 (on a tie of magnitudes, the positive one: both signs give the same codes up to the rare
// value that would round to +-128). Every lane of the warp takes part.
__device__ __forceinline__ void quantize_q8_k_warp(const float (&v)[kQuantizeValuesPerLane], ActivationBlock* blocks) {
  const int lane = threadIdx.x % kWarp;
  float best = 0.0f;
#pragma unroll
  for (int i = 0; i < kQuantizeValuesPerLane; ++i) {
    if (fabsf(v[i]) > fabsf(best)) best = v[i];
  }
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, best, offset);
    if (fabsf(other) > fabsf(best) || (fabsf(other) == fabsf(best) && other > best)) best = other;
  }
  ActivationBlock& block = blocks[lane / 4];
  int8_t* qs = block.qs + (lane % 4) * kQuantizeValuesPerLane;
  if (best == 0.0f) {
#pragma unroll
    for (int i = 0; i < kQuantizeValuesPerLane; ++i) qs[i] = 0;
    if (lane % 4 == 0) block.d = 0.0f;
    return;
  }
  const float inverse = -127.0f / best;
#pragma unroll
  for (int i = 0; i < kQuantizeValuesPerLane; ++i)
    qs[i] = static_cast<int8_t>(min(127, __float2int_rn(inverse * v[i])));
  if (lane % 4 == 0) block.d = 1.0f / inverse;
}

// Q8_0: a half-precision scale per 32 values (4 lanes), 127 / amax, rounding half to even;
// Q8_1 (`with_sum`) also the block's sum: d times the sum of its codes, d unrounded (as
// quant::quantize_row_q8_1), the two halves packed in d_and_sum. Only the first `valid` of the
// 8 blocks are written (a row's tail); every lane takes part.
__device__ __forceinline__ void quantize_q8_0_warp(const float (&v)[kQuantizeValuesPerLane], ActivationBlock* blocks,
                                                   int valid, bool with_sum) {
  const int lane = threadIdx.x % kWarp;
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kQuantizeValuesPerLane; ++i) amax = fmaxf(amax, fabsf(v[i]));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  const float inverse = amax != 0.0f ? 127.0f / amax : 0.0f;
  int codes[kQuantizeValuesPerLane];
  int sum = 0;
#pragma unroll
  for (int i = 0; i < kQuantizeValuesPerLane; ++i) {
    codes[i] = __float2int_rn(v[i] * inverse);
    sum += codes[i];
  }
  if (with_sum) {
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  }
  if (lane / 4 >= valid) return;
  ActivationBlock& block = blocks[lane / 4];
  int8_t* qs = block.qs + (lane % 4) * kQuantizeValuesPerLane;
#pragma unroll
  for (int i = 0; i < kQuantizeValuesPerLane; ++i) qs[i] = static_cast<int8_t>(codes[i]);
  if (lane % 4 != 0) return;
  const float d = amax / 127.0f;
  if (with_sum) {
    const uint32_t d_bits = __half_as_ushort(__float2half_rn(d));
    const uint32_t sum_bits = __half_as_ushort(__float2half_rn(__fmul_rn(static_cast<float>(sum), d)));
    block.d_and_sum = d_bits | (sum_bits << 16);
  } else {
    block.d = __half2float(__float2half(d));
  }
}

// The 256 values from `first` of a row (blocks: the row's blocks) in `format`.
__device__ __forceinline__ void quantize_warp(const float (&v)[kQuantizeValuesPerLane], ActivationFormat format,
                                              int first, int width, ActivationBlock* row_blocks) {
  ActivationBlock* blocks = row_blocks + first / 32;
  if (format == ActivationFormat::kQ8_K) {
    quantize_q8_k_warp(v, blocks);
  } else {
    quantize_q8_0_warp(v, blocks, min(8, (width - first) / 32), format == ActivationFormat::kQ8_1);
  }
}

}  // namespace bloomery::cuda
