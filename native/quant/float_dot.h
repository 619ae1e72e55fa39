// llama.cpp's float dots on x86 (ggml_vec_dot_f32, ggml_vec_dot_f16), step for step, so that
// F32 and F16 weights and the attention scores over the f16 cache round as llama.cpp's do on
// a host of the same tier: four accumulators of one vector each over steps of four vectors
// (element i in accumulator (i / lanes) % 4, lane i % lanes), folded by fold_4 and summed
// horizontally (AVX-512: _mm512_reduce_add_ps; AVX2: two hadds). The elements past the last
// whole step are added one at a time: in float for F32 (each product rounded to float first, not
// fused: product_f32), in double for F16 (whose products are exact in float). Include only from SIMD-tier code; call
// each tier's functions only from code compiled for that tier.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "quant/float_formats.h"
#include "quant/reduce_avx2.h"
#include "quant/reduce_avx512.h"

#define BLOOMERY_FLOAT_DOT_AVX2 __attribute__((target("avx2,fma,f16c")))
#define BLOOMERY_FLOAT_DOT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

namespace bloomery::quant {

// x * y rounded to float, never fused into a following addition: the product of two floats is
// exact in double, so its conversion rounds once.
inline float product_f32(float x, float y) { return static_cast<float>(static_cast<double>(x) * y); }

// An f16 operand, as f16 bits or as the float it converts to (exactly).
inline float f16_value(uint16_t h) { return fp16_to_fp32(h); }
inline float f16_value(float x) { return x; }

BLOOMERY_FLOAT_DOT_AVX2 inline __m256 load8(const float* x) { return _mm256_loadu_ps(x); }
BLOOMERY_FLOAT_DOT_AVX2 inline __m256 load8(const uint16_t* x) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
}
BLOOMERY_FLOAT_DOT_AVX512 inline __m512 load16(const float* x) { return _mm512_loadu_ps(x); }
BLOOMERY_FLOAT_DOT_AVX512 inline __m512 load16(const uint16_t* x) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
}

// The whole steps of x . y, folded: the vector whose horizontal sum is the dot of elements
// [0, n & ~31) (AVX2) or [0, n & ~63) (AVX-512).
template <typename X, typename Y>
BLOOMERY_FLOAT_DOT_AVX2 inline __m256 folded_steps_avx2(const X* x, const Y* y, int64_t n) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    for (int a = 0; a < 4; ++a) acc[a] = _mm256_fmadd_ps(load8(x + i + 8 * a), load8(y + i + 8 * a), acc[a]);
  }
  return fold_4(acc);
}

template <typename X, typename Y>
BLOOMERY_FLOAT_DOT_AVX512 inline __m512 folded_steps_avx512(const X* x, const Y* y, int64_t n) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  for (int64_t i = 0; i + 64 <= n; i += 64) {
    for (int a = 0; a < 4; ++a) acc[a] = _mm512_fmadd_ps(load16(x + i + 16 * a), load16(y + i + 16 * a), acc[a]);
  }
  return fold_4(acc);
}

BLOOMERY_FLOAT_DOT_AVX2 inline float dot_f32_avx2(const float* x, const float* y, int64_t n) {
  float sum = sum_of_8_by_hadd(folded_steps_avx2(x, y, n));
  for (int64_t i = n & ~int64_t{31}; i < n; ++i) sum += product_f32(x[i], y[i]);
  return sum;
}

BLOOMERY_FLOAT_DOT_AVX512 inline float dot_f32_avx512(const float* x, const float* y, int64_t n) {
  float sum = _mm512_reduce_add_ps(folded_steps_avx512(x, y, n));
  for (int64_t i = n & ~int64_t{63}; i < n; ++i) sum += product_f32(x[i], y[i]);
  return sum;
}

// x: f16 bits; y: f16 values (bits, or the floats they convert to).
template <typename Y>
BLOOMERY_FLOAT_DOT_AVX2 inline float dot_f16_avx2(const uint16_t* x, const Y* y, int64_t n) {
  double sum = sum_of_8_by_hadd(folded_steps_avx2(x, y, n));
  for (int64_t i = n & ~int64_t{31}; i < n; ++i) sum += f16_value(x[i]) * f16_value(y[i]);
  return static_cast<float>(sum);
}

template <typename Y>
BLOOMERY_FLOAT_DOT_AVX512 inline float dot_f16_avx512(const uint16_t* x, const Y* y, int64_t n) {
  double sum = _mm512_reduce_add_ps(folded_steps_avx512(x, y, n));
  for (int64_t i = n & ~int64_t{63}; i < n; ++i) sum += f16_value(x[i]) * f16_value(y[i]);
  return static_cast<float>(sum);
}

}  // namespace bloomery::quant
