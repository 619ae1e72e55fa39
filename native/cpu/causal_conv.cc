#include "cpu/causal_conv.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/cpu_dispatch.h"
#include "cpu/swiglu.h"

namespace bloomery::cpu {

void conv_token_scalar(const float* const* inputs, const float* taps_by_tap, int64_t kernel, int64_t channels,
                       float* out) {
  for (int64_t c = 0; c < channels; ++c) {
    float sum = 0.0f;
    for (int64_t k = 0; k < kernel; ++k) sum = std::fma(inputs[k][c], taps_by_tap[k * channels + c], sum);
    out[c] = sum;
  }
}

ConvToken host_conv_token() {
  static const ConvToken conv_token = [] {
    const quant::SimdTier tier = host_simd_tier();
    if (tier >= quant::SimdTier::kAvx512) return conv_token_avx512;
    return tier >= quant::SimdTier::kAvx2 ? conv_token_avx2 : conv_token_scalar;
  }();
  return conv_token;
}

void causal_conv_silu(float* rows, int64_t n, int64_t stride, int64_t channels, int64_t kernel, const float* taps,
                      float* state, ConvToken conv_token) {
  const int64_t held = kernel - 1;
  // Token-major copies: the held inputs (the state's), their successors after these rows, and
  // the taps by tap, so that a token's outputs are a few vectors of every channel at once.
  std::vector<float> before(static_cast<size_t>(held * channels)), after(before.size());
  std::vector<float> taps_by_tap(static_cast<size_t>(kernel * channels));
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t k = 0; k < held; ++k) before[k * channels + c] = state[c * held + k];
    for (int64_t k = 0; k < kernel; ++k) taps_by_tap[k * channels + c] = taps[c * kernel + k];
  }
  const auto input = [&](int64_t i) {  // the input at row i of these, i < 0 for the held ones
    return i >= 0 ? rows + i * stride : before.data() + (held + i) * channels;
  };
  for (int64_t k = 0; k < held; ++k) std::copy_n(input(n - held + k), channels, after.data() + k * channels);
  // The last token first: a token's output overwrites only its own input, which no earlier token reads.
  std::vector<const float*> inputs(static_cast<size_t>(kernel));
  for (int64_t t = n - 1; t >= 0; --t) {
    for (int64_t k = 0; k < kernel; ++k) inputs[static_cast<size_t>(k)] = input(t - held + k);
    conv_token(inputs.data(), taps_by_tap.data(), kernel, channels, rows + t * stride);
  }
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t k = 0; k < held; ++k) state[c * held + k] = after[k * channels + c];
  }
  // ggml's SiLU runs over each row of the convolution's output, with its tier's SIMD exp.
  for (int64_t t = 0; t < n; ++t) vec_silu(rows + t * stride, channels, rows + t * stride);
}

}  // namespace bloomery::cpu
