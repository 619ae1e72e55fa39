#include "engine/forward.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "base/error.h"
#include "cpu/attention.h"
#include "cpu/causal_conv.h"
#include "cpu/delta_rule.h"
#include "cpu/hyper_connections.h"
#include "cpu/rms_norm.h"
#include "cpu/rope.h"
#include "cpu/swiglu.h"
#include "engine/compressed_attention.h"
#include "engine/cpu_experts.h"
#include "engine/head_products.h"
#include "engine/lightning_indexer.h"

namespace bloomery::engine {

namespace {

using model::HyperParams;

void add_bias(float* rows, int64_t n, int64_t width, const float* bias) {
  if (!bias) return;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < width; ++j) rows[i * width + j] += bias[j];
  }
}

void add_into(float* residual, const float* delta, int64_t count) {
  for (int64_t i = 0; i < count; ++i) residual[i] += delta[i];
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// Rotates the `heads` heads of each of n rows (`row_width` floats apart), `stride` floats apart.
void rotate(const cpu::RopeParams& rope, const std::vector<std::vector<float>>& angles, float* rows, int64_t n,
            int64_t row_width, int64_t heads, int64_t stride) {
  for (int64_t i = 0; i < n; ++i) cpu::rope_apply(rows + i * row_width, heads, stride, rope, angles[i]);
}

bool windowed_rope_differs(const HyperParams& p) {
  return p.windowed_rope.freq_base != p.rope.freq_base || p.windowed_rope.freq_scale != p.rope.freq_scale;
}

// Moves n rows of `width` floats, packed, apart to `stride` floats (the KV cache's row, where
// this layer has fewer KV heads than the widest), zeroing the rest of each row.
void spread_rows(float* rows, int64_t n, int64_t width, int64_t stride) {
  if (width == stride) return;
  for (int64_t i = n - 1; i >= 0; --i) {
    std::copy_backward(rows + i * width, rows + (i + 1) * width, rows + i * stride + width);
    std::fill(rows + i * stride + width, rows + (i + 1) * stride, 0.0f);
  }
}

// Runs attention of each sequence's rows over its cache (after storing their keys and values),
// into s.attention. A windowed layer's cache holds a slice of rows beyond its window, so its
// rows are stored and attended a slice at a time.
// `select`, where given, runs on each part's rows once they are stored, before they attend
// (a lightning indexer choosing their positions: shape.selected's rows).
void attend(std::span<const SequenceRows> batch, int64_t layer, const cpu::AttentionShape& shape, const float* keys,
            const float* values, ForwardScratch& s, cpu::ThreadPool& pool,
            const std::function<void(const SequenceRows&, int64_t row, int64_t n)>& select = {}) {
  const model::CacheRow& cached = batch.front().cache->row();
  const int64_t q_width = shape.heads * shape.key_dim, out_width = shape.heads * shape.value_dim;
  int64_t row = 0;
  for (const SequenceRows& part : batch) {
    const int64_t rows = static_cast<int64_t>(part.tokens.size());
    const int64_t slice = shape.window > 0 ? model::kWindowSlice : rows;
    for (int64_t done = 0; done < rows; done += slice) {
      const int64_t n = std::min(slice, rows - done), first = part.first_position + done;
      part.cache->store(layer, first, n, keys + row * cached.keys, values + row * cached.values);
      const uint16_t* k = part.cache->keys(layer);
      const uint16_t* v = cached.values > 0 ? part.cache->values(layer) : k;
      if (select) select(part, row, n);
      cpu::AttentionShape held = shape;
      held.first_cached = part.cache->first_cached(layer);
      if (shape.selected) held.selected = shape.selected + row * shape.selected_count;
      cpu::causal_attention(s.q.data() + row * q_width, n, first, k, v, held, s.attention.data() + row * out_width,
                            pool);
      row += n;
    }
  }
}

void gqa_attention(const HyperParams& p, const model::AttentionWeights& a, int64_t layer, int64_t n,
                   std::span<const SequenceRows> batch, ForwardScratch& s, cpu::ThreadPool& pool) {
  const model::GqaWeights& w = a.gqa;
  const int64_t q_width = p.heads * p.head_dim;
  const int64_t k_width = w.kv_heads * p.head_dim, v_width = w.kv_heads * p.value_dim;
  s.input.reset(s.normed.data(), n, p.embedding);
  if (w.output_gate) {
    // Each head's query, then its gate: split into s.q and s.attn_gate.
    s.q_gated.resize(static_cast<size_t>(n * 2 * q_width));
    s.attn_gate.resize(static_cast<size_t>(n * q_width));
    cpu::matmul(w.q, s.input, s.q_gated.data(), pool);
    for (int64_t i = 0; i < n * p.heads; ++i) {
      const float* head = s.q_gated.data() + i * 2 * p.head_dim;
      std::copy_n(head, p.head_dim, s.q.data() + i * p.head_dim);
      std::copy_n(head + p.head_dim, p.head_dim, s.attn_gate.data() + i * p.head_dim);
    }
  } else {
    cpu::matmul(w.q, s.input, s.q.data(), pool);
  }
  cpu::matmul(w.k, s.input, s.k.data(), pool);
  cpu::matmul(w.v, s.input, s.v.data(), pool);
  add_bias(s.q.data(), n, q_width, w.q_bias);
  add_bias(s.k.data(), n, k_width, w.k_bias);
  add_bias(s.v.data(), n, v_width, w.v_bias);
  const int64_t q_norm_width = w.qk_norm_whole ? q_width : p.head_dim;
  const int64_t k_norm_width = w.qk_norm_whole ? k_width : p.head_dim;
  if (w.q_norm) {
    cpu::rms_norm(s.q.data(), n * q_width / q_norm_width, q_norm_width, q_norm_width, w.q_norm, p.rms_epsilon,
                  s.q.data(), q_norm_width);
  }
  if (w.k_norm) {
    cpu::rms_norm(s.k.data(), n * k_width / k_norm_width, k_norm_width, k_norm_width, w.k_norm, p.rms_epsilon,
                  s.k.data(), k_norm_width);
  }
  const bool own_rope = a.windowed && windowed_rope_differs(p);
  const cpu::RopeParams& rope = own_rope ? p.windowed_rope : p.rope;
  const auto& angles = own_rope ? s.windowed_rope_angles : s.rope_angles;
  rotate(rope, angles, s.q.data(), n, q_width, p.heads, p.head_dim);
  rotate(rope, angles, s.k.data(), n, k_width, w.kv_heads, p.head_dim);
  const model::CacheRow cached = model::cache_row(p);
  spread_rows(s.k.data(), n, k_width, cached.keys);
  spread_rows(s.v.data(), n, v_width, cached.values);
  cpu::AttentionShape shape{p.heads,           w.kv_heads,  p.head_dim,   p.value_dim,
                            p.attention_scale, cached.keys, cached.values};
  shape.window = a.windowed ? p.sliding_window : 0;
  shape.sinks = a.sinks;
  attend(batch, layer, shape, s.k.data(), s.v.data(), s, pool);
  if (w.output_gate) {
    for (int64_t i = 0; i < n * q_width; ++i) s.attention[i] *= sigmoid(s.attn_gate[i]);
  }
}

// Gated DeltaNet: the input projections (the convolution's [q, k, v] channels, the output gate
// z, beta and alpha), then per sequence the causal convolution with SiLU, L2-normed queries and
// keys, and the gated delta rule over its recurrent states; each head's output RMS-normed and
// gated by silu(z), into s.attention (attn_output's input).
void delta_net_attention(const HyperParams& p, const model::AttentionWeights& a, int64_t layer, int64_t n,
                         std::span<const SequenceRows> batch, ForwardScratch& s, cpu::ThreadPool& pool) {
  const model::DeltaNetWeights& w = a.delta_net;
  const model::DeltaNetParams& d = p.delta_net;
  const int64_t channels = d.channels(), value_width = d.value_width(), group = d.v_heads / d.k_heads;
  s.mixed.resize(static_cast<size_t>(n * channels));
  s.z.resize(static_cast<size_t>(n * value_width));
  s.beta.resize(static_cast<size_t>(n * d.v_heads));
  s.decay.resize(static_cast<size_t>(n * d.v_heads));
  s.input.reset(s.normed.data(), n, p.embedding);
  if (!w.qkvz.empty()) {
    // Per key head [q, k, its group's values, their z]: gathered into [q..., k..., v...] and z.
    const int64_t per_head = 2 * d.head_dim + 2 * group * d.head_dim;
    s.grouped.resize(static_cast<size_t>(n * d.k_heads * per_head));
    cpu::matmul(w.qkvz, s.input, s.grouped.data(), pool);
    for (int64_t i = 0; i < n; ++i) {
      float* row = s.mixed.data() + i * channels;
      for (int64_t h = 0; h < d.k_heads; ++h) {
        const float* part = s.grouped.data() + (i * d.k_heads + h) * per_head;
        const int64_t values = group * d.head_dim;
        std::copy_n(part, d.head_dim, row + h * d.head_dim);
        std::copy_n(part + d.head_dim, d.head_dim, row + d.key_width() + h * d.head_dim);
        std::copy_n(part + 2 * d.head_dim, values, row + 2 * d.key_width() + h * values);
        std::copy_n(part + 2 * d.head_dim + values, values, s.z.data() + i * value_width + h * values);
      }
    }
  } else {
    cpu::matmul(w.qkv, s.input, s.mixed.data(), pool);
    cpu::matmul(w.z, s.input, s.z.data(), pool);
  }
  if (!w.beta_alpha.empty()) {
    // Per key head [its group's betas, their alphas].
    s.grouped.resize(static_cast<size_t>(n * 2 * d.v_heads));
    cpu::matmul(w.beta_alpha, s.input, s.grouped.data(), pool);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t h = 0; h < d.k_heads; ++h) {
        const float* part = s.grouped.data() + i * 2 * d.v_heads + h * 2 * group;
        std::copy_n(part, group, s.beta.data() + i * d.v_heads + h * group);
        std::copy_n(part + group, group, s.decay.data() + i * d.v_heads + h * group);
      }
    }
  } else {
    cpu::matmul(w.beta, s.input, s.beta.data(), pool);
    cpu::matmul(w.alpha, s.input, s.decay.data(), pool);
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < d.v_heads; ++h) {
      float& b = s.beta[i * d.v_heads + h];
      b = sigmoid(b);
      // g = softplus(alpha + dt_bias) * a, ggml's softplus (linear above 20).
      float& g = s.decay[i * d.v_heads + h];
      const float x = g + w.dt_bias[h];
      g = (x > 20.0f ? x : std::log(1.0f + std::exp(x))) * w.a[h];
    }
  }
  const cpu::DeltaRuleShape shape{d.k_heads, d.v_heads, d.head_dim, d.grouped_heads};
  int64_t row = 0;
  for (const SequenceRows& part : batch) {
    const auto rows = static_cast<int64_t>(part.tokens.size());
    float* state = part.cache->recurrent(layer);
    if (part.first_position == 0) std::fill_n(state, d.state_floats(), 0.0f);
    // The convolution and the rule carry their states from one run into the next.
    runs_between_snapshots(part.snapshots, rows, [&](int64_t from, int64_t to, const StateSnapshot* snapshot) {
      const int64_t first = row + from, count = to - from;
      float* mixed = s.mixed.data() + first * channels;
      cpu::causal_conv_silu(mixed, count, channels, channels, d.conv_kernel, w.conv, state);
      // A token's q heads, then its k heads, are L2-normed each.
      for (int64_t t = 0; t < count; ++t) {
        cpu::l2_norm(mixed + t * channels, 2 * d.k_heads, d.head_dim, d.head_dim, p.rms_epsilon);
      }
      cpu::gated_delta_rule(shape, count, mixed, mixed + d.key_width(), channels, mixed + 2 * d.key_width(), channels,
                            s.decay.data() + first * d.v_heads, s.beta.data() + first * d.v_heads,
                            state + d.conv_floats(), s.attention.data() + first * value_width, value_width, pool);
      if (snapshot) std::copy_n(state, d.state_floats(), snapshot->states + part.cache->recurrent_offset(layer));
    });
    row += rows;
  }
  cpu::rms_norm(s.attention.data(), n * d.v_heads, d.head_dim, d.head_dim, w.norm, p.rms_epsilon, s.attention.data(),
                d.head_dim);
  cpu::swiglu(s.z.data(), s.attention.data(), n * value_width, s.attention.data());
}

