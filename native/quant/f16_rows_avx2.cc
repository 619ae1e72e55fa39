// AVX2 + F16C kernels of f16_rows.h: eight elements per conversion, two accumulators so
// consecutive FMAs do not wait on each other.
#include <immintrin.h>

#include "quant/f16_rows.h"

#define BLOOMERY_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace bloomery::quant {

namespace {

BLOOMERY_AVX2 inline __m256 load_f16x8(const uint16_t* x) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
}

BLOOMERY_AVX2 inline float horizontal_sum(__m256 v) {
  const __m128 pair = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 two = _mm_add_ps(pair, _mm_movehl_ps(pair, pair));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)));
}

}  // namespace

BLOOMERY_AVX2 float dot_f16_avx2(const uint16_t* x, const float* y, int64_t n) {
  __m256 even = _mm256_setzero_ps();
  __m256 odd = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    even = _mm256_fmadd_ps(load_f16x8(x + i), _mm256_loadu_ps(y + i), even);
    odd = _mm256_fmadd_ps(load_f16x8(x + i + 8), _mm256_loadu_ps(y + i + 8), odd);
  }
  float sum = horizontal_sum(_mm256_add_ps(even, odd));
  for (; i < n; ++i) sum += _cvtsh_ss(x[i]) * y[i];
  return sum;
}

BLOOMERY_AVX2 void axpy_f16_avx2(float a, const uint16_t* x, float* y, int64_t n) {
  const __m256 scale = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(load_f16x8(x + i), scale, _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += a * _cvtsh_ss(x[i]);
}

BLOOMERY_AVX2 void round_f16_avx2(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
  }
  for (; i < n; ++i) x[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}

}  // namespace bloomery::quant
