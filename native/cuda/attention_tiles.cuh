// What the tensor-core attention kernels (attention_tiled.cu, attention_latent.cu) share: f16
// fragments loaded from shared memory with ldmatrix, the m16n8k16 f16 mma with f32 accumulators,
// the quad reductions over an mma C fragment's row, the fold of a row's segment statistics and the
// sum of its segments' products.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace bloomery::cuda {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p))
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p))
               : "memory");
}

// c += a b for a 16x16 f16 A, a 16x8 f16 B, f32 C.
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_halves(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ void wait_for_tiles() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// A row's maximum over the statistics of its `count` segments (each its maximum score and exp
// sum, `stride` apart) and the inverse of its exp sum, folded by the quad of lanes that holds the
// row in the mma fragments: lane q of the quad takes segments q, q + 4, ..., so a long cache costs
// a quarter of the dependent loads. The maximum is exact in any order; the sum is in double, as
// the CPU's softmax has it, each lane's in segment order and then the quad's as (0 + 1) + (2 + 3),
// one order whichever kernel folds the row; the inverse is rounded to float. Read from L2
// (__ldcg): other blocks of the same launch may have written them. A learned sink (gpt-oss's, the
// row's head's logit; -INFINITY: none) joins the maximum and adds its exp to the sum last, as
// ggml_soft_max_ext's sinks. Every lane of the warp calls it (the quad shuffles), a row without
// segments with count 0.
__device__ __forceinline__ void fold_segment_statistics(const float2* stats, int64_t stride, int count, float sink,
                                                        float& max, float& inverse) {
  const int phase = static_cast<int>(threadIdx.x % 4);
  float row_max = -INFINITY;
#pragma unroll 8
  for (int g = phase; g < count; g += 4) row_max = fmaxf(row_max, __ldcg(stats + g * stride).x);
  row_max = fmaxf(quad_max(row_max), sink);
  double row_sum = 0.0;
#pragma unroll 8
  for (int g = phase; g < count; g += 4) {
    const float2 st = __ldcg(stats + g * stride);
    row_sum =
        __dadd_rn(row_sum, __dmul_rn(static_cast<double>(st.y), static_cast<double>(expf(__fsub_rn(st.x, row_max)))));
  }
  row_sum = __dadd_rn(row_sum, __shfl_xor_sync(0xffffffffu, row_sum, 1));
  row_sum = __dadd_rn(row_sum, __shfl_xor_sync(0xffffffffu, row_sum, 2));
  if (sink != -INFINITY) row_sum = __dadd_rn(row_sum, static_cast<double>(expf(__fsub_rn(sink, row_max))));
  max = row_max;
  inverse = static_cast<float>(1.0 / row_sum);
}

// Segments whose products a combine thread loads before it adds any of them: the sum is a chain
// of adds in segment order, its loads are not, and a long cache would otherwise wait out one
// memory latency every few segments.
constexpr int kCombineLoads = 32;

// Output i (of `stride` per segment) as the sum of its row's `count` segment products in segment
// order, from zero, as a values kernel adds them when one block runs all of a row's segments
// (attention_tiled.cu, attention_latent.cu).
__device__ __forceinline__ float sum_segments(const float* partial, int64_t stride, int count, int64_t i) {
  float sum = 0.0f;
  int g = 0;
  for (; g + kCombineLoads <= count; g += kCombineLoads) {
    float part[kCombineLoads];
#pragma unroll
    for (int j = 0; j < kCombineLoads; ++j) part[j] = partial[(g + j) * stride + i];
#pragma unroll
    for (int j = 0; j < kCombineLoads; ++j) sum = __fadd_rn(sum, part[j]);
  }
  for (; g < count; ++g) sum = __fadd_rn(sum, partial[g * stride + i]);
  return sum;
}

}  // namespace bloomery::cuda
