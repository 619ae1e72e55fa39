// AVX-512 helpers of the CPU ops' AVX-512 kernels (softmax, SwiGLU, RMS norm): e^x on sixteen
// floats, rounded as llama.cpp's CPU backend rounds it, and the lane mask of a row's last chunk.
// Include only from code compiled for the AVX-512 tier (BLOOMERY_CPU_AVX512 functions).
#pragma once

#include <immintrin.h>

#define BLOOMERY_CPU_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

namespace bloomery::cpu {

// e^x with the arithmetic of ggml's AVX-512 expf (Arm's optimized-routines polynomial): x = n ln2
// + b with n rounded through the 1.5 * 2^23 shift, e^b by a degree-5 polynomial in b and b^2,
// then scaled by 2^n. The same operations in the same order give the same bits, so softmax
// weights and SiLU outputs equal llama.cpp's on an AVX-512 host (within 2 ulp of std::exp).
// |n| > 192 (x beyond about +-133) gives infinity or 0; NaN stays NaN.
BLOOMERY_CPU_AVX512 inline __m512 exp_avx512(__m512 x) {
  const __m512 shift = _mm512_set1_ps(0x1.8p23f);
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), shift);
  const __m512 n = _mm512_sub_ps(z, shift);
  const __m512 b =
      _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f), _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
  const __m512 b2 = _mm512_mul_ps(b, b);
  const __m512 high =
      _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), b2,
                      _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f)));
  const __m512 poly =
      _mm512_fmadd_ps(high, b2, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
  const __m512 scaled = _mm512_scalef_ps(poly, n);
  const __mmask16 out_of_range = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192.0f), _CMP_GT_OQ);
  if (out_of_range == 0) return scaled;
  const __mmask16 below = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ);
  const __m512 limit = _mm512_mask_blend_ps(below, _mm512_set1_ps(__builtin_inff()), _mm512_setzero_ps());
  return _mm512_mask_blend_ps(out_of_range, scaled, limit);
}

// x / (1 + e^-x), as ggml's AVX-512 SiLU.
BLOOMERY_CPU_AVX512 inline __m512 silu_avx512(__m512 x) {
  const __m512 e = exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), x));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

// The lanes of the 16-float chunk at `offset` of n floats that lie inside them.
BLOOMERY_CPU_AVX512 inline __mmask16 tail_mask(int64_t offset, int64_t n) {
  const int64_t left = n - offset;
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
}

}  // namespace bloomery::cpu
