#include <cmath>
#include <limits>

#include "cpu/avx2_math.h"
#include "cpu/softmax.h"
#include "quant/reduce_avx2.h"

namespace bloomery::cpu {

namespace {

// The lanes of the 8-float chunk at `offset` of n floats that lie inside them, as maskload wants.
BLOOMERY_CPU_AVX2 inline __m256i lanes_inside(int64_t offset, int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - offset)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

}  // namespace

BLOOMERY_CPU_AVX2 void softmax_avx2(float* x, int64_t n, SoftmaxTail tail) {
  float row_max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) row_max = x[i] > row_max ? x[i] : row_max;
  const __m256 row_max8 = _mm256_set1_ps(row_max);
  double sum = 0.0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), row_max8));
    _mm256_storeu_ps(x + i, e);
    sum += quant::sum_of_8(e);
  }
  if (i < n && tail == SoftmaxTail::kPadded) {
    const __m256i inside = lanes_inside(i, n);
    const __m256 e = _mm256_and_ps(_mm256_castsi256_ps(inside),
                                   exp_avx2(_mm256_sub_ps(_mm256_maskload_ps(x + i, inside), row_max8)));
    _mm256_maskstore_ps(x + i, inside, e);
    sum += quant::sum_of_8(e);
  } else {
    for (; i < n; ++i) {
      x[i] = std::exp(x[i] - row_max);
      sum += x[i];
    }
  }
  const float inverse = static_cast<float>(1.0 / sum);
  for (i = 0; i < n; ++i) x[i] *= inverse;
}

}  // namespace bloomery::cpu
