#include "cpu/softmax.h"

#include <cmath>
#include <limits>

#include "cpu/cpu_dispatch.h"

namespace bloomery::cpu {

void softmax(float* x, int64_t n, SoftmaxTail tail) {
  static const auto kernel = [] {
    const quant::SimdTier tier = host_simd_tier();
    if (tier >= quant::SimdTier::kAvx512) return softmax_avx512;
    return tier >= quant::SimdTier::kAvx2 ? softmax_avx2 : softmax_scalar;
  }();
  kernel(x, n, tail);
}

void softmax_scalar(float* x, int64_t n, SoftmaxTail) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) max = x[i] > max ? x[i] : max;
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inverse = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inverse;
}

}  // namespace bloomery::cpu