// Multi-head latent attention with the up-projections absorbed: each head's query becomes
// [k_b^T q_nope, rope(q_rope)], attending a cache of [norm(latent), rope(k_rope)] rows in which
// the values are the latents; each head's output is then v_b times its attended latent. Sparse
// (kSparseMla): each row attends only the positions a lightning indexer selected, this layer's
// own or, for a layer without one, the last layer's with one.
void mla_attention(const HyperParams& p, const model::AttentionWeights& a, int64_t layer, int64_t n,
                   std::span<const SequenceRows> batch, ForwardScratch& s, cpu::ThreadPool& pool) {
  const model::MlaWeights& w = a.mla;
  const model::MlaParams& m = p.mla;
  const int64_t head = m.nope_dim + m.rope_dim, q_width = p.heads * head;
  const int64_t key = m.kv_lora_rank + m.rope_dim, row = model::cache_row(p).keys;
  const int64_t absorbed_width = p.heads * key;
  s.input.reset(s.normed.data(), n, p.embedding);
  if (!w.q_a.empty()) {
    cpu::matmul(w.q_a, s.input, s.q_low.data(), pool);
    cpu::rms_norm(s.q_low.data(), n, m.q_lora_rank, m.q_lora_rank, w.q_a_norm, p.rms_epsilon, s.q_low.data(),
                  m.q_lora_rank);
    cpu::matmul(w.kv_a, s.input, s.k.data(), pool);
    s.input.reset(s.q_low.data(), n, m.q_lora_rank);
    cpu::matmul(w.q, s.input, s.v.data(), pool);
  } else {
    cpu::matmul(w.q, s.input, s.v.data(), pool);
    cpu::matmul(w.kv_a, s.input, s.k.data(), pool);
  }
  // s.v holds the raw queries, s.k each row's [latent, k_rope] (apart to the cache's row, where
  // the indexer's key follows them): the latent normed in place.
  spread_rows(s.k.data(), n, key, row);
  cpu::rms_norm(s.k.data(), n, m.kv_lora_rank, row, w.kv_a_norm, p.rms_epsilon, s.k.data(), row);
  for (int64_t i = 0; i < n; ++i) {
    cpu::rope_apply(s.k.data() + i * row + m.kv_lora_rank, 1, m.rope_dim, p.rope, s.rope_angles[i]);
    cpu::rope_apply(s.v.data() + i * q_width + m.nope_dim, p.heads, m.rope_dim, p.rope, s.rope_angles[i], head);
    for (int64_t h = 0; h < p.heads; ++h) {
      std::copy_n(s.v.data() + i * q_width + h * head + m.nope_dim, m.rope_dim,
                  s.q.data() + i * absorbed_width + h * key + m.kv_lora_rank);
    }
  }
  const bool sparse = a.kind == model::AttentionKind::kSparseMla;
  if (sparse && a.indexer.own()) indexer_rows(p, a.indexer, n, s, pool);
  per_head(w.k_b, s.v.data(), n, q_width, head, s.q.data(), absorbed_width, key, s, pool);
  // per_head wrote each head's absorbed query over its first kv_lora_rank floats only.
  cpu::AttentionShape shape{p.heads, 1, key, m.kv_lora_rank, p.attention_scale, row, row};
  if (sparse) {
    shape.selected = s.selected.data();
    shape.selected_count = p.indexer.top_k;
  }
  const auto select = [&](const SequenceRows& part, int64_t first_row, int64_t rows) {
    select_positions(p, part, layer, first_row, rows, s, pool);
  };
  if (sparse && a.indexer.own()) {
    attend(batch, layer, shape, s.k.data(), nullptr, s, pool, select);
  } else {
    attend(batch, layer, shape, s.k.data(), nullptr, s, pool);
  }
  per_head(w.v_b, s.attention.data(), n, p.heads * m.kv_lora_rank, m.kv_lora_rank, s.projected.data(),
           p.heads * m.value_dim, m.value_dim, s, pool);
  std::copy_n(s.projected.data(), n * p.heads * m.value_dim, s.attention.data());
}

