// AVX2 + F16C kernels of f16_rows.h, in the order of llama.cpp's attention on an AVX2 host:
// each score is ggml_vec_dot_f16 of the cached row and the query (float_dot.h), and each
// element of a weighted sum is ggml_vec_dot_f16 over the cells, which llama.cpp runs on its
// transposed V cache: the row weights of cell j go to partial sum j % 32 (lane j % 8 of
// accumulator (j / 8) % 4), and the 32 partial sums are folded and summed as that dot's.
#include <immintrin.h>

#include <algorithm>

#include "quant/f16_rows.h"
#include "quant/float_dot.h"

#define BLOOMERY_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace bloomery::quant {

namespace {

constexpr int kPartials = 32;

// The lanes of the 8-element chunk at `offset` of a row of width d that lie inside it.
BLOOMERY_AVX2 inline __m256i lanes_inside(int64_t offset, int64_t d) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(d - offset)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

BLOOMERY_AVX2 inline __m256 load_f16_chunk(const uint16_t* x, int64_t offset, int64_t d) {
  if (offset + 8 <= d) return load8(x + offset);
  alignas(16) uint16_t tail[8] = {};
  std::copy(x + offset, x + d, tail);
  return load8(tail);
}

// out = the partial sums of one chunk of eight elements folded and summed as the last steps of
// ggml's AVX2 dot: (a0 + a2) + (a1 + a3) per lane, then the lanes by two hadds.
BLOOMERY_AVX2 inline __m256 sum_partials(const __m256* p) {
  __m256 lanes[8];
  for (int l = 0; l < 8; ++l) {
    lanes[l] = _mm256_add_ps(_mm256_add_ps(p[l], p[16 + l]), _mm256_add_ps(p[8 + l], p[24 + l]));
  }
  __m256 quads[4];
  for (int m = 0; m < 4; ++m) quads[m] = _mm256_add_ps(lanes[m], lanes[m + 4]);
  return _mm256_add_ps(_mm256_add_ps(quads[0], quads[1]), _mm256_add_ps(quads[2], quads[3]));
}

}  // namespace

BLOOMERY_AVX2 void f16_scores_avx2(const uint16_t* rows, int64_t row_stride, int64_t count, const float* const* queries,
                                   int query_count, int64_t d, float scale, float* const* scores) {
  for (int q = 0; q < query_count; ++q)
    for (int64_t j = 0; j < count; ++j) scores[q][j] = dot_f16_avx2(rows + j * row_stride, queries[q], d) * scale;
}

BLOOMERY_AVX2 void f16_weighted_sum_avx2(const float* const* weights, int query_count, const uint16_t* rows,
                                         int64_t row_stride, int64_t count, int64_t d, float* const* out) {
  for (int q = 0; q < query_count; ++q) {
    for (int64_t c = 0; c < d; c += 8) {
      __m256 partial[kPartials];
      for (__m256& p : partial) p = _mm256_setzero_ps();
      for (int64_t j = 0; j < count; ++j) {
        __m256& p = partial[j % kPartials];
        p = _mm256_fmadd_ps(load_f16_chunk(rows + j * row_stride, c, d), _mm256_set1_ps(weights[q][j]), p);
      }
      _mm256_maskstore_ps(out[q] + c, lanes_inside(c, d), sum_partials(partial));
    }
  }
}

BLOOMERY_AVX2 void round_f16_avx2(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
  }
  for (; i < n; ++i) x[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}

}  // namespace bloomery::quant
