#include "cpu/softmax.h"

#include <cmath>
#include <limits>

#include "cpu/cpu_dispatch.h"

namespace bloomery::cpu {

void softmax(float* x, int64_t n) {
  static const auto kernel = host_simd_tier() >= quant::SimdTier::kAvx512 ? softmax_avx512 : softmax_scalar;
  kernel(x, n);
}

void softmax_scalar(float* x, int64_t n) {
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
