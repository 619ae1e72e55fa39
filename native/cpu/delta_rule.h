// The gated delta rule of Gated DeltaNet (llama.cpp's ggml_gated_delta_net), one token after
// another: per value head, with a state S (head_dim x head_dim, row j for value element j),
//   S *= exp(g);  d = (v - S k) * beta;  S += d k^T;  o = (S q) / sqrt(head_dim)
// where q and k are the head's (L2-normed) query and key, g its decay (<= 0) and beta its
// write strength. The same step serves a prompt and a decode: llama.cpp's CPU backend runs
// prompts this way too (its fused op), so a prompt's rows round as its; the state's row dots are
// ggml_vec_dot_f32's (quant/float_dot.h).
#pragma once

#include <cstdint>

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

}  // namespace bloomery::cpu
