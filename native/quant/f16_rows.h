// Float queries against f16 rows: the inner loops of attention over an f16 KV cache. A
// kernel takes up to kQueryTile queries at once (the query heads that share one KV head,
// of one or more tokens), so each cached row is read and converted once for all of them.
// Each tier has its kernels: a scalar reference, AVX2 + F16C (one row at a time, the
// hardware conversion in place of fp16_to_fp32's bit-twiddling) and AVX-512. The result
// of one (query, row) pair never depends on the other queries passed with it, so a prompt
// in one pass and one token at a time give the same attention bit for bit.
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
// (<= kQueryTile), summed in j order from zero with fused multiply-adds (float).
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

// The one-row kernels the scalar and AVX2 tiers loop over.
float dot_f16_scalar(const uint16_t* x, const float* y, int64_t n);
void axpy_f16_scalar(float a, const uint16_t* x, float* y, int64_t n);
float dot_f16_avx2(const uint16_t* x, const float* y, int64_t n);
void axpy_f16_avx2(float a, const uint16_t* x, float* y, int64_t n);
void round_f16_scalar(float* x, int64_t n);
void round_f16_avx2(float* x, int64_t n);

void f16_scores_avx512(const uint16_t* rows, int64_t row_stride, int64_t count, const float* const* queries,
                       int query_count, int64_t d, float scale, float* const* scores);
void f16_weighted_sum_avx512(const float* const* weights, int query_count, const uint16_t* rows, int64_t row_stride,
                             int64_t count, int64_t d, float* const* out);
void round_f16_avx512(float* x, int64_t n);

}  // namespace bloomery::quant
