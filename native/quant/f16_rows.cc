#include "quant/f16_rows.h"

#include <algorithm>

#include "quant/float_formats.h"

namespace bloomery::quant {

namespace {

// The scalar tier: one (query, row) dot at a time, one axpy per row.
template <float (*Dot)(const uint16_t*, const float*, int64_t)>
void scores_by_rows(const uint16_t* rows, int64_t row_stride, int64_t count, const float* const* queries,
                    int query_count, int64_t d, float scale, float* const* scores) {
  for (int q = 0; q < query_count; ++q)
    for (int64_t j = 0; j < count; ++j) scores[q][j] = Dot(rows + j * row_stride, queries[q], d) * scale;
}

template <void (*Axpy)(float, const uint16_t*, float*, int64_t)>
void weighted_sum_by_rows(const float* const* weights, int query_count, const uint16_t* rows, int64_t row_stride,
                          int64_t count, int64_t d, float* const* out) {
  for (int q = 0; q < query_count; ++q) {
    std::fill(out[q], out[q] + d, 0.0f);
    for (int64_t j = 0; j < count; ++j) Axpy(weights[q][j], rows + j * row_stride, out[q], d);
  }
}

}  // namespace

float dot_f16_scalar(const uint16_t* x, const float* y, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += fp16_to_fp32(x[i]) * y[i];
  return sum;
}

void axpy_f16_scalar(float a, const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * fp16_to_fp32(x[i]);
}

void round_f16_scalar(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
}

const F16RowKernels& f16_row_kernels(SimdTier tier) {
  static constexpr F16RowKernels kScalar{scores_by_rows<dot_f16_scalar>, weighted_sum_by_rows<axpy_f16_scalar>,
                                         round_f16_scalar};
  static constexpr F16RowKernels kAvx2{f16_scores_avx2, f16_weighted_sum_avx2, round_f16_avx2};
  static constexpr F16RowKernels kAvx512{f16_scores_avx512, f16_weighted_sum_avx512, round_f16_avx512};
  if (tier >= SimdTier::kAvx512) return kAvx512;
  return tier >= SimdTier::kAvx2 ? kAvx2 : kScalar;
}

}  // namespace bloomery::quant
