// The AVX2 tier of the causal convolution's token step (causal_conv.h): 8 channels a vector,
// the taps' products fused into each sum in order; the last channels one at a time, likewise.
#include <cmath>

#include "cpu/avx2_math.h"
#include "cpu/causal_conv.h"

namespace bloomery::cpu {

BLOOMERY_CPU_AVX2 void conv_token_avx2(const float* const* inputs, const float* taps_by_tap, int64_t kernel,
                                       int64_t channels, float* out) {
  const int64_t whole = channels & ~int64_t{7};
  for (int64_t c = 0; c < whole; c += 8) {
    __m256 sum = _mm256_setzero_ps();
    for (int64_t k = 0; k < kernel; ++k) {
      sum = _mm256_fmadd_ps(_mm256_loadu_ps(inputs[k] + c), _mm256_loadu_ps(taps_by_tap + k * channels + c), sum);
    }
    _mm256_storeu_ps(out + c, sum);
  }
  for (int64_t c = whole; c < channels; ++c) {
    float sum = 0.0f;
    for (int64_t k = 0; k < kernel; ++k) sum = std::fma(inputs[k][c], taps_by_tap[k * channels + c], sum);
    out[c] = sum;
  }
}

}  // namespace bloomery::cpu
