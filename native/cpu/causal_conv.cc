#include "cpu/causal_conv.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/swiglu.h"

namespace bloomery::cpu {

void causal_conv_silu(float* rows, int64_t n, int64_t stride, int64_t channels, int64_t kernel, const float* taps,
                      float* state) {
  const int64_t held = kernel - 1;
  std::vector<float> window(static_cast<size_t>(kernel));
  for (int64_t c = 0; c < channels; ++c) {
    float* s = state + c * held;
    const float* w = taps + c * kernel;
    std::copy_n(s, held, window.data());
    for (int64_t t = 0; t < n; ++t) {
      float& x = rows[t * stride + c];
      window[static_cast<size_t>(held)] = x;
      // ggml's order: the taps summed from the earliest input on, in float, each product fused
      // into the sum as its x86 build compiles the loop.
      float sum = 0.0f;
      for (int64_t k = 0; k < kernel; ++k) sum = std::fma(window[static_cast<size_t>(k)], w[k], sum);
      x = sum;
      std::copy(window.begin() + 1, window.end(), window.begin());
    }
    std::copy_n(window.data(), held, s);
  }
  // ggml's SiLU runs over each row of the convolution's output, with its tier's SIMD exp.
  for (int64_t t = 0; t < n; ++t) vec_silu(rows + t * stride, channels, rows + t * stride);
}

}  // namespace bloomery::cpu