cpu::HyperShape hyper_shape(const HyperParams& p) {
  return {p.hyper.streams, p.embedding, p.hyper.sinkhorn_iterations, p.hyper.epsilon};
}

// The streams' mix weights of n rows (HyperConnectionParams): each row's streams RMS-normed as
// one row, times the block's (or the head's) matrix, into s.hyper_mixes.
void hyper_mixes(const HyperParams& p, const model::HyperConnectionWeights& h, int64_t n, ForwardScratch& s,
                 cpu::ThreadPool& pool) {
  const int64_t width = p.hyper.streams * p.embedding;
  s.hyper_normed.resize(static_cast<size_t>(n * width));
  s.hyper_mixes.resize(static_cast<size_t>(n * h.mix.rows));
  cpu::rms_norm(s.residual.data(), n, width, width, nullptr, p.rms_epsilon, s.hyper_normed.data(), width);
  s.input.reset(s.hyper_normed.data(), n, width);
  cpu::matmul(h.mix, s.input, s.hyper_mixes.data(), pool);
}

// A block's input, normed by `norm` into s.normed: the residual's rows, or with hyper-connections
// their streams' mix (the block's output and stream weights kept for block_output).
void block_input(const HyperParams& p, const model::HyperConnectionWeights& h, const float* norm, int64_t n,
                 ForwardScratch& s, cpu::ThreadPool& pool) {
  if (p.hyper.streams == 0) {
    cpu::rms_norm(s.residual.data(), n, p.embedding, p.embedding, norm, p.rms_epsilon, s.normed.data(), p.embedding);
    return;
  }
  const int64_t streams = p.hyper.streams;
  hyper_mixes(p, h, n, s, pool);
  s.hyper_pre.resize(static_cast<size_t>(n * streams));
  s.hyper_post.resize(static_cast<size_t>(n * streams));
  s.hyper_comb.resize(static_cast<size_t>(n * streams * streams));
  const cpu::HyperShape shape = hyper_shape(p);
  cpu::hyper_weights(s.hyper_mixes.data(), n, h.scale, h.base, shape, s.hyper_pre.data(), s.hyper_post.data(),
                     s.hyper_comb.data());
  cpu::hyper_pre(s.residual.data(), s.hyper_pre.data(), n, shape, s.normed.data(), pool);
  cpu::rms_norm(s.normed.data(), n, p.embedding, p.embedding, norm, p.rms_epsilon, s.normed.data(), p.embedding);
}

