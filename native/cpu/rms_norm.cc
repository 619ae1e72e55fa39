#include "cpu/rms_norm.h"

#include <cmath>

#include "cpu/cpu_dispatch.h"

namespace bloomery::cpu {

double sum_of_squares_scalar(const float* x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  return sum;
}

void rms_norm(const float* x, int64_t rows, int64_t n, int64_t in_stride, const float* weight, float eps, float* out,
              int64_t out_stride) {
  static const auto sum_of_squares =
      host_simd_tier() >= quant::SimdTier::kAvx512 ? sum_of_squares_avx512 : sum_of_squares_scalar;
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * in_stride;
    float* y = out + r * out_stride;
    const float mean = static_cast<float>(sum_of_squares(in, n) / static_cast<double>(n));
    const float scale = 1.0f / std::sqrt(mean + eps);
    if (!weight) {
      for (int64_t i = 0; i < n; ++i) y[i] = in[i] * scale;
      continue;
    }
    for (int64_t i = 0; i < n; ++i) y[i] = (in[i] * scale) * weight[i];
  }
}

void layer_norm(float* x, int64_t rows, int64_t n, int64_t stride, const float* weight, const float* bias, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * stride;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += row[i];
    const float mean = static_cast<float>(sum) / static_cast<float>(n);
    double squares = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      row[i] -= mean;
      squares += row[i] * row[i];
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(squares / static_cast<double>(n)) + eps);
    // Separate ops in ggml: each product rounds before the bias is added.
    for (int64_t i = 0; i < n; ++i) {
      const float scaled = row[i] * scale;
      row[i] = static_cast<float>(static_cast<double>(scaled) * weight[i]) + bias[i];
    }
  }
}

void l2_norm(float* x, int64_t rows, int64_t n, int64_t stride, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * stride;
    // ggml takes sqrtf of the double sum: rounded to float first.
    const float scale = 1.0f / std::fmax(std::sqrt(static_cast<float>(sum_of_squares_scalar(row, n))), eps);
    for (int64_t i = 0; i < n; ++i) row[i] *= scale;
  }
}

}  // namespace bloomery::cpu
