#include "engine/forward.h"

#include <cmath>

#include "cpu/attention.h"
#include "cpu/rms_norm.h"
#include "cpu/rope.h"
#include "cpu/swiglu.h"
#include "engine/cpu_experts.h"

namespace bloomery::engine {

namespace {

using model::HyperParams;
using model::LayerWeights;

void add_bias(float* rows, int64_t n, int64_t width, const float* bias) {
  if (!bias) return;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < width; ++j) rows[i * width + j] += bias[j];
  }
}

void add_into(float* residual, const float* delta, int64_t count) {
  for (int64_t i = 0; i < count; ++i) residual[i] += delta[i];
}

// Per-head RMS norm (Q/K norms), then RoPE, of n rows of `heads` heads.
void position_heads(const HyperParams& p, float* rows, int64_t n, int64_t heads, const float* head_norm,
                    const ForwardScratch& s) {
  if (head_norm) cpu::rms_norm(rows, n * heads, p.head_dim, p.head_dim, head_norm, p.rms_epsilon, rows, p.head_dim);
  for (int64_t i = 0; i < n; ++i) {
    cpu::rope_apply(rows + i * heads * p.head_dim, heads, p.head_dim, p.rope, s.rope_angles[i]);
  }
}

void attention_block(const HyperParams& p, const LayerWeights& w, int64_t layer, int64_t n,
                     std::span<const SequenceRows> batch, ForwardScratch& s, cpu::ThreadPool& pool) {
  const int64_t q_width = p.heads * p.head_dim;
  const int64_t kv_width = p.kv_heads * p.head_dim;
  cpu::rms_norm(s.residual.data(), n, p.embedding, p.embedding, w.attention_norm, p.rms_epsilon, s.normed.data(),
                p.embedding);
  s.input.reset(s.normed.data(), n, p.embedding);
  cpu::matmul(w.q, s.input, s.q.data(), pool);
  cpu::matmul(w.k, s.input, s.k.data(), pool);
  cpu::matmul(w.v, s.input, s.v.data(), pool);
  add_bias(s.q.data(), n, q_width, w.q_bias);
  add_bias(s.k.data(), n, kv_width, w.k_bias);
  add_bias(s.v.data(), n, kv_width, w.v_bias);
  position_heads(p, s.q.data(), n, p.heads, w.q_norm, s);
  position_heads(p, s.k.data(), n, p.kv_heads, w.k_norm, s);

  const cpu::AttentionShape shape{p.heads, p.kv_heads, p.head_dim, 1.0f / std::sqrt(static_cast<float>(p.head_dim))};
  int64_t row = 0;
  for (const SequenceRows& part : batch) {
    const int64_t rows = static_cast<int64_t>(part.tokens.size());
    part.cache->store(layer, part.first_position, rows, s.k.data() + row * kv_width, s.v.data() + row * kv_width);
    cpu::causal_attention(s.q.data() + row * q_width, rows, part.first_position, part.cache->keys(layer),
                          part.cache->values(layer), shape, s.attention.data() + row * q_width, pool);
    row += rows;
  }
  s.input.reset(s.attention.data(), n, q_width);
  cpu::matmul(w.attention_output, s.input, s.projected.data(), pool);
  add_into(s.residual.data(), s.projected.data(), n * p.embedding);
}

void dense_ffn(const HyperParams& p, const LayerWeights& w, int64_t n, ForwardScratch& s, cpu::ThreadPool& pool) {
  s.input.reset(s.normed.data(), n, p.embedding);
  cpu::matmul(w.ffn_gate, s.input, s.gate.data(), pool);
  cpu::matmul(w.ffn_up, s.input, s.up.data(), pool);
  cpu::swiglu(s.gate.data(), s.up.data(), n * p.feed_forward, s.activated.data());
  s.input.reset(s.activated.data(), n, p.feed_forward);
  cpu::matmul(w.ffn_down, s.input, s.projected.data(), pool);
}