// The block's output (s.projected) into the residual: added, or with hyper-connections each stream
// made of it and the streams' mix (block_input's weights).
void block_output(const HyperParams& p, int64_t n, ForwardScratch& s, cpu::ThreadPool& pool) {
  if (p.hyper.streams == 0) {
    add_into(s.residual.data(), s.projected.data(), n * p.embedding);
    return;
  }
  cpu::hyper_post(s.projected.data(), s.hyper_post.data(), s.hyper_comb.data(), n, hyper_shape(p), s.residual.data(),
                  pool);
}

// `a` over the n rows of s.residual, keeping its keys and values in layer `layer` of each part's cache.
void attention_block(const HyperParams& p, const model::AttentionWeights& a, int64_t layer, int64_t n,
                     std::span<const SequenceRows> batch, ForwardScratch& s, cpu::ThreadPool& pool) {
  block_input(p, a.hyper, a.norm, n, s, pool);
  switch (a.kind) {
    case model::AttentionKind::kGqa:
      gqa_attention(p, a, layer, n, batch, s, pool);
      break;
    case model::AttentionKind::kMla:
    case model::AttentionKind::kSparseMla:
      mla_attention(p, a, layer, n, batch, s, pool);
      break;
    case model::AttentionKind::kDeltaNet:
      delta_net_attention(p, a, layer, n, batch, s, pool);
      break;
    case model::AttentionKind::kCompressed:
      compressed_attention(p, a, layer, n, batch, s, pool);
      break;
  }
  s.input.reset(s.attention.data(), n, a.output.cols);
  cpu::matmul(a.output, s.input, s.projected.data(), pool);
  add_bias(s.projected.data(), n, p.embedding, a.output_bias);
  if (p.value_scale != 1.0f) {
    for (int64_t i = 0; i < n * p.embedding; ++i) s.projected[static_cast<size_t>(i)] *= p.value_scale;
  }
  block_output(p, n, s, pool);
}

