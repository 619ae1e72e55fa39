#include "cpu/swiglu.h"

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

}  // namespace bloomery::cpu
