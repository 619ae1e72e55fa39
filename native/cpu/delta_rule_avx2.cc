// The AVX2 tier of the gated delta rule's token step (delta_rule.h): 8 floats a vector, the
// dots float_dot.h's (ggml_vec_dot_f32's order), the scaling and the updates multiplies and fused
// multiply-adds of the vector, as ggml_vec_scale_f32 and ggml_vec_mad_f32; past the last whole
// vector, one element at a time with the same roundings.
#include <cmath>

#include "cpu/avx2_math.h"
#include "cpu/delta_rule.h"
#include "quant/float_dot.h"

namespace bloomery::cpu {

BLOOMERY_CPU_AVX2 void delta_rule_token_avx2(float* s, int64_t dim, const DeltaRuleToken& t, float* delta) {
  const int64_t whole = dim & ~int64_t{7};
  const __m256 decay = _mm256_set1_ps(t.decay);
  for (int64_t j = 0; j < dim; ++j) {
    float* row = s + j * dim;
    for (int64_t i = 0; i < whole; i += 8) _mm256_storeu_ps(row + i, _mm256_mul_ps(_mm256_loadu_ps(row + i), decay));
    for (int64_t i = whole; i < dim; ++i) row[i] *= t.decay;
  }
  for (int64_t j = 0; j < dim; ++j) delta[j] = (t.v[j] - quant::dot_f32_avx2(s + j * dim, t.k, dim)) * t.beta;
  for (int64_t j = 0; j < dim; ++j) {
    float* row = s + j * dim;
    const __m256 d = _mm256_set1_ps(delta[j]);
    for (int64_t i = 0; i < whole; i += 8)
      _mm256_storeu_ps(row + i, _mm256_fmadd_ps(_mm256_loadu_ps(t.k + i), d, _mm256_loadu_ps(row + i)));
    for (int64_t i = whole; i < dim; ++i) row[i] = std::fma(t.k[i], delta[j], row[i]);
  }
  for (int64_t j = 0; j < dim; ++j) t.out[j] = quant::dot_f32_avx2(s + j * dim, t.q, dim) * t.scale;
}

}  // namespace bloomery::cpu
