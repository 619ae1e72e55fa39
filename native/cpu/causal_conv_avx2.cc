// The AVX2 tier of the causal convolution's token step (causal_conv.h): 8 channels a vector, the
// taps summed in the order of llama.cpp's AVX2 build (its haswell CPU variant, GCC 11), which
// vectorizes ggml_ssm_conv's loop over the taps: the products of the first kernel & ~3 taps
// round on their own (a vector multiply, its lanes then added to the sum one by one), and only
// the last kernel % 4 taps' products are fused into the sum. With the 4 taps of Qwen3-Next's and
// Qwen3.5's convolution, a channel's output is thus ((p0 + p1) + p2) + p3, each product rounded,
// where the AVX-512 build fuses all four (causal_conv_avx512.cc). The last channels one at a
// time, likewise.
#include <cmath>

#include "cpu/avx2_math.h"
#include "cpu/causal_conv.h"
#include "quant/float_dot.h"

namespace bloomery::cpu {

namespace {

// a * b rounded, kept out of the sum it is added to: the empty asm hides the product from the
// compiler, which would otherwise contract the multiply and the add into one fused multiply-add
// (one float at a time: quant::product_f32).
BLOOMERY_CPU_AVX2 inline __m256 rounded_product(__m256 a, __m256 b) {
  __m256 p = _mm256_mul_ps(a, b);
  __asm__("" : "+x"(p));
  return p;
}

}  // namespace

BLOOMERY_CPU_AVX2 void conv_token_avx2(const float* const* inputs, const float* taps_by_tap, int64_t kernel,
                                       int64_t channels, float* out) {
  const int64_t whole = channels & ~int64_t{7};
  const int64_t rounded = kernel & ~int64_t{3};  // the taps whose products round before they are added
  for (int64_t c = 0; c < whole; c += 8) {
    __m256 sum = _mm256_setzero_ps();
    for (int64_t k = 0; k < rounded; ++k) {
      sum = _mm256_add_ps(
          sum, rounded_product(_mm256_loadu_ps(inputs[k] + c), _mm256_loadu_ps(taps_by_tap + k * channels + c)));
    }
    for (int64_t k = rounded; k < kernel; ++k) {
      sum = _mm256_fmadd_ps(_mm256_loadu_ps(inputs[k] + c), _mm256_loadu_ps(taps_by_tap + k * channels + c), sum);
    }
    _mm256_storeu_ps(out + c, sum);
  }
  for (int64_t c = whole; c < channels; ++c) {
    float sum = 0.0f;
    for (int64_t k = 0; k < rounded; ++k) sum += quant::product_f32(inputs[k][c], taps_by_tap[k * channels + c]);
    for (int64_t k = rounded; k < kernel; ++k) sum = std::fma(inputs[k][c], taps_by_tap[k * channels + c], sum);
    out[c] = sum;
  }
}

}  // namespace bloomery::cpu
