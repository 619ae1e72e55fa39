#include <cmath>

#include "cuda/common.cuh"

namespace bloomery::cuda {

namespace {

// One thread per rotated pair. The angle is built as the CPU path (cpu/rope.cc) and ggml
// build it: theta multiplied up by theta_scale in float, i times, so that every rounding
// is the same; cos and sin are taken in double and rounded once, which gives the correctly
// rounded float the host's libm returns. Products are kept apart from the sums (no fused
// multiply-add) for the same reason.
__global__ void rope_kernel(float* x, int64_t pairs, int heads, int head_dim, const int32_t* positions, RopeShape shape,
                            float theta_scale) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= pairs) return;
  const int half = static_cast<int>(shape.dims / 2);
  const int i = static_cast<int>(index % half);
  const int64_t head_row = index / half;  // token * heads + head
  const int64_t token = head_row / heads;
  float* head = x + head_row * head_dim;
  float theta_base = static_cast<float>(positions[token]);
  for (int k = 0; k < i; ++k) theta_base = __fmul_rn(theta_base, theta_scale);
  const float factor = shape.freq_factors ? shape.freq_factors[i] : 1.0f;
  const float theta = __fmul_rn(shape.freq_scale, __fdiv_rn(theta_base, factor));
  double sin_theta, cos_theta;
  sincos(static_cast<double>(theta), &sin_theta, &cos_theta);
  const auto s = static_cast<float>(sin_theta), c = static_cast<float>(cos_theta);
  float* a = shape.neox ? head + i : head + 2 * i;
  float* b = shape.neox ? head + i + half : head + 2 * i + 1;
  const float x0 = *a, x1 = *b;
  *a = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
  *b = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

}  // namespace

void rope(float* x, int64_t n, int64_t heads, int64_t head_dim, const int32_t* positions, const RopeShape& shape,
          StreamHandle stream) {
  constexpr int kThreads = 256;
  const int64_t pairs = n * heads * (shape.dims / 2);
  // On the host, with the host's powf, as the CPU path computes it.
  const float theta_scale = std::pow(shape.freq_base, -2.0f / static_cast<float>(shape.dims));
  rope_kernel<<<ceil_div(pairs, kThreads), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, pairs, static_cast<int>(heads), static_cast<int>(head_dim), positions, shape, theta_scale);
}

}  // namespace bloomery::cuda
