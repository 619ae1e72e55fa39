// The weighted sum of a row's routed experts' outputs, as cpu/moe.cc adds it: products and sums
// rounded one by one, in k order, over the GPU-resident experts (slot_of_expert >= 0; the CPU
// adds its own experts' sum). Shared by combine_experts (moe.cu) and the norm that adds the sum
// itself (norm.cu), so both give the same floats.
#pragma once

#include "cuda/common.cuh"
#include "cuda/ops.h"

namespace bloomery::cuda {

constexpr int kSumValues = 8;        // consecutive values of a row a thread sums
constexpr int kExpertsInFlight = 8;  // experts whose loads a thread issues before it adds any

// The `count` (at most kSumValues) values at p, the rest zero.
__device__ __forceinline__ void load_values(const float* p, int count, float (&v)[kSumValues]) {
  if (count == kSumValues && reinterpret_cast<uintptr_t>(p) % 16 == 0) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    return;
  }
#pragma unroll
  for (int i = 0; i < kSumValues; ++i) v[i] = i < count ? p[i] : 0.0f;
}

// sum = the expert sum of values [first, first + count) of row `row` (rows of `width`). A
// decode step has one row: a loop that waited for each expert's choice, slot and outputs in
// turn would spend its time on memory latency, so each group of kExpertsInFlight experts is
// loaded at once, then added in k order.
__device__ __forceinline__ void expert_sum(const ExpertSum& e, int64_t row, int first, int count, int width,
                                           float (&sum)[kSumValues]) {
#pragma unroll
  for (int i = 0; i < kSumValues; ++i) sum[i] = 0.0f;
  for (int64_t k0 = 0; k0 < e.used; k0 += kExpertsInFlight) {
    int expert[kExpertsInFlight];
#pragma unroll
    for (int j = 0; j < kExpertsInFlight; ++j) expert[j] = k0 + j < e.used ? e.chosen[row * e.used + k0 + j] : -1;
    bool resident[kExpertsInFlight];
#pragma unroll
    for (int j = 0; j < kExpertsInFlight; ++j) resident[j] = expert[j] >= 0 && e.slot_of_expert[expert[j]] >= 0;
    float weight[kExpertsInFlight], out[kExpertsInFlight][kSumValues];
#pragma unroll
    for (int j = 0; j < kExpertsInFlight; ++j) {
      const int64_t slot = row * e.used + k0 + j;
      weight[j] = resident[j] ? e.weights[slot] : 0.0f;
      if (resident[j]) load_values(e.expert_out + slot * width + first, count, out[j]);
    }
#pragma unroll
    for (int j = 0; j < kExpertsInFlight; ++j) {
      if (!resident[j]) continue;
#pragma unroll
      for (int i = 0; i < kSumValues; ++i) sum[i] = __fadd_rn(sum[i], __fmul_rn(weight[j], out[j][i]));
    }
  }
}

}  // namespace bloomery::cuda
