#include "cuda/common.cuh"

namespace bloomery::cuda {

namespace {

// One warp per row. The arithmetic is the CPU path's (cpu/rms_norm.cc): the squares rounded
// to float (as ggml does) and summed in double, the mean rounded to float, 1 / sqrt(mean + eps), then (x * scale) * weight,
// each step rounded as there (no fused multiply-add), so both give the same floats.
__global__ void rms_norm_kernel(const float* x, int rows, int width, const float* weight, float eps, float* out) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarp;
  const float* in = x + static_cast<int64_t>(row) * width;
  double sum = 0.0;
  for (int i = lane; i < width; i += kWarp) {
    sum = __dadd_rn(sum, static_cast<double>(__fmul_rn(in[i], in[i])));
  }
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  const auto mean = static_cast<float>(sum / static_cast<double>(width));
  const float scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
  float* y = out + static_cast<int64_t>(row) * width;
  for (int i = lane; i < width; i += kWarp) y[i] = __fmul_rn(__fmul_rn(in[i], scale), weight[i]);
}

}  // namespace

void rms_norm(const float* x, int64_t rows, int64_t width, const float* weight, float eps, float* out,
              StreamHandle stream) {
  constexpr int kThreads = 256;
  rms_norm_kernel<<<ceil_div(rows, kThreads / kWarp), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, static_cast<int>(rows), static_cast<int>(width), weight, eps, out);
}

}  // namespace bloomery::cuda
