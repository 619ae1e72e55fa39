// Horizontal sums of AVX2 float vectors, shared by the AVX2 and AVX-512 kernels that keep
// llama.cpp's x86 summation orders: its quantized dots end with hsum_float_8 (sum_of_8), its
// float dots with two hadds (sum_of_8_by_hadd). A dot whose last step goes through the same
// one gives the same bits on both tiers. Include only from SIMD-tier code.
#pragma once

#include <immintrin.h>

#define BLOOMERY_REDUCE_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace bloomery::quant {

// ((x0 + x4) + (x2 + x6)) + ((x1 + x5) + (x3 + x7)).
BLOOMERY_REDUCE_AVX2 inline float sum_of_8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// (x0 + x2) + (x1 + x3): how llama.cpp's Q4_K dot sums its four-lane accumulator of mins.
BLOOMERY_REDUCE_AVX2 inline float sum_of_4(__m128 v) {
  const __m128 s = _mm_add_ps(v, _mm_movehl_ps(v, v));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// ((x0 + x4) + (x1 + x5)) + ((x2 + x6) + (x3 + x7)): the two hadds that end llama.cpp's float
// dots (ggml_vec_dot_f32 / _f16) on AVX2 hosts.
BLOOMERY_REDUCE_AVX2 inline float sum_of_8_by_hadd(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 pairs = _mm_hadd_ps(s, s);
  return _mm_cvtss_f32(_mm_hadd_ps(pairs, pairs));
}

// (a0 + a2) + (a1 + a3): how llama.cpp's float dots fold their four accumulators before the
// horizontal sum (GGML_F32_VEC_REDUCE).
BLOOMERY_REDUCE_AVX2 inline __m256 fold_4(const __m256* a) {
  return _mm256_add_ps(_mm256_add_ps(a[0], a[2]), _mm256_add_ps(a[1], a[3]));
}

}  // namespace bloomery::quant
