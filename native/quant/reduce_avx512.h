// Horizontal sums of AVX-512 float vectors, shared by the AVX-512 kernels. Include only
// from code compiled for the AVX-512 tier.
#pragma once

#include <immintrin.h>

#define BLOOMERY_REDUCE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

namespace bloomery::quant {

// Two vectors side by side: 128-bit quarters 0+2 and 1+3 of each.
BLOOMERY_REDUCE_AVX512 inline __m512 add_halves(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
}

// Quarter k of the result: the four partial sums of vector k (a holds vectors 0, 1; b 2, 3).
BLOOMERY_REDUCE_AVX512 inline __m512 add_quarters(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xdd));
}

// Lane i = the sum of the sixteen lanes of v[i], for eight vectors at a third of the cost of
// eight _mm512_reduce_add_ps. Every vector goes through the same tree of additions as
// _mm512_reduce_add_ps's (halves, quarters, then (x0 + x2) + (x1 + x3)), so each lane equals
// that vector's _mm512_reduce_add_ps bit for bit, whatever the other seven hold.
BLOOMERY_REDUCE_AVX512 inline __m256 sum_each_of_8(const __m512* v) {
  const __m512 low = add_quarters(add_halves(v[0], v[1]), add_halves(v[2], v[3]));
  const __m512 high = add_quarters(add_halves(v[4], v[5]), add_halves(v[6], v[7]));
  const __m512 pairs = _mm512_add_ps(_mm512_unpacklo_ps(low, high), _mm512_unpackhi_ps(low, high));
  // Quarter k: [sum of v[k], sum of v[4 + k], (the same again)].
  const __m512 sums = _mm512_add_ps(pairs, _mm512_permute_ps(pairs, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castps512_ps256(_mm512_permutexvar_ps(order, sums));
}

// (a0 + a2) + (a1 + a3): how llama.cpp's float dots fold their four accumulators before
// _mm512_reduce_add_ps (GGML_F32_VEC_REDUCE).
BLOOMERY_REDUCE_AVX512 inline __m512 fold_4(const __m512* a) {
  return _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]));
}

}  // namespace bloomery::quant
