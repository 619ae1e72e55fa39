#include "cpu/swiglu.h"

#include <algorithm>
#include <cmath>

#include "cpu/cpu_dispatch.h"

namespace bloomery::cpu {

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  static const auto kernel = [] {
    const quant::SimdTier tier = host_simd_tier();
    if (tier >= quant::SimdTier::kAvx512) return swiglu_avx512;
    return tier >= quant::SimdTier::kAvx2 ? swiglu_avx2 : swiglu_scalar;
  }();
  kernel(gate, up, n, out);
}

void swiglu_scalar(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void vec_silu(const float* x, int64_t n, float* out) {
  static const auto kernel = [] {
    const quant::SimdTier tier = host_simd_tier();
    if (tier >= quant::SimdTier::kAvx512) return vec_silu_avx512;
    return tier >= quant::SimdTier::kAvx2 ? vec_silu_avx2 : vec_silu_scalar;
  }();
  kernel(x, n, out);
}

void vec_silu_scalar(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] / (1.0f + std::exp(-x[i]));
}

}  // namespace bloomery::cpu

namespace bloomery::cpu {

void clamped_swiglu(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    out[i] = g / (1.0f + std::exp(alpha * (-g))) * (u + 1.0f);
  }
}

void limited_swiglu(const float* gate, const float* up, int64_t n, float limit, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    out[i] = g / (1.0f + std::exp(-g)) * u;
  }
}

}  // namespace bloomery::cpu
