// AVX-512 helpers of the CPU ops' AVX-512 kernels (softmax, SwiGLU, RMS norm): e^x on
// sixteen floats, within two ulp of std::exp over the float range (tested) at about a
// tenth of its cost, and the lane mask of a row's last chunk. Include only from code
// compiled for the AVX-512 tier (BLOOMERY_CPU_AVX512 functions).
#pragma once

#include <immintrin.h>

#define BLOOMERY_CPU_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

namespace bloomery::cpu {

// x = k ln2 + r with k an integer and |r| <= ln2 / 2 (ln2 split in two so k ln2 is exact),
// e^r by its Taylor series to r^7 (error below 1e-8 relative), then scaled by 2^k. Inputs
// below -104 give 0, above 89 infinity; NaN stays NaN.
BLOOMERY_CPU_AVX512 inline __m512 exp_avx512(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.4286068202862268e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, k);
}

// The lanes of the 16-float chunk at `offset` of n floats that lie inside them.
BLOOMERY_CPU_AVX512 inline __mmask16 tail_mask(int64_t offset, int64_t n) {
  const int64_t left = n - offset;
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
}

}  // namespace bloomery::cpu