void moe_ffn(const model::Model& model, int64_t layer, int64_t n, ExpertArena* arena, ForwardScratch& s,
             cpu::ThreadPool& pool) {
  const HyperParams& p = model.params;
  s.input.reset(s.normed.data(), n, p.embedding);
  cpu::matmul(model.layers[layer].router, s.input, s.router_logits.data(), pool);
  cpu::route_top_k(s.router_logits.data(), n, p.experts, p.experts_used, p.normalize_expert_weights, s.routing);
  for (const int32_t e : s.routing.experts) ++s.routed[static_cast<size_t>(layer * p.experts + e)];
  run_cpu_experts(model, layer, s.normed.data(), n, s.routing, {}, arena, s.projected.data(), s.moe, pool);
}

void ffn_block(const model::Model& model, int64_t layer, int64_t n, ExpertArena* arena, ForwardScratch& s,
               cpu::ThreadPool& pool) {
  const HyperParams& p = model.params;
  const LayerWeights& w = model.layers[layer];
  cpu::rms_norm(s.residual.data(), n, p.embedding, p.embedding, w.ffn_norm, p.rms_epsilon, s.normed.data(),
                p.embedding);
  if (p.experts > 0) {
    moe_ffn(model, layer, n, arena, s, pool);
  } else {
    dense_ffn(p, w, n, s, pool);
  }
  add_into(s.residual.data(), s.projected.data(), n * p.embedding);
}

void size_scratch(const HyperParams& p, int64_t n, ForwardScratch& s) {
  const auto rows = [n](int64_t width) { return static_cast<size_t>(n * width); };
  s.residual.resize(rows(p.embedding));
  s.normed.resize(rows(p.embedding));
  s.q.resize(rows(p.heads * p.head_dim));
  s.k.resize(rows(p.kv_heads * p.head_dim));
  s.v.resize(rows(p.kv_heads * p.head_dim));
  s.attention.resize(rows(p.heads * p.head_dim));
  s.projected.resize(rows(p.embedding));
  s.gate.resize(rows(p.feed_forward));
  s.up.resize(rows(p.feed_forward));
  s.activated.resize(rows(p.feed_forward));
  s.router_logits.resize(rows(p.experts));
  s.rope_angles.resize(static_cast<size_t>(n));
}

}  // namespace

void forward(const model::Model& model, std::span<const SequenceRows> batch, std::vector<float>& logits,
             ForwardScratch& s, cpu::ThreadPool& pool, ExpertArena* arena) {
  const HyperParams& p = model.params;
  int64_t n = 0;
  for (const SequenceRows& part : batch) n += static_cast<int64_t>(part.tokens.size());
  size_scratch(p, n, s);
  s.routed.assign(static_cast<size_t>(p.layers * p.experts), 0);
  s.logit_rows.clear();
  int64_t row = 0;
  for (const SequenceRows& part : batch) {
    const int64_t rows = static_cast<int64_t>(part.tokens.size());
    for (int64_t i = 0; i < rows; ++i, ++row) {
      cpu::dequantize_row(model.token_embedding, part.tokens[i], s.residual.data() + row * p.embedding);
      cpu::rope_angles(p.rope, part.first_position + i, s.rope_angles[row]);
      if (part.rows == LogitRows::kAll || i == rows - 1) s.logit_rows.push_back(row);
    }
  }
  for (int64_t l = 0; l < p.layers; ++l) {
    attention_block(p, model.layers[l], l, n, batch, s, pool);
    ffn_block(model, l, n, arena, s, pool);
  }

  // The output norm gathers the rows that return logits, so the output product reads only those.
  const auto out_rows = static_cast<int64_t>(s.logit_rows.size());
  for (int64_t i = 0; i < out_rows; ++i) {
    cpu::rms_norm(s.residual.data() + s.logit_rows[i] * p.embedding, 1, p.embedding, p.embedding, model.output_norm,
                  p.rms_epsilon, s.normed.data() + i * p.embedding, p.embedding);
  }
  logits.resize(static_cast<size_t>(out_rows * p.vocab));
  s.input.reset(s.normed.data(), out_rows, p.embedding);
  cpu::WeightMatrix output = model.output;
  output.stored_plain_by_llama = model.output.data == model.token_embedding.data;  // tied: the embedding
  cpu::matmul(output, s.input, logits.data(), pool);
}

}  // namespace bloomery::engine
