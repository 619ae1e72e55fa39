// AVX2 helpers of the CPU ops' AVX2 kernels (softmax, SwiGLU): e^x on eight floats, rounded as
// llama.cpp's CPU backend rounds it on an AVX2 host. Include only from code compiled for the
// AVX2 tier (BLOOMERY_CPU_AVX2 functions).
#pragma once

#include <immintrin.h>

#define BLOOMERY_CPU_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace bloomery::cpu {

// e^x with the arithmetic of ggml's AVX2 expf: the AVX-512 one's reduction and polynomial
// (avx512_math.h), but 2^n built in the exponent bits and applied as k + k * (e^b - 1), with
// a two-step scaling where |n| > 126 (the same bits as llama.cpp's on an AVX2 host).
BLOOMERY_CPU_AVX2 inline __m256 exp_avx2(__m256 x) {
  const __m256 shift = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), shift);
  const __m256 n = _mm256_sub_ps(z, shift);
  const __m256 b =
      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f), _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256i exponent = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
  const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(exponent, _mm256_castps_si256(_mm256_set1_ps(1.0f))));
  const __m256 abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
  const __m256 wide = _mm256_cmp_ps(abs_n, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
  const __m256 b2 = _mm256_mul_ps(b, b);
  const __m256 high =
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), b2,
                      _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f)));
  const __m256 poly = _mm256_fmadd_ps(high, b2, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));  // e^b - 1
  if (_mm256_movemask_ps(wide) == 0) return _mm256_fmadd_ps(poly, k, k);
  // 2^n as s1 * s2, each within the float range (s1 = 2^127 or 2^-125 by n's sign).
  const __m256i sign_bias = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                             _mm256_set1_epi32(static_cast<int>(0x82000000u)));
  const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(sign_bias, _mm256_set1_epi32(0x7f000000)));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(exponent, sign_bias));
  const __m256 overflow = _mm256_cmp_ps(abs_n, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
  const __m256 two_step = _mm256_mul_ps(_mm256_fmadd_ps(s2, poly, s2), s1);
  const __m256 in_range = _mm256_blendv_ps(_mm256_fmadd_ps(k, poly, k), two_step, wide);
  return _mm256_blendv_ps(in_range, _mm256_mul_ps(s1, s1), overflow);
}

// x / (1 + e^-x), as ggml's AVX2 SiLU.
BLOOMERY_CPU_AVX2 inline __m256 silu_avx2(__m256 x) {
  const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

}  // namespace bloomery::cpu
