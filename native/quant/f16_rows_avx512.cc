// AVX-512 kernels of f16_rows.h, in the order of llama.cpp's attention on an AVX-512 host:
// each score is ggml_vec_dot_f16 of the cached row and the query (float_dot.h), and each
// element of a weighted sum is ggml_vec_dot_f16 over the cells, which llama.cpp runs on its
// transposed V cache: the row weights of cell j go to partial sum j % 64 (lane j % 16 of
// accumulator (j / 16) % 4), and the 64 partial sums are folded and summed as that dot's. Every
// cached row is converted once for all the queries of a call.
#include <immintrin.h>

#include <algorithm>

#include "quant/f16_rows.h"
#include "quant/float_dot.h"
#include "quant/reduce_avx512.h"

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define BLOOMERY_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

namespace bloomery::quant {

namespace {

static_assert(kQueryTile == 8, "the scores of a tile are reduced by sum_each_of_8");
constexpr int kPartials = 64;

// The lanes of the 16-element chunk at `offset` of a row of width d that lie inside it.
BLOOMERY_AVX512 inline __mmask16 chunk_mask(int64_t offset, int64_t d) {
  const int64_t left = d - offset;
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
}

BLOOMERY_AVX512 inline __m512 load_f16x16(const uint16_t* x, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x));
}

// The 64 partial sums of one chunk of sixteen elements folded and summed as the last steps of
// ggml's AVX-512 dot: (a0 + a2) + (a1 + a3) per lane, then the lanes as _mm512_reduce_add_ps
// adds them (halves, quarters, then (x0 + x2) + (x1 + x3)).
BLOOMERY_AVX512 inline __m512 sum_partials(const __m512* p) {
  __m512 lanes[16];
  for (int l = 0; l < 16; ++l) {
    lanes[l] = _mm512_add_ps(_mm512_add_ps(p[l], p[32 + l]), _mm512_add_ps(p[16 + l], p[48 + l]));
  }
  for (int l = 0; l < 8; ++l) lanes[l] = _mm512_add_ps(lanes[l], lanes[l + 8]);
  for (int l = 0; l < 4; ++l) lanes[l] = _mm512_add_ps(lanes[l], lanes[l + 4]);
  return _mm512_add_ps(_mm512_add_ps(lanes[0], lanes[2]), _mm512_add_ps(lanes[1], lanes[3]));
}

// Partial sum p takes cells p, p + 64, ... in that order, so it is walked partial by partial: the
// Q queries' sums of one partial stay in registers over its cells, where a walk cell by cell would
// load and store a partial at every cell. The same FMAs in the same order: the same bits.
template <int Q>
BLOOMERY_AVX512 void weighted_sum_tile(const float* const* weights, const uint16_t* rows, int64_t row_stride,
                                       int64_t count, int64_t d, float* const* out) {
  alignas(64) __m512 partial[Q][kPartials];
  for (int64_t c = 0; c < d; c += 16) {
    const __mmask16 m = chunk_mask(c, d);
    for (int p = 0; p < kPartials; ++p) {
      __m512 sum[Q];
      for (int q = 0; q < Q; ++q) sum[q] = _mm512_setzero_ps();
      for (int64_t j = p; j < count; j += kPartials) {
        const __m512 v = load_f16x16(rows + j * row_stride + c, m);
        for (int q = 0; q < Q; ++q) sum[q] = _mm512_fmadd_ps(v, _mm512_set1_ps(weights[q][j]), sum[q]);
      }
      for (int q = 0; q < Q; ++q) partial[q][p] = sum[q];
    }
    for (int q = 0; q < Q; ++q) _mm512_mask_storeu_ps(out[q] + c, m, sum_partials(partial[q]));
  }
}

// f16_scores_avx512 for rows of Steps whole 64-value steps (the common head widths 64 and 128):
// each row converted once into registers for the tile's queries, and the scores scaled in one
// vector. The same FMAs and additions as folded_steps_avx512 and the loop below: with no tail,
// the sum's trip through double returns it unchanged.
template <int Steps>
BLOOMERY_AVX512 void scores_of_whole_steps(const uint16_t* rows, int64_t row_stride, int64_t count,
                                           const float* const (&q)[kQueryTile], int query_count, float scale,
                                           float* const* scores) {
  const __m256 scales = _mm256_set1_ps(scale);
  for (int64_t j = 0; j < count; ++j) {
    const uint16_t* row = rows + j * row_stride;
    __m512 x[4 * Steps];
    for (int k = 0; k < 4 * Steps; ++k) x[k] = load16(row + 16 * k);
    __m512 folded[kQueryTile];
    for (int i = 0; i < kQueryTile; ++i) {
      __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
      for (int step = 0; step < Steps; ++step) {
        for (int a = 0; a < 4; ++a) {
          acc[a] = _mm512_fmadd_ps(x[4 * step + a], load16(q[i] + 64 * step + 16 * a), acc[a]);
        }
      }
      folded[i] = fold_4(acc);
    }
    alignas(32) float scaled[kQueryTile];
    _mm256_store_ps(scaled, _mm256_mul_ps(sum_each_of_8(folded), scales));
    for (int i = 0; i < query_count; ++i) scores[i][j] = scaled[i];
  }
}

}  // namespace

BLOOMERY_AVX512 void f16_scores_avx512(const uint16_t* rows, int64_t row_stride, int64_t count,
                                       const float* const* queries, int query_count, int64_t d, float scale,
                                       float* const* scores) {
  // Missing queries repeat the last one; their scores are dropped.
  const float* q[kQueryTile];
  for (int i = 0; i < kQueryTile; ++i) q[i] = queries[std::min(i, query_count - 1)];
  if (d == 64) return scores_of_whole_steps<1>(rows, row_stride, count, q, query_count, scale, scores);
  if (d == 128) return scores_of_whole_steps<2>(rows, row_stride, count, q, query_count, scale, scores);
  const int64_t steps_end = d & ~int64_t{63};
  for (int64_t j = 0; j < count; ++j) {
    const uint16_t* row = rows + j * row_stride;
    __m512 folded[kQueryTile];
    for (int i = 0; i < kQueryTile; ++i) folded[i] = folded_steps_avx512(row, q[i], d);
    alignas(32) float sums[kQueryTile];
    _mm256_store_ps(sums, sum_each_of_8(folded));
    for (int i = 0; i < query_count; ++i) {
      double sum = sums[i];
      for (int64_t e = steps_end; e < d; ++e) sum += f16_value(row[e]) * q[i][e];
      scores[i][j] = static_cast<float>(sum) * scale;
    }
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
