// The rotation of rotary position embedding, shared by the kernels that rotate heads
// (rope.cu's position_heads, latent.cu's latent queries and keys).
#pragma once

#include "cuda/ops.h"

namespace bloomery::cuda {

// Whether pair i of an interleaved multi-axis rope takes its angle from the fourth axis
// (position 0 at text positions), as cpu/rope.cc's fourth_axis (ggml's imrope).
__device__ __forceinline__ bool rope_fourth_axis(const RopeShape& k, int i) {
  const int sum = k.sections[0] + k.sections[1] + k.sections[2] + k.sections[3];
  if (sum == 0) return false;
  const int sector = i % sum;
  return sector >= 3 * k.sections[sector % 3];
}

// The rotation of pair i at `position`. The angle is built as the CPU path (cpu/rope.cc) and
// ggml build it: theta multiplied up by theta_scale in float, i times, so that every rounding
// is the same (0 for a pair of the fourth axis of RopeShape::sections), then YaRN's ramp (one
// fused multiply-add, as cpu/rope.cc and ggml blend it); cos and sin are taken in double and
// rounded once, which gives the correctly rounded float the host's libm returns.
__device__ __forceinline__ void rope_angle(const RopeShape& k, int32_t position, int i, float* c, float* s) {
  float theta_base = static_cast<float>(position);
  for (int j = 0; j < i; ++j) theta_base = __fmul_rn(theta_base, k.theta_scale);
  if (rope_fourth_axis(k, i)) theta_base = 0.0f;
  const float factor = k.freq_factors ? k.freq_factors[i] : 1.0f;
  const float extrapolated = __fdiv_rn(theta_base, factor);
  float theta = __fmul_rn(k.freq_scale, extrapolated);
  if (k.ext_factor != 0.0f) {
    const float y =
        __fdiv_rn(__fsub_rn(static_cast<float>(i), k.ramp_low), fmaxf(0.001f, __fsub_rn(k.ramp_high, k.ramp_low)));
    const float ramp = __fmul_rn(__fsub_rn(1.0f, fminf(1.0f, fmaxf(0.0f, y))), k.ext_factor);
    theta = __fmaf_rn(theta, __fsub_rn(1.0f, ramp), __fmul_rn(extrapolated, ramp));
  }
  double sin_theta, cos_theta;
  sincos(static_cast<double>(theta), &sin_theta, &cos_theta);
  *c = __fmul_rn(static_cast<float>(cos_theta), k.mscale);
  *s = __fmul_rn(static_cast<float>(sin_theta), k.mscale);
}

// Rotates the `shape.dims` leading values of `values` (in shared or local memory) at `position`,
// pairs i of this lane's share (lane, lane + 32, ...), through `put(index, value)`; each rotated
// value is one fused multiply-add over the other product, as cpu/rope.cc (and ggml) round it.
template <typename Put>
__device__ __forceinline__ void rotate_pairs(const RopeShape& shape, int32_t position, const float* values, Put put) {
  const int half = static_cast<int>(shape.dims) / 2;
  for (int i = threadIdx.x % 32; i < half; i += 32) {
    float c, s;
    rope_angle(shape, position, i, &c, &s);
    const int a = shape.neox ? i : 2 * i;
    const int b = shape.neox ? i + half : 2 * i + 1;
    const float x0 = values[a], x1 = values[b];
    put(a, __fmaf_rn(x0, c, -__fmul_rn(x1, s)));
    put(b, __fmaf_rn(x0, s, __fmul_rn(x1, c)));
  }
}

}  // namespace bloomery::cuda
