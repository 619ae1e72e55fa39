#include "cpu/delta_rule.h"

#include <cmath>
#include <vector>

#include "cpu/cpu_dispatch.h"

namespace bloomery::cpu {

namespace {

constexpr uint32_t kF32 = 0;  // ggml's type id of F32

}  // namespace

void gated_delta_rule(const DeltaRuleShape& shape, int64_t n, const float* q, const float* k, int64_t qk_stride,
                      const float* v, int64_t v_stride, const float* g, const float* beta, float* states, float* out,
                      int64_t out_stride, ThreadPool& pool) {
  const int64_t dim = shape.head_dim;
  const int64_t group = shape.v_heads / shape.k_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  // ggml_vec_dot_f32 at this host's tier, as llama.cpp's op sums each row of the state.
  const quant::VecDotFn dot = host_quant_kernels(kF32).vec_dot;
  pool.parallel_for(static_cast<size_t>(shape.v_heads), 1, [&](size_t begin, size_t end) {
    std::vector<float> delta(static_cast<size_t>(dim));
    for (auto h = static_cast<int64_t>(begin); h < static_cast<int64_t>(end); ++h) {
      const int64_t kh = shape.grouped_heads ? h / group : h % shape.k_heads;
      float* s = states + h * dim * dim;
      for (int64_t t = 0; t < n; ++t) {
        const float* qt = q + t * qk_stride + kh * dim;
        const float* kt = k + t * qk_stride + kh * dim;
        const float* vt = v + t * v_stride + h * dim;
        const float decay = std::exp(g[t * shape.v_heads + h]);
        const float b = beta[t * shape.v_heads + h];
        for (int64_t i = 0; i < dim * dim; ++i) s[i] *= decay;
        for (int64_t j = 0; j < dim; ++j) delta[j] = (vt[j] - dot(s + j * dim, kt, dim)) * b;
        for (int64_t j = 0; j < dim; ++j) {
          float* row = s + j * dim;
          for (int64_t i = 0; i < dim; ++i) row[i] = std::fma(kt[i], delta[j], row[i]);
        }
        float* o = out + t * out_stride + h * dim;
        for (int64_t j = 0; j < dim; ++j) o[j] = dot(s + j * dim, qt, dim) * scale;
      }
    }
  });
}

}  // namespace bloomery::cpu
