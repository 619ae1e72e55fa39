#include <limits>

#include "cpu/avx512_math.h"
#include "cpu/softmax.h"

// GCC 12's AVX-512 intrinsics build their "undefined" operands by self-initialization,
// which -Wuninitialized reports wherever they inline under a target attribute.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace bloomery::cpu {

BLOOMERY_CPU_AVX512 void softmax_avx512(float* x, int64_t n) {
  __m512 max = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < n; i += 16) max = _mm512_mask_max_ps(max, tail_mask(i, n), _mm512_loadu_ps(x + i), max);
  const __m512 row_max = _mm512_set1_ps(_mm512_reduce_max_ps(max));
  // The exponentials summed in double, eight at a time (the float to double conversion is exact).
  __m512d sum = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(i, n);
    const __m512 e = _mm512_maskz_mov_ps(m, exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), row_max)));
    _mm512_mask_storeu_ps(x + i, m, e);
    sum = _mm512_add_pd(sum, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    sum = _mm512_add_pd(sum, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
  }
  const __m512 inverse = _mm512_set1_ps(static_cast<float>(1.0 / _mm512_reduce_add_pd(sum)));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(i, n);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inverse));
  }
}

}  // namespace bloomery::cpu
