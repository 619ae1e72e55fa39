#include "cpu/swiglu.h"

#include <cmath>

#include "cpu/cpu_dispatch.h"

namespace bloomery::cpu {

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  static const auto kernel = host_simd_tier() >= quant::SimdTier::kAvx512 ? swiglu_avx512 : swiglu_scalar;
  kernel(gate, up, n, out);
}

void swiglu_scalar(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace bloomery::cpu
