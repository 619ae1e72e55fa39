// RMS norm, one block per row. The arithmetic is the CPU path's (cpu/rms_norm.cc): the squares
// rounded to float (as ggml does) and summed in double (the order differs, which in double rounds to the same float
// mean in practice), the mean rounded to float, 1 / sqrt(mean + eps), then (x * scale) * weight, each step rounded as
// there (no fused multiply-add), so both give the same floats. The norm also takes over two neighbours that would be
// launches of their own: the MoE sum of the layer before (combine_experts' arithmetic) and the quantization of its
// output for the next product.
#include "base/error.h"
#include "cuda/expert_sum.cuh"
#include "cuda/quantize.cuh"

namespace bloomery::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = kQuantizeValuesPerLane;  // consecutive values: a lane's share of a quantized warp
static_assert(kPerThread == kSumValues, "a thread adds the expert sum to the values it holds");
constexpr int kSpan = kThreads * kPerThread;  // values the block covers per round

__device__ double block_sum(double v) {
  __shared__ double partial[kThreads / kWarp];
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (threadIdx.x % kWarp == 0) partial[threadIdx.x / kWarp] = v;
  __syncthreads();
  double sum = 0.0;
#pragma unroll
  for (int w = 0; w < kThreads / kWarp; ++w) sum += partial[w];
  return sum;
}

// Each thread holds runs of 8 values, thread t of round r the run at r * kSpan + 8 t, so a warp
// holds 256 consecutive values: one Q8_K super-block, eight Q8_0 or Q8_1 blocks.
__global__ void __launch_bounds__(kThreads) rms_norm_kernel(RmsNorm a, ActivationFormat format) {
  wait_for_previous_kernel();
  const int64_t row = blockIdx.x;
  const auto width = static_cast<int>(a.width);
  float* x = a.x + row * width;
  const int rounds = (width + kSpan - 1) / kSpan;
  double sum = 0.0;
  for (int r = 0; r < rounds; ++r) {
    const int first = r * kSpan + static_cast<int>(threadIdx.x) * kPerThread;
    const int count = max(0, min(kPerThread, width - first));
    float v[kPerThread];
    load_values(x + first, count, v);
    if (a.pending.expert_out && count > 0) {
      float sum[kPerThread];
      expert_sum(a.pending, row, first, count, width, sum);
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) v[i] = __fadd_rn(v[i], sum[i]);
      for (int i = 0; i < count; ++i) x[first + i] = v[i];
    }
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      sum = __dadd_rn(sum, static_cast<double>(__fmul_rn(v[i], v[i])));
    }
  }
  const auto mean = static_cast<float>(block_sum(sum) / static_cast<double>(width));
  const float scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, a.eps)));
  float* y = a.out + row * width;
  ActivationBlock* blocks = a.blocks ? a.blocks + row * (width / 32) : nullptr;
  for (int r = 0; r < rounds; ++r) {
    const int first = r * kSpan + static_cast<int>(threadIdx.x) * kPerThread;
    const int count = max(0, min(kPerThread, width - first));
    float v[kPerThread], w[kPerThread];
    load_values(x + first, count, v);
    if (a.weight) {
      load_values(a.weight + first, count, w);
    } else {
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) w[i] = 1.0f;  // no weight: x * scale, times one exactly
    }
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) v[i] = __fmul_rn(__fmul_rn(v[i], scale), w[i]);
    for (int i = 0; i < count; ++i) y[first + i] = v[i];
    const int warp_first = r * kSpan + static_cast<int>(threadIdx.x / kWarp) * kQuantizeValuesPerWarp;
    if (blocks && warp_first < width) quantize_warp(v, format, warp_first, width, blocks);
  }
}

}  // namespace

void rms_norm(const RmsNorm& norm, StreamHandle stream) {
  const ActivationFormat format = norm.blocks ? activation_format(norm.blocks_for) : ActivationFormat::kQ8_0;
  if (norm.blocks && norm.width % (format == ActivationFormat::kQ8_K ? 256 : 32) != 0) {
    throw Error("INVALID_ARGUMENT", "rms_norm cannot quantize rows of " + std::to_string(norm.width) +
                                        " values for ggml type " + std::to_string(norm.blocks_for));
  }
  if (norm.rows == 0) return;
  launch_early(rms_norm_kernel, dim3(static_cast<unsigned>(norm.rows)), dim3(kThreads), 0,
               static_cast<cudaStream_t>(stream), norm, format);
}

}  // namespace bloomery::cuda
