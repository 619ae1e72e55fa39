// RMS normalization, as ggml computes it: the squares (in float) summed in double, the row
// scaled by 1/sqrt(mean + eps), then multiplied by the weight.
#pragma once

#include <cstdint>

#include "base/arch.h"

namespace bloomery::cpu {

// Normalizes `rows` rows of `n` floats (row strides `in_stride` and `out_stride`); `out` may be `x`.
// A null `weight`: the normalized rows alone (ggml_rms_norm without the product).
void rms_norm(const float* x, int64_t rows, int64_t n, int64_t in_stride, const float* weight, float eps, float* out,
              int64_t out_stride);

// L2 normalization (ggml_l2_norm): each of `rows` rows of `n` floats (`stride` apart) scaled in
// place by 1 / max(|x|, eps), the squares summed in double as rms_norm's.
void l2_norm(float* x, int64_t rows, int64_t n, int64_t stride, float eps);

// Layer normalization (ggml_norm, then the weight and the bias as separate ops): each of `rows`
// rows of `n` floats (`stride` apart), in place: its mean (summed in double) subtracted, scaled
// by 1/sqrt(variance + eps) (the squares summed in double), times `weight`, plus `bias`.
void layer_norm(float* x, int64_t rows, int64_t n, int64_t stride, const float* weight, const float* bias, float eps);

// The sum of x[i]^2 (each square rounded to float) in double: the one reduction of a row,
// per tier (the scalar loop, and AVX-512).
double sum_of_squares_scalar(const float* x, int64_t n);
#if BLOOMERY_X86_SIMD
double sum_of_squares_avx512(const float* x, int64_t n);
#else
inline constexpr double (*sum_of_squares_avx512)(const float*, int64_t) = nullptr;
#endif

}  // namespace bloomery::cpu
