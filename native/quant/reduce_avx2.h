// The horizontal sum of an AVX2 float vector, shared by the AVX2 and AVX-512 kernels that
// keep llama.cpp's x86 summation order (its hsum_float_8): a dot whose last step goes
// through this gives the same bits on both tiers. Include only from SIMD-tier code.
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

}  // namespace bloomery::quant
