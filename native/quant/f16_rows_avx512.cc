// AVX-512 kernels of f16_rows.h: sixteen elements per conversion, every cached row converted
// once for all the queries of a call, and the scores of eight queries reduced together.
#include <immintrin.h>

#include <algorithm>

#include "quant/f16_rows.h"
#include "quant/reduce_avx512.h"

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define BLOOMERY_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

namespace bloomery::quant {

namespace {

static_assert(kQueryTile == 8, "the scores of a tile are reduced by sum_each_of_8");

// The lanes of the 16-element chunk at `offset` of a row of width d that lie inside it.
BLOOMERY_AVX512 inline __mmask16 chunk_mask(int64_t offset, int64_t d) {
  const int64_t left = d - offset;
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
}

BLOOMERY_AVX512 inline __m512 load_f16x16(const uint16_t* x, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x));
}

template <int Q>
BLOOMERY_AVX512 void weighted_sum_tile(const float* const* weights, const uint16_t* rows, int64_t row_stride,
                                       int64_t count, int64_t d, float* const* out) {
  for (int64_t c = 0; c < d; c += 16) {
    const __mmask16 m = chunk_mask(c, d);
    __m512 acc[Q];
    for (int q = 0; q < Q; ++q) acc[q] = _mm512_setzero_ps();
    for (int64_t j = 0; j < count; ++j) {
      const __m512 v = load_f16x16(rows + j * row_stride + c, m);
      for (int q = 0; q < Q; ++q) acc[q] = _mm512_fmadd_ps(_mm512_set1_ps(weights[q][j]), v, acc[q]);
    }
    for (int q = 0; q < Q; ++q) _mm512_mask_storeu_ps(out[q] + c, m, acc[q]);
  }
}

}  // namespace

BLOOMERY_AVX512 void f16_scores_avx512(const uint16_t* rows, int64_t row_stride, int64_t count,
                                       const float* const* queries, int query_count, int64_t d, float scale,
                                       float* const* scores) {
  // Missing queries repeat the last one; their scores are dropped.
  const float* q[kQueryTile];
  for (int i = 0; i < kQueryTile; ++i) q[i] = queries[std::min(i, query_count - 1)];
  const __m256 scale8 = _mm256_set1_ps(scale);
  for (int64_t j = 0; j < count; ++j) {
    const uint16_t* row = rows + j * row_stride;
    __m512 acc[kQueryTile];
    for (int i = 0; i < kQueryTile; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t c = 0; c < d; c += 16) {
      const __mmask16 m = chunk_mask(c, d);
      const __m512 k = load_f16x16(row + c, m);
      for (int i = 0; i < kQueryTile; ++i) acc[i] = _mm512_fmadd_ps(k, _mm512_maskz_loadu_ps(m, q[i] + c), acc[i]);
    }
    alignas(32) float sums[kQueryTile];
    _mm256_store_ps(sums, _mm256_mul_ps(sum_each_of_8(acc), scale8));
    for (int i = 0; i < query_count; ++i) scores[i][j] = sums[i];
  }
}

BLOOMERY_AVX512 void f16_weighted_sum_avx512(const float* const* weights, int query_count, const uint16_t* rows,
                                             int64_t row_stride, int64_t count, int64_t d, float* const* out) {
  using Tile = void (*)(const float* const*, const uint16_t*, int64_t, int64_t, int64_t, float* const*);
  static constexpr Tile kTiles[kQueryTile] = {weighted_sum_tile<1>, weighted_sum_tile<2>, weighted_sum_tile<3>,
                                              weighted_sum_tile<4>, weighted_sum_tile<5>, weighted_sum_tile<6>,
                                              weighted_sum_tile<7>, weighted_sum_tile<8>};
  kTiles[query_count - 1](weights, rows, row_stride, count, d, out);
}

BLOOMERY_AVX512 void round_f16_avx512(float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = chunk_mask(i, n);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)));
  }
}

}  // namespace bloomery::quant