// out = down(silu(gate x) * up x) over the n rows of s.normed (DeepSeek-V4's limited SwiGLU where
// `activation` says).
void swiglu_ffn(const model::SwigluWeights& w, const cpu::ExpertActivation& activation, int64_t n, float* out,
                ForwardScratch& s, cpu::ThreadPool& pool) {
  const int64_t width = w.gate.rows;
  s.gate.resize(static_cast<size_t>(n * width));
  s.up.resize(static_cast<size_t>(n * width));
  s.activated.resize(static_cast<size_t>(n * width));
  s.input.reset(s.normed.data(), n, w.gate.cols);
  cpu::matmul(w.gate, s.input, s.gate.data(), pool);
  cpu::matmul(w.up, s.input, s.up.data(), pool);
  if (activation.kind == cpu::ActivationKind::kLimitedSwiglu) {
    cpu::limited_swiglu(s.gate.data(), s.up.data(), n * width, activation.limit, s.activated.data());
  } else {
    cpu::swiglu(s.gate.data(), s.up.data(), n * width, s.activated.data());
  }
  s.input.reset(s.activated.data(), n, width);
  cpu::matmul(w.down, s.input, out, pool);
}

// The routed experts of `w`, the file's layer `layer`: a layer a pass runs counts its routing in
// s.routed (a next-token-prediction layer's is not counted).
void routed_experts(const model::Model& model, const model::LayerWeights& w, int64_t layer, int64_t n,
                    std::span<const SequenceRows> batch, ExpertArena* arena, ForwardScratch& s, cpu::ThreadPool& pool) {
  const HyperParams& p = model.params;
  const model::RoutedExperts& r = w.ffn.routed;
  s.input.reset(s.normed.data(), n, p.embedding);
  cpu::matmul(r.router, s.input, s.router_logits.data(), pool);
  add_bias(s.router_logits.data(), n, p.experts, r.router_bias);
  const int32_t* chosen = nullptr;
  if (r.token_experts) {
    // Hash routing: each row's experts by its token.
    s.token_routing.clear();
    for (const SequenceRows& part : batch) {
      for (const int32_t token : part.tokens) {
        const int32_t* experts = r.token_experts + static_cast<int64_t>(token) * p.experts_used;
        s.token_routing.insert(s.token_routing.end(), experts, experts + p.experts_used);
      }
    }
    chosen = s.token_routing.data();
  }
  cpu::route(s.router_logits.data(), n, p.experts, p.experts_used, p.router, r.selection_bias, s.routing, chosen);
  if (!s.replayed_routing.empty() && layer < p.layers) {
    // Uniform gating, as cuda/moe.cu's route_row replays.
    const int32_t* replayed = s.replayed_routing.data() + layer * n * p.experts_used;
    std::copy_n(replayed, n * p.experts_used, s.routing.experts.begin());
    std::fill_n(s.routing.weights.begin(), n * p.experts_used, p.router.scale / static_cast<float>(p.experts_used));
  }
  if (layer < p.layers) {
    for (const int32_t e : s.routing.experts) ++s.routed[static_cast<size_t>(layer * p.experts + e)];
  }
  run_cpu_experts(model, w, layer, s.normed.data(), n, s.routing, {}, arena, s.projected.data(), s.moe, pool);
}

