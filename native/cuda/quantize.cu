// Activation rows quantized exactly as the CPU path quantizes them (quant/quantize_activations.cc),
// so the integer dots see the same codes and GPU and CPU differ only in float summation order:
// for the K-quants and IQ4_XS, Q8_K's one scale per 256 values (the signed value of largest
// magnitude maps to -127, rounding half to even); for the 32-value formats, Q8_0's
// half-precision scale per 32 values (127 / amax, rounding half to even), and for Q8_1 (Q4_1's
// and Q5_1's activations) also the block's sum. The warp-level quantizers are in quantize.cuh.
#include <string>

#include "base/error.h"
#include "cuda/quantize.cuh"
#include "quant/kernels.h"

namespace bloomery::cuda {

namespace {

// One warp per 256 values of the n rows taken as one (rows are whole blocks in every format:
// 256 values for Q8_K, 32 for Q8_0 and Q8_1, so no warp's blocks cross a row).
__global__ void quantize_kernel(const float* x, int64_t count, ActivationFormat format, ActivationBlock* out) {
  wait_for_previous_kernel();
  const int64_t first =
      (static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp) * kQuantizeValuesPerWarp;
  if (first >= count) return;
  const int lane = threadIdx.x % kWarp;
  float v[kQuantizeValuesPerLane];
#pragma unroll
  for (int i = 0; i < kQuantizeValuesPerLane; ++i) {
    const int64_t j = first + lane * kQuantizeValuesPerLane + i;
    v[i] = j < count ? x[j] : 0.0f;
  }
  const auto left = static_cast<int>(min(count - first, static_cast<int64_t>(kQuantizeValuesPerWarp)));
  quantize_warp(v, format, 0, left, out + first / 32);
}

}  // namespace

ActivationFormat activation_format(uint32_t weight_type) {
  const uint32_t format = quant::quant_kernels(weight_type, quant::SimdTier::kScalar).activation_type;
  switch (format) {
    case kTypeQ8_0:
      return ActivationFormat::kQ8_0;
    case kTypeQ8_1:
      return ActivationFormat::kQ8_1;
    case kTypeQ8_K:
      return ActivationFormat::kQ8_K;
    default:
      throw Error("UNSUPPORTED_QUANT", "ggml type " + std::to_string(weight_type) +
                                           " has no integer dot (activations of type " + std::to_string(format) + ")");
  }
}

void quantize_activations(const float* x, int64_t n, int64_t cols, uint32_t weight_type, ActivationBlock* out,
                          StreamHandle stream) {
  constexpr int kThreads = 256;
  const int64_t count = n * cols;
  launch_early(quantize_kernel, dim3(ceil_div(count, kThreads / kWarp * kQuantizeValuesPerWarp)), dim3(kThreads), 0,
               static_cast<cudaStream_t>(stream), x, count, activation_format(weight_type), out);
}

}  // namespace bloomery::cuda
