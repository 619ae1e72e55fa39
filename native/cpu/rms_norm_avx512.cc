#include <immintrin.h>

#include "cpu/avx512_math.h"
#include "cpu/rms_norm.h"

// GCC 12's AVX-512 intrinsics build their "undefined" operands by self-initialization,
// which -Wuninitialized reports wherever they inline under a target attribute.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace bloomery::cpu {

BLOOMERY_CPU_AVX512 double sum_of_squares_avx512(const float* x, int64_t n) {
  __m512d low = _mm512_setzero_pd(), high = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 v = _mm512_maskz_loadu_ps(tail_mask(i, n), x + i);
    const __m512 squares = _mm512_mul_ps(v, v);
    low = _mm512_add_pd(low, _mm512_cvtps_pd(_mm512_castps512_ps256(squares)));
    high = _mm512_add_pd(high, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(squares), 1))));
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(low, high));
}

}  // namespace bloomery::cpu