// The FFN: the routed experts and the dense (or shared) SwiGLU, added to the residual in
// llama.cpp's order (the routed sum plus the shared output, then the residual).
void ffn_block(const model::Model& model, const model::LayerWeights& w, int64_t layer, int64_t n,
               std::span<const SequenceRows> batch, ExpertArena* arena, ForwardScratch& s, cpu::ThreadPool& pool) {
  const HyperParams& p = model.params;
  const model::FfnWeights& f = w.ffn;
  block_input(p, f.hyper, f.norm, n, s, pool);
  if (f.kind == model::FfnKind::kMoe) {
    routed_experts(model, w, layer, n, batch, arena, s, pool);
    if (!f.dense.empty()) {
      s.shared.resize(static_cast<size_t>(n * p.embedding));
      swiglu_ffn(f.dense, p.shared_activation, n, s.shared.data(), s, pool);
      if (!f.shared_gate.empty()) {
        s.shared_gate.resize(static_cast<size_t>(n));
        s.input.reset(s.normed.data(), n, p.embedding);
        cpu::matmul(f.shared_gate, s.input, s.shared_gate.data(), pool);
        for (int64_t i = 0; i < n; ++i) {
          const float gate = sigmoid(s.shared_gate[i]);
          for (int64_t j = 0; j < p.embedding; ++j) s.shared[i * p.embedding + j] *= gate;
        }
      }
      add_into(s.projected.data(), s.shared.data(), n * p.embedding);
    }
  } else {
    swiglu_ffn(f.dense, p.shared_activation, n, s.projected.data(), s, pool);
  }
  block_output(p, n, s, pool);
}

void size_scratch(const HyperParams& p, int64_t n, ForwardScratch& s) {
  const auto rows = [n](int64_t width) { return static_cast<size_t>(n * width); };
  const model::CacheRow cached = model::cache_row(p);
  const int64_t q_width =
      p.mla.kv_lora_rank > 0 ? p.heads * (p.mla.kv_lora_rank + p.mla.rope_dim) : p.heads * p.head_dim;
  const int64_t attended =
      std::max(p.mla.kv_lora_rank > 0 ? p.heads * std::max(p.mla.kv_lora_rank, p.mla.value_dim) : p.heads * p.value_dim,
               p.delta_net.value_width());
  s.residual.resize(rows(p.embedding));
  s.normed.resize(rows(p.embedding));
  s.q.resize(rows(q_width));
  s.q_low.resize(rows(std::max(p.mla.q_lora_rank, p.compressed.q_lora_rank)));
  s.k.resize(rows(cached.keys));
  s.v.resize(rows(std::max(cached.values, p.heads * p.head_dim)));
  s.attention.resize(rows(std::max(attended, p.compressed.output_groups * p.compressed.output_rank)));
  s.projected.resize(rows(std::max(p.embedding, p.heads * p.mla.value_dim)));
  s.router_logits.resize(rows(p.experts));
  s.selected.resize(rows(p.indexer.top_k));
  s.rope_angles.resize(static_cast<size_t>(n));
  s.windowed_rope_angles.resize(windowed_rope_differs(p) ? static_cast<size_t>(n) : 0);
  s.compressed_rope_angles.resize(p.compressed.q_lora_rank > 0 ? static_cast<size_t>(n) : 0);
}

// Hyper-connections: each row's embedding becomes its `streams` streams (s.residual, n rows of
// streams x embedding).
void spread_streams(const HyperParams& p, int64_t n, ForwardScratch& s) {
  const int64_t streams = p.hyper.streams, e = p.embedding;
  s.residual.resize(static_cast<size_t>(n * streams * e));
  for (int64_t i = n - 1; i >= 0; --i) {
    for (int64_t h = streams - 1; h >= 0; --h) {
      std::copy_n(s.residual.data() + i * e, e, s.residual.data() + (i * streams + h) * e);
    }
  }
}

