// The gated delta rule of Gated DeltaNet (llama.cpp's ggml_gated_delta_net), one token after
// another: per value head, with a state S (head_dim x head_dim, row j for value element j),
//   S *= exp(g);  d = (v - S k) * beta;  S += d k^T;  o = (S q) / sqrt(head_dim)
// where q and k are the head's (L2-normed) query and key, g its decay (<= 0) and beta its
// write strength. The same step serves a prompt and a decode: llama.cpp's CPU backend runs
// prompts this way too (its fused op), so a prompt's rows round as its; the state's row dots are
// ggml_vec_dot_f32's (quant/float_dot.h).
#pragma once

#include <cstdint>

#include "base/arch.h"
#include "cpu/thread_pool.h"

namespace bloomery::cpu {

struct DeltaRuleShape {
  int64_t k_heads = 0;
  int64_t v_heads = 0;
  int64_t head_dim = 0;
  bool grouped_heads = false;  // value head h reads key head h / (v_heads / k_heads); else h % k_heads
};

// Runs n tokens through the rule. Token t's queries and keys are at q + t * qk_stride and
// k + t * qk_stride (k_heads heads of head_dim), its values at v + t * v_stride, its decays and
// betas at g + t * v_heads and beta + t * v_heads; its output (v_heads heads) goes to
// out + t * out_stride. `states` holds v_heads states, updated in place. The heads run on `pool`.
void gated_delta_rule(const DeltaRuleShape& shape, int64_t n, const float* q, const float* k, int64_t qk_stride,
                      const float* v, int64_t v_stride, const float* g, const float* beta, float* states, float* out,
                      int64_t out_stride, ThreadPool& pool);

// One token through one head's state `s` (dim x dim): decay, delta (`delta`: dim floats of
// scratch), update and output, as ggml_gated_delta_net's CPU op steps: the scaling a
// ggml_vec_scale_f32, each row's update a ggml_vec_mad_f32 (fused multiply-adds), each dot a
// ggml_vec_dot_f32. The tiers: the host's float dot one call a row (scalar), and the AVX2 and
// AVX-512 forms of all four, whose rounding is the same.
struct DeltaRuleToken {
  const float* q;
  const float* k;
  const float* v;
  float decay;  // exp(g)
  float beta;
  float scale;  // 1 / sqrt(dim)
  float* out;
};
void delta_rule_token_scalar(float* s, int64_t dim, const DeltaRuleToken& token, float* delta);
#if BLOOMERY_X86_SIMD
void delta_rule_token_avx2(float* s, int64_t dim, const DeltaRuleToken& token, float* delta);
void delta_rule_token_avx512(float* s, int64_t dim, const DeltaRuleToken& token, float* delta);
#else
inline constexpr void (*delta_rule_token_avx2)(float*, int64_t, const DeltaRuleToken&, float*) = nullptr;
inline constexpr void (*delta_rule_token_avx512)(float*, int64_t, const DeltaRuleToken&, float*) = nullptr;
#endif

}  // namespace bloomery::cpu
