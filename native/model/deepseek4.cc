// DeepSeek-V4 (deepseek4), as llama.cpp's src/models/deepseek4.cpp: every layer's attention is
// AttentionKind::kCompressed (a low-rank query with per-head norms, one key/value head over a
// sliding window, rows compressed from blocks of 4 positions that a lightning indexer picks, or
// from blocks of 128, learned sinks, a grouped low-rank output); the residual is four
// hyper-connection streams; every FFN is routed experts (sqrt-softplus weights, a selection bias,
// the first hash_layer_count layers routed by token id) plus a shared expert, every SwiGLU
// limited by swiglu_clamp_exp / swiglu_clamp_shexp.
#include <cmath>

#include "base/error.h"
#include "model/architectures.h"

namespace bloomery::model {

namespace {

constexpr int64_t kGatingSqrtSoftplus = 4;  // llama.cpp's expert_gating_func numbering
// llama.cpp's fused hyper-connection ops (and its graph, which asserts it) mix four streams.
constexpr int64_t kHyperStreams = 4;

// One limit for every layer (llama.cpp reads one per layer; the released files hold one value).
float one_limit(Binder& b, const std::string& key, int64_t layers, float fallback) {
  const std::string name = b.params().architecture + "." + key;
  const gguf::GgufFile& file = b.model().file;
  if (!file.find(name)) return fallback;
  const std::optional<std::vector<double>> values = file.get_float_array(name);
  if (!values) return b.float_or(key, fallback);
  if (static_cast<int64_t>(values->size()) < layers) {
    throw Error("MODEL_BAD_METADATA",
                name + " has " + std::to_string(values->size()) + " entries, expected " + std::to_string(layers));
  }
  for (int64_t l = 1; l < layers; ++l) {
    if ((*values)[l] != (*values)[0]) {
      throw Error("UNSUPPORTED_FEATURE", name + " differs between layers; one limit for all layers is supported");
    }
  }
  return static_cast<float>((*values)[0]);
}

cpu::ExpertActivation limited(float limit) {
  // llama.cpp limits only above its epsilon.
  if (limit <= 1e-6f) return {};
  return {cpu::ActivationKind::kLimitedSwiglu, 1.0f, limit};
}

CompressorWeights compressor(Binder& b, int64_t layer, const std::string& name, int64_t width, int64_t ratio) {
  const HyperParams& p = b.params();
  const int64_t rows = (ratio == CompressedParams::kOverlapRatio ? 2 : 1) * width;
  return {b.matrix(layer_tensor(layer, name + "_kv"), p.embedding, rows),
          b.matrix(layer_tensor(layer, name + "_gate"), p.embedding, rows),
          b.matrix(layer_tensor(layer, name + "_ape"), rows, ratio),
          b.vector(layer_tensor(layer, name + "_norm"), width)};
}

HyperConnectionWeights hyper(Binder& b, int64_t layer, const std::string& block) {
  const HyperParams& p = b.params();
  const int64_t streams = p.hyper.streams, mixes = (2 + streams) * streams;
  return {b.matrix(layer_tensor(layer, "hc_" + block + "_fn"), streams * p.embedding, mixes),
          b.vector(layer_tensor(layer, "hc_" + block + "_base"), mixes),
          b.vector(layer_tensor(layer, "hc_" + block + "_scale"), 3)};
}

// Layer `l` of the file into `w`: a layer of the pass, or a next-token-prediction layer after them.
void bind_layer(Binder& b, int64_t l, LayerWeights& w, int64_t ratio, int64_t hash_layers) {
  const HyperParams& p = b.params();
  const CompressedParams& c = p.compressed;
  const int64_t d = p.head_dim, groups = c.output_groups;
  AttentionWeights& a = w.attention;
  a.kind = AttentionKind::kCompressed;
  a.windowed = true;
  a.norm = b.vector(layer_tensor(l, "attn_norm"), p.embedding);
  a.sinks = b.vector(layer_tensor(l, "attn_sinks"), p.heads);
  CompressedWeights& q = a.compressed;
  q.q_a = b.matrix(layer_tensor(l, "attn_q_a"), p.embedding, c.q_lora_rank);
  q.q_a_norm = b.vector(layer_tensor(l, "attn_q_a_norm"), c.q_lora_rank);
  q.q_b = b.matrix(layer_tensor(l, "attn_q_b"), c.q_lora_rank, p.heads * d);
  q.kv = b.matrix(layer_tensor(l, "attn_kv"), p.embedding, d);
  q.kv_norm = b.vector(layer_tensor(l, "attn_kv_a_norm"), d);
  q.ratio = ratio;
  // attn_output_a holds the groups' matrices one after another: [heads / groups * d, rank] each.
  cpu::WeightMatrix output_a = b.matrix(layer_tensor(l, "attn_output_a"), p.heads * d / groups, c.output_rank * groups);
  output_a.rows = c.output_rank;
  q.output_a = {output_a, groups};
  a.output = b.matrix(layer_tensor(l, "attn_output_b"), groups * c.output_rank, p.embedding);
  if (ratio != 0) q.compressor = compressor(b, l, "attn_compressor", d, ratio);
  if (ratio == CompressedParams::kOverlapRatio) {
    const IndexerParams& x = p.indexer;
    q.indexer_compressor = compressor(b, l, "indexer_compressor", x.head_dim, ratio);
    q.indexer_q = b.matrix(layer_tensor(l, "indexer.attn_q_b"), c.q_lora_rank, x.heads * x.head_dim);
    q.indexer_weights = b.matrix(layer_tensor(l, "indexer.proj"), p.embedding, x.heads);
  }
  a.hyper = hyper(b, l, "attn");

  FfnWeights& f = w.ffn;
  f.kind = FfnKind::kMoe;
  f.norm = b.vector(layer_tensor(l, "ffn_norm"), p.embedding);
  RoutedExperts& r = f.routed;
  r.router = b.matrix(layer_tensor(l, "ffn_gate_inp"), p.embedding, p.experts);
  if (l < hash_layers) {
    r.token_experts = b.id_table(layer_tensor(l, "ffn_gate_tid2eid"), p.experts_used, p.vocab, p.experts);
  } else {
    r.selection_bias = b.vector(layer_tensor(l, "exp_probs_b", "bias"), p.experts);
  }
  r.gate = b.stacked(layer_tensor(l, "ffn_gate_exps"), p.embedding, p.expert_feed_forward, p.experts);
  r.up = b.stacked(layer_tensor(l, "ffn_up_exps"), p.embedding, p.expert_feed_forward, p.experts);
  r.down = b.stacked(layer_tensor(l, "ffn_down_exps"), p.expert_feed_forward, p.embedding, p.experts);
  f.dense = {b.matrix(layer_tensor(l, "ffn_gate_shexp"), p.embedding, p.shared_feed_forward),
             b.matrix(layer_tensor(l, "ffn_up_shexp"), p.embedding, p.shared_feed_forward),
             b.matrix(layer_tensor(l, "ffn_down_shexp"), p.shared_feed_forward, p.embedding)};
  f.hyper = hyper(b, l, "ffn");
}

}  // namespace

void bind_deepseek4(Binder& b) {
  b.read_common_params(cpu::RopeStyle::kNormal);
  HyperParams& p = b.params();
  const gguf::GgufFile& file = b.model().file;
  if (p.kv_heads != 1 || p.value_dim != p.head_dim) {
    throw Error("MODEL_BAD_METADATA", "deepseek4 attends one key/value head whose values are its keys: " +
                                          std::string("attention.head_count_kv must be 1 and value_length key_length"));
  }
  if (p.rope.dims >= p.head_dim) {
    throw Error("MODEL_BAD_METADATA",
                "deepseek4.rope.dimension_count = " + std::to_string(p.rope.dims) +
                    " leaves no unrotated part of deepseek4.attention.key_length = " + std::to_string(p.head_dim));
  }

  CompressedParams& c = p.compressed;
  c.q_lora_rank = b.required_count("attention.q_lora_rank");
  c.output_groups = b.required_count("attention.output_group_count");
  c.output_rank = b.required_count("attention.output_lora_rank");
  if (p.heads % c.output_groups != 0) {
    throw Error("MODEL_BAD_METADATA",
                "deepseek4.attention.head_count is not a multiple of "
                "deepseek4.attention.output_group_count");
  }
  const std::optional<std::vector<int64_t>> ratios = file.get_int_array("deepseek4.attention.compress_ratios");
  if (!ratios || static_cast<int64_t>(ratios->size()) < p.layers + p.nextn_layers) {
    throw Error("MODEL_BAD_METADATA", "deepseek4.attention.compress_ratios must hold one ratio per layer");
  }
  // llama.cpp's next-token-prediction layers attend their window alone.
  for (int64_t l = p.layers; l < p.layers + p.nextn_layers; ++l) {
    if ((*ratios)[static_cast<size_t>(l)] != 0) {
      throw Error("UNSUPPORTED_FEATURE", "deepseek4.attention.compress_ratios gives next-token-prediction layer " +
                                             std::to_string(l) + " compressed rows; llama.cpp's run the window alone");
    }
  }
  c.ratios.assign(ratios->begin(), ratios->begin() + p.layers);
  for (const int64_t ratio : c.ratios) {
    if (ratio != 0 && ratio != CompressedParams::kOverlapRatio && ratio != 128) {
      throw Error("UNSUPPORTED_FEATURE", "deepseek4.attention.compress_ratios holds " + std::to_string(ratio) +
                                             "; the ratios 0, 4 and 128 are supported (as llama.cpp)");
    }
  }
  p.sliding_window = b.required_count("attention.sliding_window");
  p.attention_scale = 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  // Layers without compressed rows rotate by the file's base without YaRN; the others, their
  // compressed rows and the indexer by compress_rope_freq_base with it. llama.cpp's attention
  // factor undoes YaRN's magnitude (a rotation of magnitude 1).
  c.rope = p.rope;
  c.rope.freq_base = b.positive_float_or("attention.compress_rope_freq_base", p.rope.freq_base);
  c.rope.attn_factor = c.rope.ext_factor == 0.0f ? 1.0f : 1.0f / (1.0f + 0.1f * std::log(1.0f / c.rope.freq_scale));
  p.rope.freq_scale = 1.0f;
  p.rope.ext_factor = 0.0f;
  p.rope.attn_factor = 1.0f;
  p.windowed_rope = p.rope;

  p.indexer.heads = b.required_count("attention.indexer.head_count");
  p.indexer.head_dim = b.required_count("attention.indexer.key_length");
  p.indexer.top_k = b.required_count("attention.indexer.top_k");
  p.indexer.rope_style = cpu::RopeStyle::kNormal;
  b.check_at_most("rope.dimension_count", p.rope.dims, "attention.indexer.key_length", p.indexer.head_dim);
  if (p.indexer.head_dim < 64 || (p.indexer.head_dim & (p.indexer.head_dim - 1)) != 0) {
    throw Error("UNSUPPORTED_FEATURE",
                "deepseek4.attention.indexer.key_length = " + std::to_string(p.indexer.head_dim) +
                    ": the indexer's Hadamard rotation needs a power of two from 64 up");
  }

  p.hyper.streams = b.required_count("hyper_connection.count");
  if (p.hyper.streams != kHyperStreams) {
    throw Error("UNSUPPORTED_FEATURE", "deepseek4.hyper_connection.count = " + std::to_string(p.hyper.streams) +
                                           ": four streams are supported (as llama.cpp)");
  }
  p.hyper.sinkhorn_iterations = b.required_count("hyper_connection.sinkhorn_iterations");
  p.hyper.epsilon = b.float_or("hyper_connection.epsilon", 0.0f);

  b.read_moe_params(Gating::kSqrtSoftplus, false);
  if (b.required_count("expert_gating_func") != kGatingSqrtSoftplus) {
    throw Error("UNSUPPORTED_FEATURE", "deepseek4.expert_gating_func: only sqrt(softplus) scoring (4) is supported");
  }
  p.router.normalize = b.bool_or("expert_weights_norm", false);
  p.router.scale = b.float_or("expert_weights_scale", 1.0f);
  p.shared_feed_forward = b.required_count("expert_shared_count") * p.expert_feed_forward;
  const float expert_limit = one_limit(b, "swiglu_clamp_exp", p.layers, 0.0f);
  p.activation = limited(expert_limit);
  p.shared_activation = limited(one_limit(b, "swiglu_clamp_shexp", p.layers, expert_limit));
  const int64_t hash_layers = b.count_or("hash_layer_count", 0);
  b.check_at_most("hash_layer_count", hash_layers, "block_count", p.layers);

  b.bind_embeddings();
  for (int64_t l = 0; l < p.layers; ++l) bind_layer(b, l, b.model().layers[l], c.ratios[l], hash_layers);
  // The next-token-prediction layers: their window alone, taking the model's streams (as
  // llama.cpp's deepseek4 graph_mtp).
  for (int64_t l = p.layers; l < p.layers + p.nextn_layers; ++l) {
    bind_layer(b, l, b.model().nextn_layers[l - p.layers].blocks, 0, hash_layers);
    b.bind_nextn(l);
    b.model().nextn_layers[l - p.layers].hidden = NextnHidden::kStreams;
  }
  b.model().output_hyper = {b.matrix("output_hc_fn.weight", p.hyper.streams * p.embedding, p.hyper.streams),
                            b.vector("output_hc_base.weight", p.hyper.streams), b.vector("output_hc_scale.weight", 1)};
}

}  // namespace bloomery::model