// The head's mix of each row's streams (Model::output_hyper) into s.residual's first n rows of
// the embedding, what the output norm reads; first the streams of the hidden rows that keep them
// (NextnHidden::kStreams) into s.hidden_streams.
void join_streams(const model::Model& model, int64_t n, ForwardScratch& s, cpu::ThreadPool& pool) {
  const HyperParams& p = model.params;
  const int64_t width = p.hyper.streams * p.embedding;
  s.hidden_streams.clear();
  for (size_t i = 0; i < s.hidden_rows.size(); ++i) {
    if (s.hidden_kind[i] != model::NextnHidden::kStreams) continue;
    const float* row = s.residual.data() + s.hidden_rows[i] * width;
    s.hidden_streams.insert(s.hidden_streams.end(), row, row + width);
  }
  hyper_mixes(p, model.output_hyper, n, s, pool);
  s.hyper_pre.resize(static_cast<size_t>(n * p.hyper.streams));
  const cpu::HyperShape shape = hyper_shape(p);
  cpu::hyper_head_weights(s.hyper_mixes.data(), n, model.output_hyper.scale, model.output_hyper.base, shape,
                          s.hyper_pre.data());
  cpu::hyper_pre(s.residual.data(), s.hyper_pre.data(), n, shape, s.hyper_normed.data(), pool);
  std::copy_n(s.hyper_normed.data(), n * p.embedding, s.residual.data());
}

// How the hidden states kept for the model's MTP layer are taken (NextnLayer::hidden).
model::NextnHidden mtp_hidden(const model::Model& model) {
  return model.nextn_layers.empty() ? model::NextnHidden::kNormed : model.nextn_layers.front().hidden;
}

// Per row: its token's embedding (of `embedding`) into `into`, its rotation angles; and which rows
// return logits and hidden states (s.logit_rows, s.hidden_rows, s.hidden_kind). Returns the rows.
int64_t begin_rows(const model::Model& model, const cpu::WeightMatrix& embedding, std::span<const SequenceRows> batch,
                   std::vector<float>& into, ForwardScratch& s) {
  const HyperParams& p = model.params;
  int64_t n = 0;
  for (const SequenceRows& part : batch) n += static_cast<int64_t>(part.tokens.size());
  size_scratch(p, n, s);
  into.resize(static_cast<size_t>(n * p.embedding));
  s.logit_rows.clear();
  s.hidden_rows.clear();
  s.hidden_kind.clear();
  int64_t row = 0;
  for (const SequenceRows& part : batch) {
    const int64_t rows = static_cast<int64_t>(part.tokens.size());
    for (int64_t i = 0; i < rows; ++i, ++row) {
      cpu::dequantize_row(embedding, part.tokens[i], into.data() + row * p.embedding);
      cpu::rope_angles(p.rope, part.first_position + i, s.rope_angles[row]);
      if (windowed_rope_differs(p))
        cpu::rope_angles(p.windowed_rope, part.first_position + i, s.windowed_rope_angles[row]);
      if (p.compressed.q_lora_rank > 0)
        cpu::rope_angles(p.compressed.rope, part.first_position + i, s.compressed_rope_angles[row]);
      if (part.rows == LogitRows::kEmbeddings || part.keep_hidden) {
        s.hidden_rows.push_back(row);
        s.hidden_kind.push_back(part.rows == LogitRows::kEmbeddings ? model::NextnHidden::kNormed : mtp_hidden(model));
      }
      if (part.rows == LogitRows::kAll || (part.rows == LogitRows::kLast && i == rows - 1)) {
        s.logit_rows.push_back(row);
      }
    }
  }
  return n;
}

// The head: s.hidden_rows into s.hidden as s.hidden_kind says (of s.residual, normed by `norm` or
// not; or the streams join_streams kept), and the logits of s.logit_rows (normed, then times `output`).
void head(const model::Model& model, const float* norm, const cpu::WeightMatrix& output, std::vector<float>& logits,
          ForwardScratch& s, cpu::ThreadPool& pool) {
  const HyperParams& p = model.params;
  s.hidden.clear();
  const float* streams = s.hidden_streams.data();
  for (size_t i = 0; i < s.hidden_rows.size(); ++i) {
    const float* row = s.residual.data() + s.hidden_rows[i] * p.embedding;
    const size_t at = s.hidden.size();
    switch (s.hidden_kind[i]) {
      case model::NextnHidden::kNormed:
        s.hidden.resize(at + static_cast<size_t>(p.embedding));
        cpu::rms_norm(row, 1, p.embedding, p.embedding, norm, p.rms_epsilon, s.hidden.data() + at, p.embedding);
        break;
      case model::NextnHidden::kBeforeNorm:
        s.hidden.insert(s.hidden.end(), row, row + p.embedding);
        break;
      case model::NextnHidden::kStreams:
        s.hidden.insert(s.hidden.end(), streams, streams + p.hyper.streams * p.embedding);
        streams += p.hyper.streams * p.embedding;
        break;
    }
  }
  // The norm gathers the rows that return logits, so the output product reads only those.
  const auto out_rows = static_cast<int64_t>(s.logit_rows.size());
  for (int64_t i = 0; i < out_rows; ++i) {
    cpu::rms_norm(s.residual.data() + s.logit_rows[i] * p.embedding, 1, p.embedding, p.embedding, norm, p.rms_epsilon,
                  s.normed.data() + i * p.embedding, p.embedding);
  }
  logits.resize(static_cast<size_t>(out_rows * p.vocab));
  if (out_rows == 0) return;
  s.input.reset(s.normed.data(), out_rows, p.embedding);
  cpu::WeightMatrix product = output;
  product.stored_plain_by_llama = output.data == model.token_embedding.data;  // tied: the embedding
  cpu::matmul(product, s.input, logits.data(), pool);
}

}  // namespace

