// The AVX-512 tier of the causal convolution's token step (causal_conv.h): 16 channels a vector,
// the taps' products fused into each sum in order; the last channels one at a time, likewise.
#include <cmath>

#include "cpu/avx512_math.h"
#include "cpu/causal_conv.h"

// GCC 12's AVX-512 intrinsics build their "undefined" operands by self-initialization,
// which -Wuninitialized reports wherever they inline under a target attribute.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace bloomery::cpu {

BLOOMERY_CPU_AVX512 void conv_token_avx512(const float* const* inputs, const float* taps_by_tap, int64_t kernel,
                                           int64_t channels, float* out) {
  const int64_t whole = channels & ~int64_t{15};
  for (int64_t c = 0; c < whole; c += 16) {
    __m512 sum = _mm512_setzero_ps();
    for (int64_t k = 0; k < kernel; ++k) {
      sum = _mm512_fmadd_ps(_mm512_loadu_ps(inputs[k] + c), _mm512_loadu_ps(taps_by_tap + k * channels + c), sum);
    }
    _mm512_storeu_ps(out + c, sum);
  }
  for (int64_t c = whole; c < channels; ++c) {
    float sum = 0.0f;
    for (int64_t k = 0; k < kernel; ++k) sum = std::fma(inputs[k][c], taps_by_tap[k * channels + c], sum);
    out[c] = sum;
  }
}

}  // namespace bloomery::cpu
