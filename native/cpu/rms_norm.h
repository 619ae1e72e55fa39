// RMS normalization, as ggml computes it: the mean square summed in double, the row
// scaled by 1/sqrt(mean + eps), then multiplied by the weight.
#pragma once

#include <cstdint>

namespace bloomery::cpu {

// Normalizes `rows` rows of `n` floats (row strides `in_stride` and `out_stride`); `out` may be `x`.
void rms_norm(const float* x, int64_t rows, int64_t n, int64_t in_stride, const float* weight, float eps, float* out,
              int64_t out_stride);

}  // namespace bloomery::cpu
