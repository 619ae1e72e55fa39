// The AVX-512 tier of the gated delta rule's token step (delta_rule.h): 16 floats a vector, the
// dots float_dot.h's (ggml_vec_dot_f32's order), the scaling and the updates multiplies and fused
// multiply-adds of the vector, as ggml_vec_scale_f32 and ggml_vec_mad_f32; past the last whole
// vector, one element at a time with the same roundings.
#include <cmath>

#include "cpu/avx512_math.h"
#include "cpu/delta_rule.h"
#include "quant/float_dot.h"

// GCC 12's AVX-512 intrinsics build their "undefined" operands by self-initialization,
// which -Wuninitialized reports wherever they inline under a target attribute.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace bloomery::cpu {

BLOOMERY_CPU_AVX512 void delta_rule_token_avx512(float* s, int64_t dim, const DeltaRuleToken& t, float* delta) {
  const int64_t whole = dim & ~int64_t{15};
  const __m512 decay = _mm512_set1_ps(t.decay);
  for (int64_t j = 0; j < dim; ++j) {
    float* row = s + j * dim;
    for (int64_t i = 0; i < whole; i += 16) _mm512_storeu_ps(row + i, _mm512_mul_ps(_mm512_loadu_ps(row + i), decay));
    for (int64_t i = whole; i < dim; ++i) row[i] *= t.decay;
  }
  for (int64_t j = 0; j < dim; ++j) delta[j] = (t.v[j] - quant::dot_f32_avx512(s + j * dim, t.k, dim)) * t.beta;
  for (int64_t j = 0; j < dim; ++j) {
    float* row = s + j * dim;
    const __m512 d = _mm512_set1_ps(delta[j]);
    for (int64_t i = 0; i < whole; i += 16)
      _mm512_storeu_ps(row + i, _mm512_fmadd_ps(_mm512_loadu_ps(t.k + i), d, _mm512_loadu_ps(row + i)));
    for (int64_t i = whole; i < dim; ++i) row[i] = std::fma(t.k[i], delta[j], row[i]);
  }
  for (int64_t j = 0; j < dim; ++j) t.out[j] = quant::dot_f32_avx512(s + j * dim, t.q, dim) * t.scale;
}

}  // namespace bloomery::cpu
