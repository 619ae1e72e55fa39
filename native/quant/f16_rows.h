// Float queries against f16 rows: the inner loops of attention over an f16 KV cache. A
// kernel takes up to kQueryTile queries at once (the query heads that share one KV head,
// of one or more tokens). Each tier has its kernels: a scalar reference, and AVX2 + F16C and
// AVX-512 ones that sum in the order of llama.cpp's attention products on a host of that tier
// (ggml_vec_dot_f16, float_dot.h), so that scores and outputs round as llama.cpp's do. The
// result of one (query, row) pair never depends on the other queries passed with it, so a
// prompt in one pass and one token at a time give the same attention bit for bit.
#pragma once

#include <cstdint>

#include "quant/kernels.h"

namespace bloomery::quant {

// Queries one kernel call takes at most.
constexpr int kQueryTile = 8;

// scores[q][j] = scale * sum_i rows[j * row_stride + i] * queries[q][i], for j < count and
// q < query_count (<= kQueryTile), each of width d.
using F16ScoresFn = void (*)(const uint16_t* rows, int64_t row_stride, int64_t count, const float* const* queries,
                             int query_count, int64_t d, float scale, float* const* scores);
// out[q][i] = sum_j weights[q][j] * rows[j * row_stride + i] for i < d and q < query_count
// (<= kQueryTile): the scalar tier sums in j order from zero; the SIMD tiers as llama.cpp's
// dot over the cells of its transposed V cache (rows past `count` there have weight 0).
using F16WeightedSumFn = void (*)(const float* const* weights, int query_count, const uint16_t* rows,
                                  int64_t row_stride, int64_t count, int64_t d, float* const* out);

// x[i] = the f16 nearest x[i] (ties to even), as a float: the roundings of llama.cpp's graph.
using F16RoundFn = void (*)(float* x, int64_t n);

struct F16RowKernels {
  F16ScoresFn scores;
  F16WeightedSumFn weighted_sum;
  F16RoundFn round;
};

// The kernels for a CPU of `tier`.
const F16RowKernels& f16_row_kernels(SimdTier tier);

// The one-row kernels the scalar tier loops over.
float dot_f16_scalar(const uint16_t* x, const float* y, int64_t n);
void axpy_f16_scalar(float a, const uint16_t* x, float* y, int64_t n);
void round_f16_scalar(float* x, int64_t n);

void f16_scores_avx2(const uint16_t* rows, int64_t row_stride, int64_t count, const float* const* queries,
                     int query_count, int64_t d, float scale, float* const* scores);
void f16_weighted_sum_avx2(const float* const* weights, int query_count, const uint16_t* rows, int64_t row_stride,
                           int64_t count, int64_t d, float* const* out);
void round_f16_avx2(float* x, int64_t n);

void f16_scores_avx512(const uint16_t* rows, int64_t row_stride, int64_t count, const float* const* queries,
                       int query_count, int64_t d, float scale, float* const* scores);
void f16_weighted_sum_avx512(const float* const* weights, int query_count, const uint16_t* rows, int64_t row_stride,
                             int64_t count, int64_t d, float* const* out);
void round_f16_avx512(float* x, int64_t n);

}  // namespace bloomery::quant