void check_snapshots(std::span<const StateSnapshot> snapshots, int64_t rows) {
  int64_t after = 0;
  for (const StateSnapshot& snapshot : snapshots) {
    if (snapshot.rows <= after || snapshot.rows >= rows || snapshot.states == nullptr) {
      throw Error("INVALID_ARGUMENT", "a pass's snapshots lie inside its part's rows, in order");
    }
    after = snapshot.rows;
  }
}

void forward(const model::Model& model, std::span<const SequenceRows> batch, std::vector<float>& logits,
             ForwardScratch& s, cpu::ThreadPool& pool, ExpertArena* arena) {
  const HyperParams& p = model.params;
  for (const SequenceRows& part : batch) {
    check_snapshots(part.snapshots, static_cast<int64_t>(part.tokens.size()));
  }
  const int64_t n = begin_rows(model, model.token_embedding, batch, s.residual, s);
  if (p.hyper.streams > 0) spread_streams(p, n, s);
  s.routed.assign(static_cast<size_t>(p.layers * p.experts), 0);
  for (int64_t l = 0; l < p.layers; ++l) {
    attention_block(p, model.layers[l].attention, l, n, batch, s, pool);
    ffn_block(model, model.layers[l], l, n, batch, arena, s, pool);
  }
  if (p.hyper.streams > 0) join_streams(model, n, s, pool);
  head(model, model.output_norm, model.output, logits, s, pool);
}

int64_t mtp_hidden_width(const model::Model& model) {
  return (mtp_hidden(model) == model::NextnHidden::kStreams ? model.params.hyper.streams : 1) * model.params.embedding;
}

void forward_nextn(const model::Model& model, std::span<const SequenceRows> batch, std::span<const float> hidden,
                   std::vector<float>& logits, ForwardScratch& s, cpu::ThreadPool& pool) {
  const HyperParams& p = model.params;
  const model::NextnLayer& m = model.nextn_layers.front();
  const cpu::WeightMatrix& embedding = m.embed_tokens.empty() ? model.token_embedding : m.embed_tokens;
  const int64_t n = begin_rows(model, embedding, batch, s.concat, s);
  // Each row's [enorm(embedding), hnorm(hidden)], projected to the embedding by eh_proj; with
  // hyper-connections, each of the row's streams so, beside the same normed embedding.
  const int64_t streams = std::max<int64_t>(p.hyper.streams, 1), e = p.embedding;
  s.enormed.resize(static_cast<size_t>(n * e));
  cpu::rms_norm(s.concat.data(), n, e, e, m.enorm, p.rms_epsilon, s.enormed.data(), e);
  s.concat.resize(static_cast<size_t>(n * streams * 2 * e));
  for (int64_t i = 0; i < n * streams; ++i) {
    float* row = s.concat.data() + i * 2 * e;
    std::copy_n(s.enormed.data() + i / streams * e, e, row);
    cpu::rms_norm(hidden.data() + i * e, 1, e, e, m.hnorm, p.rms_epsilon, row + e, e);
  }
  s.residual.resize(static_cast<size_t>(n * streams * e));
  s.input.reset(s.concat.data(), n * streams, 2 * e);
  cpu::matmul(m.eh_proj, s.input, s.residual.data(), pool);
  attention_block(p, m.blocks.attention, 0, n, batch, s, pool);
  ffn_block(model, m.blocks, p.layers, n, batch, nullptr, s, pool);
  if (p.hyper.streams > 0) join_streams(model, n, s, pool);
  head(model, m.shared_head_norm ? m.shared_head_norm : model.output_norm,
       m.shared_head.empty() ? model.output : m.shared_head, logits, s, pool);
}

}  // namespace bloomery::engine
