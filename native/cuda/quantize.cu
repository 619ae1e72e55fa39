// Activation rows quantized exactly as the CPU path quantizes them (quant/quantize_activations.cc),
// so the integer dots see the same codes and GPU and CPU differ only in float summation order:
// for the K-quants, Q8_K's one scale per 256 values (the signed value of largest magnitude maps
// to -127, rounding half to even); for Q8_0, a half-precision scale per 32 values (127 / amax,
// rounding half to even). The warp-level quantizers are in quantize.cuh.
#include "cuda/quantize.cuh"

namespace bloomery::cuda {

namespace {

// One warp per 256 values of the n rows taken as one (rows are whole blocks for either format:
// 256 values for the K-quants, 32 for Q8_0, so no warp's blocks cross a row).
__global__ void quantize_kernel(const float* x, int64_t count, bool superblocks, ActivationBlock* out) {
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
  quantize_warp(v, superblocks, 0, left, out + first / 32);
}

}  // namespace

bool superblock_activations(uint32_t weight_type) { return weight_type != kTypeQ8_0; }

void quantize_activations(const float* x, int64_t n, int64_t cols, uint32_t weight_type, ActivationBlock* out,
                          StreamHandle stream) {
  constexpr int kThreads = 256;
  const int64_t count = n * cols;
  launch_early(quantize_kernel, dim3(ceil_div(count, kThreads / kWarp * kQuantizeValuesPerWarp)), dim3(kThreads), 0,
               static_cast<cudaStream_t>(stream), x, count, superblock_activations(weight_type), out);
}

}  // namespace bloomery::cuda
