#include <cmath>
#include <limits>

#include "cpu/avx512_math.h"
#include "cpu/softmax.h"

// GCC 12's AVX-512 intrinsics build their "undefined" operands by self-initialization,
// which -Wuninitialized reports wherever they inline under a target attribute.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace bloomery::cpu {

BLOOMERY_CPU_AVX512 void softmax_avx512(float* x, int64_t n, SoftmaxTail tail, const float* sink) {
  __m512 max = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  // The last block's load is masked too: a row may end just before memory that is not mapped.
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(i, n);
    max = _mm512_mask_max_ps(max, m, _mm512_maskz_loadu_ps(m, x + i), max);
  }
  float row_max = _mm512_reduce_max_ps(max);
  if (sink) row_max = *sink > row_max ? *sink : row_max;
  const __m512 row_max16 = _mm512_set1_ps(row_max);
  double sum = 0.0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i), row_max16));
    _mm512_storeu_ps(x + i, e);
    sum += _mm512_reduce_add_ps(e);
  }
  if (i < n && tail == SoftmaxTail::kPadded) {
    const __mmask16 m = tail_mask(i, n);
    const __m512 e = _mm512_maskz_mov_ps(m, exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), row_max16)));
    _mm512_mask_storeu_ps(x + i, m, e);
    sum += _mm512_reduce_add_ps(e);
  } else {
    for (; i < n; ++i) {
      x[i] = std::exp(x[i] - row_max);
      sum += x[i];
    }
  }
  if (sink) sum += static_cast<double>(std::exp(*sink - row_max));
  const __m512 inverse = _mm512_set1_ps(static_cast<float>(1.0 / sum));
  for (i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(i, n);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inverse));
  }
}

}  // namespace bloomery::cpu
