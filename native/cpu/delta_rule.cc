#include "cpu/delta_rule.h"

#include <cmath>
#include <vector>

#include "cpu/cpu_dispatch.h"

namespace bloomery::cpu {

namespace {

constexpr uint32_t kF32 = 0;  // ggml's type id of F32

}  // namespace

void delta_rule_token_scalar(float* s, int64_t dim, const DeltaRuleToken& t, float* delta) {
  // ggml_vec_dot_f32 at this host's tier, as llama.cpp's op sums each row of the state.
  static const quant::VecDotFn dot = host_quant_kernels(kF32).vec_dot;
  for (int64_t i = 0; i < dim * dim; ++i) s[i] *= t.decay;
  for (int64_t j = 0; j < dim; ++j) delta[j] = (t.v[j] - dot(s + j * dim, t.k, dim)) * t.beta;
  for (int64_t j = 0; j < dim; ++j) {
    float* row = s + j * dim;
    for (int64_t i = 0; i < dim; ++i) row[i] = std::fma(t.k[i], delta[j], row[i]);
  }
  for (int64_t j = 0; j < dim; ++j) t.out[j] = dot(s + j * dim, t.q, dim) * t.scale;
}

void gated_delta_rule(const DeltaRuleShape& shape, int64_t n, const float* q, const float* k, int64_t qk_stride,
                      const float* v, int64_t v_stride, const float* g, const float* beta, float* states, float* out,
                      int64_t out_stride, ThreadPool& pool) {
  static const auto step = [] {
    const quant::SimdTier tier = host_simd_tier();
    if (tier >= quant::SimdTier::kAvx512) return delta_rule_token_avx512;
    return tier >= quant::SimdTier::kAvx2 ? delta_rule_token_avx2 : delta_rule_token_scalar;
  }();
  const int64_t dim = shape.head_dim;
  const int64_t group = shape.v_heads / shape.k_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  pool.parallel_for(static_cast<size_t>(shape.v_heads), 1, [&](size_t begin, size_t end) {
    std::vector<float> delta(static_cast<size_t>(dim));
    for (auto h = static_cast<int64_t>(begin); h < static_cast<int64_t>(end); ++h) {
      const int64_t kh = shape.grouped_heads ? h / group : h % shape.k_heads;
      float* s = states + h * dim * dim;
      for (int64_t t = 0; t < n; ++t) {
        const DeltaRuleToken token{q + t * qk_stride + kh * dim,  k + t * qk_stride + kh * dim,
                                   v + t * v_stride + h * dim,    std::exp(g[t * shape.v_heads + h]),
                                   beta[t * shape.v_heads + h],   scale,
                                   out + t * out_stride + h * dim};
        step(s, dim, token, delta.data());
      }
    }
  });
}

}  // namespace bloomery::cpu
