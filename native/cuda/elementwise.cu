#include "cuda/common.cuh"

namespace bloomery::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void swiglu_kernel(const float* gate, const float* up, int64_t count, float* out,
                              GatedActivation activation) {
  wait_for_previous_kernel();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) out[i] = gated_value(gate[i], up[i], activation);
}

// Multiplying by a scale of 1 changes no float, so every projection takes the multiply.
__global__ void add_projection_kernel(const float* projected, int64_t count, int width, const float* bias, float scale,
                                      float* residual) {
  wait_for_previous_kernel();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const float value = bias ? __fadd_rn(projected[i], bias[i % width]) : projected[i];
  residual[i] = __fadd_rn(residual[i], __fmul_rn(value, scale));
}

}  // namespace

void add_projection(const float* projected, int64_t rows, int64_t width, const float* bias, float scale,
                    float* residual, StreamHandle stream) {
  const int64_t count = rows * width;
  launch_early(add_projection_kernel, dim3(ceil_div(count, kThreads)), dim3(kThreads), 0,
               static_cast<cudaStream_t>(stream), projected, count, static_cast<int>(width), bias, scale, residual);
}

void swiglu(const float* gate, const float* up, int64_t count, float* out, StreamHandle stream,
            const GatedActivation& activation) {
  launch_early(swiglu_kernel, dim3(ceil_div(count, kThreads)), dim3(kThreads), 0, static_cast<cudaStream_t>(stream),
               gate, up, count, out, activation);
}

}  // namespace bloomery::cuda
