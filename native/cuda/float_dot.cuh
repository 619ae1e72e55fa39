// A block's dot products of one weight row of F32, F16 or BF16 with up to NT float activation
// rows: the float mat-vec's (matvec.cu) and the decode router's (moe.cu), one arithmetic for both
// so that a router row's logit is the same float whichever launch computes it.
#pragma once

#include "cuda/common.cuh"

namespace bloomery::cuda {

// Threads of a block that computes one weight row's dots.
inline constexpr int kFloatThreads = 128;
// 16-byte weight loads a thread issues before it uses any of them.
inline constexpr int kFloatLoadsInFlight = 4;

template <uint32_t Type>
__device__ __forceinline__ float4 load_weights4(const uint8_t* row, int group) {
  if constexpr (Type == kTypeF32) {
    return reinterpret_cast<const float4*>(row)[group];
  } else {
    const uint2 bits = reinterpret_cast<const uint2*>(row)[group];
    const auto value = [](uint32_t b) {
      return Type == kTypeF16 ? half_bits_to_float(static_cast<uint16_t>(b))
                              : bf16_bits_to_float(static_cast<uint16_t>(b));
    };
    return make_float4(value(bits.x & 0xffff), value(bits.x >> 16), value(bits.y & 0xffff), value(bits.y >> 16));
  }
}

// Each thread takes 4 columns at a time (one 16-byte load of F32 weights, 8 of F16 or BF16), in
// rounds of kFloatLoadsInFlight loads; activations are rounded as the CPU path (as ggml) rounds
// them for the type (float_operand). The weights are no kernel's output: the first round loads
// before wait_for_previous_kernel(), while the kernel before ends. Thread t < NT returns the dot
// with xs[t] (the others return nothing of use); every thread of the block must call it.
template <uint32_t Type, int NT>
__device__ float float_row_dots(const uint8_t* wrow, int cols, const float* const (&xs)[NT]) {
  // Groups of 4 columns where rows keep 16-byte alignment; the rest (and odd widths) one by one.
  const int groups = cols % 4 == 0 ? cols / 4 : 0;
  float4 weights[kFloatLoadsInFlight];
  const auto load_round = [&](int base) {
#pragma unroll
    for (int b = 0; b < kFloatLoadsInFlight; ++b)
      weights[b] = load_weights4<Type>(wrow, min(base + b * kFloatThreads, groups - 1));
  };
  if (static_cast<int>(threadIdx.x) < groups) load_round(threadIdx.x);
  wait_for_previous_kernel();
  float acc[NT] = {};
  for (int base = threadIdx.x; base < groups;) {
#pragma unroll
    for (int b = 0; b < kFloatLoadsInFlight; ++b) {
      const int group = base + b * kFloatThreads;
      if (group >= groups) break;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const float4 v = reinterpret_cast<const float4*>(xs[t])[group];
        acc[t] += weights[b].x * float_operand<Type>(v.x);
        acc[t] += weights[b].y * float_operand<Type>(v.y);
        acc[t] += weights[b].z * float_operand<Type>(v.z);
        acc[t] += weights[b].w * float_operand<Type>(v.w);
      }
    }
    base += kFloatThreads * kFloatLoadsInFlight;
    if (base < groups) load_round(base);
  }
  for (int c = 4 * groups + threadIdx.x; c < cols; c += kFloatThreads) {
    const float weight = float_weight<Type>(wrow, c);
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] += weight * float_operand<Type>(xs[t][c]);
  }
  __shared__ float partial[NT][kFloatThreads / kWarp];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const float sum = warp_sum(acc[t]);
    if (threadIdx.x % kWarp == 0) partial[t][threadIdx.x / kWarp] = sum;
  }
  __syncthreads();
  float value = 0.0f;
  if (static_cast<int>(threadIdx.x) < NT) {
    const int t = static_cast<int>(threadIdx.x);
#pragma unroll
    for (int i = 0; i < kFloatThreads / kWarp; ++i) value += partial[t][i];
  }
  return value;
}

}  // namespace bloomery::cuda
