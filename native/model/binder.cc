#include "model/binder.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "base/error.h"
#include "cpu/cpu_dispatch.h"

namespace bloomery::model {

namespace {

std::string shape_text(const std::array<uint64_t, gguf::kMaxDims>& shape, uint32_t dims) {
  std::string s = "[";
  for (uint32_t d = 0; d < dims; ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
  return s + "]";
}

std::string shape_text(std::initializer_list<int64_t> shape) {
  std::string s = "[";
  bool first = true;
  for (const int64_t n : shape) {
    s += (first ? "" : ", ") + std::to_string(n);
    first = false;
  }
  return s + "]";
}

// llama.cpp's numbering of expert_gating_func.
constexpr int64_t kGatingSoftmax = 1;
constexpr int64_t kGatingSigmoid = 2;

// The attention factor llama.cpp gives YaRN (llama-context.cpp): the magnitude the rotation
// would add, cancelled, times YaRN's mscale unless the family has a yarn_log_multiplier
// (`log_mul`; only DeepSeek's, whose two mscales are then equal). Other scaling: 1.
float yarn_attn_factor(const cpu::RopeParams& rope, float log_mul) {
  if (rope.ext_factor == 0.0f) return 1.0f;
  const float factor = 1.0f / rope.freq_scale;
  const auto mscale = [factor](float m) { return factor <= 1.0f ? 1.0f : 0.1f * m * std::log(factor) + 1.0f; };
  return (log_mul != 0.0f ? 1.0f : mscale(1.0f)) / (1.0f + 0.1f * std::log(factor));
}

}  // namespace

std::string layer_tensor(int64_t layer, std::string_view name, std::string_view kind) {
  return "blk." + std::to_string(layer) + "." + std::string(name) + "." + std::string(kind);
}

Binder::Binder(Model& model, std::string architecture) : model_(model), architecture_(std::move(architecture)) {
  model_.params.architecture = architecture_;
}

LayerWeights& Binder::weights(int64_t layer) {
  const int64_t pass_layers = model_.params.layers;
  return layer < pass_layers ? model_.layers[layer] : model_.nextn_layers[layer - pass_layers].blocks;
}

std::string Binder::key(std::string_view suffix) const { return architecture_ + "." + std::string(suffix); }

int64_t Binder::required_count(std::string_view suffix) const { return count_at_least(suffix, 1); }

int64_t Binder::count_at_least(std::string_view suffix, int64_t least) const {
  const std::string k = key(suffix);
  const std::optional<int64_t> value = model_.file.get_int(k);
  if (!value) throw Error("MODEL_BAD_METADATA", "the model has no " + k);
  // llama.cpp reads these as 32-bit; the bound also keeps products of two of them within int64.
  if (*value < least || *value > std::numeric_limits<int32_t>::max()) {
    throw Error("MODEL_BAD_METADATA", k + " = " + std::to_string(*value) + " is out of range");
  }
  return *value;
}

// Where leaving a count out means none (a fallback of 0: no leading dense layers, no shared
// experts), the file may also say 0.
int64_t Binder::count_or(std::string_view suffix, int64_t fallback) const {
  if (!model_.file.find(key(suffix))) return fallback;
  return count_at_least(suffix, fallback == 0 ? 0 : 1);
}

float Binder::float_or(std::string_view suffix, float fallback) const {
  const std::optional<double> value = model_.file.get_float(key(suffix));
  if (!value) return fallback;
  if (!std::isfinite(*value)) throw Error("MODEL_BAD_METADATA", key(suffix) + " is not a finite number");
  return static_cast<float>(*value);
}

float Binder::positive_float_or(std::string_view suffix, float fallback) const {
  const std::optional<double> value = model_.file.get_float(key(suffix));
  if (!value) return fallback;
  const float f = static_cast<float>(*value);
  if (!std::isfinite(f) || !(f > 0)) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", *value);
    throw Error("MODEL_BAD_METADATA", key(suffix) + " = " + text + " is not a positive number");
  }
  return f;
}

bool Binder::bool_or(std::string_view suffix, bool fallback) const {
  return model_.file.get_bool(key(suffix)).value_or(fallback);
}

void Binder::check_at_most(std::string_view suffix, int64_t value, std::string_view limit_suffix, int64_t limit) const {
  if (value <= limit) return;
  throw Error("MODEL_BAD_METADATA", key(suffix) + " = " + std::to_string(value) + " exceeds " + key(limit_suffix) +
                                        " = " + std::to_string(limit));
}

void Binder::check_all_bound() const {
  if (bound_.size() == model_.file.tensors().size()) return;
  for (const gguf::Tensor& t : model_.file.tensors()) {
    if (bound_.count(t.name)) continue;
    throw Error("MODEL_UNEXPECTED_TENSOR", "tensor " + std::string(t.name) + " is not part of a " + architecture_ +
                                               " model of " + key("block_count") + " = " +
                                               std::to_string(model_.params.layers + model_.params.nextn_layers) +
                                               " layers");
  }
}

// A special token id: absent is -1; present, it must name a token of the vocabulary.
int32_t Binder::token_id(std::string_view key) const {
  const std::optional<int64_t> id = model_.file.get_int(key);
  if (!id) return -1;
  if (*id < 0 || *id >= model_.params.vocab) {
    throw Error("MODEL_BAD_METADATA", std::string(key) + " = " + std::to_string(*id) +
                                          " is not a token of the vocabulary of " +
                                          std::to_string(model_.params.vocab));
  }
  return static_cast<int32_t>(*id);
}

const gguf::Tensor& Binder::tensor(const std::string& name, std::initializer_list<int64_t> shape) const {
  const gguf::Tensor* t = model_.file.find_tensor(name);
  if (!t) throw Error("MODEL_MISSING_TENSOR", architecture_ + " model has no tensor " + name);
  bool same = true;
  uint32_t d = 0;
  for (const int64_t n : shape) same = same && t->shape[d++] == static_cast<uint64_t>(n);
  for (; d < gguf::kMaxDims; ++d) same = same && t->shape[d] == 1;
  if (!same) {
    throw Error("MODEL_TENSOR_SHAPE",
                "tensor " + name + " has shape " + shape_text(t->shape, t->n_dims) + ", expected " + shape_text(shape));
  }
  bound_.insert(t->name);
  return *t;
}

cpu::WeightMatrix Binder::bind_matrix(const gguf::Tensor& t) const {
  cpu::WeightMatrix w;
  try {
    w.kernels = &cpu::host_quant_kernels(t.type.id);
  } catch (const Error& e) {
    if (e.code() != "UNSUPPORTED_QUANT") throw;
    throw Error("UNSUPPORTED_QUANT", "tensor " + std::string(t.name) + " has type " + std::string(t.type.name) +
                                         ", which the CPU backend does not support");
  }
  w.data = t.data;
  w.cols = static_cast<int64_t>(t.shape[0]);
  w.rows = static_cast<int64_t>(t.shape[1]);
  w.row_bytes = *quant::ggml_row_bytes(t.type, t.shape[0]);
  return w;
}

cpu::WeightMatrix Binder::matrix(const std::string& name, int64_t cols, int64_t rows) const {
  return bind_matrix(tensor(name, {cols, rows}));
}

cpu::WeightMatrix Binder::optional_matrix(const std::string& name, int64_t cols, int64_t rows) const {
  return model_.file.find_tensor(name) ? matrix(name, cols, rows) : cpu::WeightMatrix{};
}

cpu::ExpertMatrices Binder::stacked(const std::string& name, int64_t cols, int64_t rows, int64_t count) const {
  return {bind_matrix(tensor(name, {cols, rows, count})), count};
}

const float* Binder::vector(const std::string& name, int64_t length) const {
  const gguf::Tensor& t = tensor(name, {length});
  if (t.type.id != 0) {
    throw Error("UNSUPPORTED_QUANT", "tensor " + name + " has type " + std::string(t.type.name) + ", expected F32");
  }
  return reinterpret_cast<const float*>(t.data);
}

const float* Binder::matrix_of_floats(const std::string& name, int64_t cols, int64_t rows) const {
  const gguf::Tensor& t = tensor(name, {cols, rows});
  if (t.type.id != 0) {
    throw Error("UNSUPPORTED_QUANT", "tensor " + name + " has type " + std::string(t.type.name) + ", expected F32");
  }
  return reinterpret_cast<const float*>(t.data);
}

const int32_t* Binder::id_table(const std::string& name, int64_t cols, int64_t rows, int64_t below) const {
  constexpr uint32_t kI32 = 26;  // ggml's type id
  const gguf::Tensor& t = tensor(name, {cols, rows});
  if (t.type.id != kI32) {
    throw Error("UNSUPPORTED_QUANT", "tensor " + name + " has type " + std::string(t.type.name) + ", expected I32");
  }
  const auto* ids = reinterpret_cast<const int32_t*>(t.data);
  for (int64_t i = 0; i < cols * rows; ++i) {
    if (ids[i] < 0 || ids[i] >= below) {
      throw Error("MODEL_BAD_METADATA", "tensor " + name + " holds " + std::to_string(ids[i]) + " at " +
                                            std::to_string(i) + ", not below " + std::to_string(below));
    }
  }
  return ids;
}

const float* Binder::optional_vector(const std::string& name, int64_t length) const {
  return model_.file.find_tensor(name) ? vector(name, length) : nullptr;
}

void Binder::read_common_params(cpu::RopeStyle style) {
  HyperParams& p = model_.params;
  const gguf::GgufFile& file = model_.file;
  const int64_t blocks = required_count("block_count");
  // Every layer has tensors: a larger count is a lie, and would size the layer table from it.
  if (static_cast<uint64_t>(blocks) > file.tensors().size()) {
    throw Error("MODEL_BAD_METADATA", key("block_count") + " = " + std::to_string(blocks) +
                                          ", but the file holds only " + std::to_string(file.tensors().size()) +
                                          " tensors");
  }
  p.nextn_layers = file.find(key("nextn_predict_layers")) ? *file.get_uint(key("nextn_predict_layers")) : 0;
  if (p.nextn_layers >= blocks) check_at_most("nextn_predict_layers", p.nextn_layers, "block_count", blocks - 1);
  p.layers = blocks - p.nextn_layers;
  p.embedding = required_count("embedding_length");
  p.context_length = required_count("context_length");
  p.heads = required_count("attention.head_count");
  kv_heads_ = per_layer_counts("attention.head_count_kv", blocks);
  if (kv_heads_.empty()) kv_heads_.assign(static_cast<size_t>(blocks), p.heads);
  p.kv_heads = 0;
  for (const int64_t kv : kv_heads_) {
    if (p.heads % kv != 0) {
      throw Error("MODEL_BAD_METADATA", key("attention.head_count") + " = " + std::to_string(p.heads) +
                                            " is not a multiple of " + key("attention.head_count_kv") + " = " +
                                            std::to_string(kv));
    }
    p.kv_heads = std::max(p.kv_heads, kv);
  }
  if (!file.find(key("attention.key_length")) && p.embedding % p.heads != 0) {
    throw Error("MODEL_BAD_METADATA", key("embedding_length") + " = " + std::to_string(p.embedding) +
                                          " is not a multiple of " + key("attention.head_count") + " = " +
                                          std::to_string(p.heads) + ", and there is no " + key("attention.key_length"));
  }
  p.head_dim = count_or("attention.key_length", p.embedding / p.heads);
  p.value_dim = count_or("attention.value_length", p.head_dim);
  if (!file.find(key("attention.layer_norm_rms_epsilon"))) {
    throw Error("MODEL_BAD_METADATA", "the model has no " + key("attention.layer_norm_rms_epsilon"));
  }
  p.rms_epsilon = positive_float_or("attention.layer_norm_rms_epsilon", 0);
  if (const std::optional<int64_t> pooling = file.get_int(key("pooling_type"))) {
    if (*pooling < 0 || *pooling > static_cast<int64_t>(Pooling::kRank)) {
      throw Error("MODEL_BAD_METADATA", key("pooling_type") + " = " + std::to_string(*pooling) +
                                            " is not a pooling type (0 none, 1 mean, 2 cls, 3 last, 4 rank)");
    }
    p.pooling = static_cast<Pooling>(*pooling);
  }

  cpu::RopeParams& rope = p.rope;
  rope.style = style;
  rope.dims = count_or("rope.dimension_count", p.head_dim);
  if (rope.dims % 2 != 0) {
    throw Error("MODEL_BAD_METADATA", key("rope.dimension_count") + " = " + std::to_string(rope.dims) + " is odd");
  }
  rope.freq_base = positive_float_or("rope.freq_base", 10000.0f);
  const std::string scaling(file.get_string(key("rope.scaling.type")).value_or("none"));
  if (scaling != "none" && scaling != "linear" && scaling != "yarn") {
    throw Error("UNSUPPORTED_FEATURE", key("rope.scaling.type") + " = " + scaling + " is not supported");
  }
  const float factor = positive_float_or("rope.scaling.factor", positive_float_or("rope.scale_linear", 1.0f));
  rope.freq_scale = scaling != "none" || file.find(key("rope.scale_linear")) ? 1.0f / factor : 1.0f;
  rope.freq_factors = optional_vector("rope_freqs.weight", rope.dims / 2);
  if (scaling == "yarn") {
    rope.original_context = count_or("rope.scaling.original_context_length", p.context_length);
    rope.ext_factor = 1.0f;
  }
  rope.attn_factor = yarn_attn_factor(rope, 0.0f) * positive_float_or("rope.scaling.attn_factor", 1.0f);
  p.windowed_rope = rope;
  p.attention_scale = 1.0f / std::sqrt(static_cast<float>(p.head_dim));
}

std::vector<int64_t> Binder::per_layer_counts(std::string_view suffix, int64_t layers) const {
  const gguf::Value* value = model_.file.find(key(suffix));
  if (!value) return {};
  if (value->type != gguf::ValueType::Array)
    return std::vector<int64_t>(static_cast<size_t>(layers), required_count(suffix));
  std::vector<int64_t> counts = *model_.file.get_int_array(key(suffix));
  if (static_cast<int64_t>(counts.size()) != layers) {
    throw Error("MODEL_BAD_METADATA",
                key(suffix) + " has " + std::to_string(counts.size()) + " entries, expected " + std::to_string(layers));
  }
  for (const int64_t n : counts) {
    if (n < 1 || n > std::numeric_limits<int32_t>::max()) {
      throw Error("MODEL_BAD_METADATA", key(suffix) + " holds " + std::to_string(n) + ", out of range");
    }
  }
  return counts;
}

Gating Binder::required_gating_func() const {
  if (!model_.file.find(key("expert_gating_func"))) {
    throw Error("MODEL_BAD_METADATA", "the model has no " + key("expert_gating_func"));
  }
  const int64_t func = required_count("expert_gating_func");
  if (func != kGatingSoftmax && func != kGatingSigmoid) {
    throw Error("UNSUPPORTED_FEATURE", key("expert_gating_func") + " = " + std::to_string(func) + " is not supported");
  }
  return func == kGatingSigmoid ? Gating::kSigmoid : Gating::kSoftmax;
}

void Binder::read_moe_params(Gating gating, bool normalize) {
  HyperParams& p = model_.params;
  p.experts = required_count("expert_count");
  p.experts_used = required_count("expert_used_count");
  check_at_most("expert_used_count", p.experts_used, "expert_count", p.experts);
  p.expert_feed_forward = required_count("expert_feed_forward_length");
  RouterParams& r = p.router;
  r.gating = gating;
  r.normalize = normalize;
  r.groups = count_or("expert_group_count", 1);
  r.groups_used = count_or("expert_group_used_count", r.groups);
  check_at_most("expert_group_used_count", r.groups_used, "expert_group_count", r.groups);
  if (p.experts % r.groups != 0) {
    throw Error("MODEL_BAD_METADATA", key("expert_count") + " = " + std::to_string(p.experts) +
                                          " is not a multiple of " + key("expert_group_count") + " = " +
                                          std::to_string(r.groups));
  }
  // Each group is scored by its two best experts: a choice of groups needs two to a group.
  if (r.groups > 1 && p.experts / r.groups < 2) {
    throw Error("MODEL_BAD_METADATA", key("expert_group_count") + " leaves fewer than two experts to a group");
  }
  check_at_most("expert_used_count", p.experts_used, "expert_group_used_count experts",
                r.groups_used * (p.experts / r.groups));
  const int64_t shared = count_or("expert_shared_count", 0);
  p.shared_feed_forward = shared * p.expert_feed_forward;
}

void Binder::read_router_options() {
  RouterParams& r = model_.params.router;
  if (model_.file.find(key("expert_gating_func"))) r.gating = required_gating_func();
  r.normalize = bool_or("expert_weights_norm", r.normalize);
  const float scale = float_or("expert_weights_scale", 0.0f);
  if (scale != 0.0f) r.scale = scale;
}

void Binder::read_mla_params() {
  HyperParams& p = model_.params;
  MlaParams& m = p.mla;
  m.q_lora_rank = count_or("attention.q_lora_rank", 0);
  m.kv_lora_rank = required_count("attention.kv_lora_rank");
  if (!model_.file.find(key("attention.key_length_mla"))) {
    throw Error("UNSUPPORTED_FEATURE", "the model has no " + key("attention.key_length_mla") +
                                           ": files with an unsplit attn_kv_b are not supported; convert the model "
                                           "again with a current llama.cpp");
  }
  const int64_t key_length = required_count("attention.key_length_mla");
  m.value_dim = required_count("attention.value_length_mla");
  m.rope_dim = p.rope.dims;
  if (m.rope_dim == 0 || m.rope_dim >= key_length) {
    throw Error("MODEL_BAD_METADATA", key("rope.dimension_count") + " = " + std::to_string(m.rope_dim) +
                                          " leaves no unrotated part of " + key("attention.key_length_mla") + " = " +
                                          std::to_string(key_length));
  }
  m.nope_dim = key_length - m.rope_dim;
  p.head_dim = key_length;
  p.kv_heads = 1;
  // DeepSeek's YaRN (llama.cpp's deepseek2 graph): the converter stored yarn_log_multiplier
  // times 0.1, and the scores are scaled by mscale^2 while the rotation keeps magnitude 1.
  cpu::RopeParams& rope = p.rope;
  const float log_mul = float_or("rope.scaling.yarn_log_multiplier", 0.0f) / 0.1f;
  rope.attn_factor = yarn_attn_factor(rope, log_mul) * positive_float_or("rope.scaling.attn_factor", 1.0f);
  const float log_scale = std::log(1.0f / rope.freq_scale);
  const float mscale = rope.attn_factor * (1.0f + 0.1f * log_scale) * (1.0f + 0.1f * log_mul * log_scale);
  p.attention_scale = mscale * mscale / std::sqrt(static_cast<float>(key_length));
}

void Binder::read_indexer_params(cpu::RopeStyle rope_style, float norm_epsilon) {
  HyperParams& p = model_.params;
  IndexerParams& x = p.indexer;
  x.heads = required_count("attention.indexer.head_count");
  x.head_dim = required_count("attention.indexer.key_length");
  x.top_k = required_count("attention.indexer.top_k");
  x.rope_style = rope_style;
  x.norm_epsilon = norm_epsilon;
  if (p.mla.q_lora_rank == 0) {
    throw Error("MODEL_BAD_METADATA",
                "the lightning indexer reads the low-rank query: " + key("attention.q_lora_rank") + " is missing");
  }
  check_at_most("rope.dimension_count", p.mla.rope_dim, "attention.indexer.key_length", x.head_dim);
  // llama.cpp multiplies by one Hadamard matrix as wide as the head: a power of two from 64 up.
  if (x.head_dim < 64 || (x.head_dim & (x.head_dim - 1)) != 0) {
    throw Error("UNSUPPORTED_FEATURE", key("attention.indexer.key_length") + " = " + std::to_string(x.head_dim) +
                                           ": the indexer's Hadamard rotation needs a power of two from 64 up");
  }
}

void Binder::bind_embeddings() {
  HyperParams& p = model_.params;
  const gguf::Tensor* embedding = model_.file.find_tensor("token_embd.weight");
  if (!embedding) throw Error("MODEL_MISSING_TENSOR", architecture_ + " model has no tensor token_embd.weight");
  p.vocab = static_cast<int64_t>(embedding->shape[1]);
  // The tokenizer's ids index the embedding and the output's rows: they must be the same set.
  const auto tokens = model_.file.get_strings("tokenizer.ggml.tokens");
  if (tokens && tokens->size() != static_cast<uint64_t>(p.vocab)) {
    throw Error("MODEL_BAD_METADATA", "tokenizer.ggml.tokens has " + std::to_string(tokens->size()) +
                                          " entries, but token_embd.weight has " + std::to_string(p.vocab) + " rows");
  }
  model_.token_embedding = matrix("token_embd.weight", p.embedding, p.vocab);
  model_.output_norm = vector("output_norm.weight", p.embedding);
  model_.output = optional_matrix("output.weight", p.embedding, p.vocab);
  if (model_.output.empty()) model_.output = model_.token_embedding;
  p.bos_token = token_id("tokenizer.ggml.bos_token_id");
  p.eos_token = token_id("tokenizer.ggml.eos_token_id");
  model_.layers.resize(static_cast<size_t>(p.layers));
  model_.nextn_layers.resize(static_cast<size_t>(p.nextn_layers));
}

void Binder::bind_rank_head(const RankHeadOptions& options) {
  const auto labels = model_.file.get_strings(key("classifier.output_labels"));
  const int64_t rows = labels && !labels->empty() ? static_cast<int64_t>(labels->size()) : 1;
  RankHead& head = model_.rank_head;
  head.output = optional_matrix("cls.output.weight", model_.params.embedding, rows);
  if (head.output.empty()) return;
  head.output_bias = optional_vector("cls.output.bias", rows);
  head.last_row = options.last_row;
  head.softmax = options.softmax;
}

void Binder::bind_gqa_attention(int64_t layer, const GqaOptions& options) {
  HyperParams& p = model_.params;
  if (p.rope.dims > p.head_dim) {
    throw Error("MODEL_BAD_METADATA", key("rope.dimension_count") + " = " + std::to_string(p.rope.dims) +
                                          " does not fit a head of " + std::to_string(p.head_dim));
  }
  const int64_t kv_heads = kv_heads_[static_cast<size_t>(layer)];
  const int64_t q_width = p.heads * p.head_dim;
  const int64_t k_width = kv_heads * p.head_dim, v_width = kv_heads * p.value_dim;
  AttentionWeights& a = weights(layer).attention;
  a.kind = AttentionKind::kGqa;
  a.norm = vector(layer_tensor(layer, "attn_norm"), p.embedding);
  GqaWeights& w = a.gqa;
  w.kv_heads = kv_heads;
  const std::string fused = layer_tensor(layer, "attn_qkv");
  if (model_.file.find_tensor(fused)) {
    if (options.output_gate) {
      throw Error("UNSUPPORTED_FEATURE",
                  "tensor " + fused + " (fused Q, K and V of a gated attention layer) is not supported");
    }
    // One matrix of Q's rows, then K's, then V's: each a view of its rows.
    const cpu::WeightMatrix qkv = matrix(fused, p.embedding, q_width + k_width + v_width);
    const auto rows = [&](int64_t first, int64_t count) {
      cpu::WeightMatrix view = qkv;
      view.data = qkv.row(first);
      view.rows = count;
      return view;
    };
    w.q = rows(0, q_width);
    w.k = rows(q_width, k_width);
    w.v = rows(q_width + k_width, v_width);
    if (model_.file.find_tensor(layer_tensor(layer, "attn_qkv", "bias"))) {
      const float* bias = vector(layer_tensor(layer, "attn_qkv", "bias"), q_width + k_width + v_width);
      w.q_bias = bias;
      w.k_bias = bias + q_width;
      w.v_bias = bias + q_width + k_width;
    }
  } else {
    w.q = matrix(layer_tensor(layer, "attn_q"), p.embedding, options.output_gate ? 2 * q_width : q_width);
    w.k = matrix(layer_tensor(layer, "attn_k"), p.embedding, k_width);
    w.v = matrix(layer_tensor(layer, "attn_v"), p.embedding, v_width);
    if (options.biases) {
      w.q_bias = optional_vector(layer_tensor(layer, "attn_q", "bias"), q_width);
      w.k_bias = optional_vector(layer_tensor(layer, "attn_k", "bias"), k_width);
      w.v_bias = optional_vector(layer_tensor(layer, "attn_v", "bias"), v_width);
    }
  }
  if (options.qk_norms) {
    w.q_norm = vector(layer_tensor(layer, "attn_q_norm"), p.head_dim);
    w.k_norm = vector(layer_tensor(layer, "attn_k_norm"), p.head_dim);
  } else if (options.optional_qk_norms) {
    w.q_norm = optional_vector(layer_tensor(layer, "attn_q_norm"), p.head_dim);
    w.k_norm = optional_vector(layer_tensor(layer, "attn_k_norm"), p.head_dim);
  } else if (options.whole_qk_norms) {
    w.q_norm = vector(layer_tensor(layer, "attn_q_norm"), q_width);
    w.k_norm = vector(layer_tensor(layer, "attn_k_norm"), k_width);
    w.qk_norm_whole = true;
  }
  w.output_gate = options.output_gate;
  a.output = matrix(layer_tensor(layer, "attn_output"), p.heads * p.value_dim, p.embedding);
  if (options.output_bias) a.output_bias = vector(layer_tensor(layer, "attn_output", "bias"), p.embedding);
  if (options.sinks) a.sinks = vector(layer_tensor(layer, "attn_sinks"), p.heads);
  if (options.optional_sinks) a.sinks = optional_vector(layer_tensor(layer, "attn_sinks"), p.heads);
}

void Binder::bind_mla_attention(int64_t layer) {
  const HyperParams& p = model_.params;
  const MlaParams& m = p.mla;
  AttentionWeights& a = weights(layer).attention;
  a.kind = AttentionKind::kMla;
  a.norm = vector(layer_tensor(layer, "attn_norm"), p.embedding);
  MlaWeights& w = a.mla;
  const int64_t q_width = p.heads * (m.nope_dim + m.rope_dim);
  if (m.q_lora_rank > 0) {
    w.q_a = matrix(layer_tensor(layer, "attn_q_a"), p.embedding, m.q_lora_rank);
    w.q_a_norm = vector(layer_tensor(layer, "attn_q_a_norm"), m.q_lora_rank);
    w.q = matrix(layer_tensor(layer, "attn_q_b"), m.q_lora_rank, q_width);
  } else {
    w.q = matrix(layer_tensor(layer, "attn_q"), p.embedding, q_width);
  }
  w.kv_a = matrix(layer_tensor(layer, "attn_kv_a_mqa"), p.embedding, m.kv_lora_rank + m.rope_dim);
  w.kv_a_norm = vector(layer_tensor(layer, "attn_kv_a_norm"), m.kv_lora_rank);
  w.k_b = stacked(layer_tensor(layer, "attn_k_b"), m.nope_dim, m.kv_lora_rank, p.heads);
  w.v_b = stacked(layer_tensor(layer, "attn_v_b"), m.kv_lora_rank, m.value_dim, p.heads);
  a.output = matrix(layer_tensor(layer, "attn_output"), p.heads * m.value_dim, p.embedding);
}

void Binder::bind_sparse_mla_attention(int64_t layer, bool own_indexer) {
  bind_mla_attention(layer);
  const HyperParams& p = model_.params;
  const IndexerParams& x = p.indexer;
  AttentionWeights& a = weights(layer).attention;
  a.kind = AttentionKind::kSparseMla;
  // A layer that reuses another's choice may still carry indexer tensors (llama.cpp loads them
  // where present and leaves them unused): checked, then left out of its weights.
  if (!own_indexer && !model_.file.find_tensor(layer_tensor(layer, "indexer.attn_q_b"))) return;
  IndexerWeights bound;
  IndexerWeights& w = own_indexer ? a.indexer : bound;
  w.q = matrix(layer_tensor(layer, "indexer.attn_q_b"), p.mla.q_lora_rank, x.heads * x.head_dim);
  w.k = matrix(layer_tensor(layer, "indexer.attn_k"), p.embedding, x.head_dim);
  w.k_norm = vector(layer_tensor(layer, "indexer.k_norm"), x.head_dim);
  w.k_norm_bias = vector(layer_tensor(layer, "indexer.k_norm", "bias"), x.head_dim);
  w.head_weights = matrix(layer_tensor(layer, "indexer.proj"), p.embedding, x.heads);
}

int64_t Binder::read_leading_dense() {
  const int64_t dense = count_or("leading_dense_block_count", 0);
  check_at_most("leading_dense_block_count", dense, "block_count", model_.params.layers);
  return dense;
}

void Binder::bind_shared_moe_ffn(int64_t layer, int64_t leading_dense, std::string_view norm) {
  if (layer < leading_dense) {
    bind_dense_ffn(layer, norm);
  } else {
    bind_moe_ffn(layer, {.shared_experts = true, .selection_bias = true}, norm);
  }
  if (layer >= model_.params.layers) bind_nextn(layer);
}

void Binder::bind_nextn(int64_t layer) {
  const HyperParams& p = model_.params;
  NextnLayer& n = model_.nextn_layers[layer - p.layers];
  n.eh_proj = matrix(layer_tensor(layer, "nextn.eh_proj"), 2 * p.embedding, p.embedding);
  n.enorm = vector(layer_tensor(layer, "nextn.enorm"), p.embedding);
  n.hnorm = vector(layer_tensor(layer, "nextn.hnorm"), p.embedding);
  n.embed_tokens = optional_matrix(layer_tensor(layer, "nextn.embed_tokens"), p.embedding, p.vocab);
  n.shared_head = optional_matrix(layer_tensor(layer, "nextn.shared_head_head"), p.embedding, p.vocab);
  n.shared_head_norm = optional_vector(layer_tensor(layer, "nextn.shared_head_norm"), p.embedding);
}

SwigluWeights Binder::swiglu(int64_t layer, std::string_view suffix, int64_t width) const {
  const HyperParams& p = model_.params;
  const std::string s(suffix);
  return {matrix(layer_tensor(layer, "ffn_gate" + s), p.embedding, width),
          matrix(layer_tensor(layer, "ffn_up" + s), p.embedding, width),
          matrix(layer_tensor(layer, "ffn_down" + s), width, p.embedding)};
}

void Binder::bind_dense_ffn(int64_t layer, std::string_view norm) {
  HyperParams& p = model_.params;
  if (p.feed_forward == 0) p.feed_forward = required_count("feed_forward_length");
  FfnWeights& f = weights(layer).ffn;
  f.kind = FfnKind::kDense;
  f.norm = vector(layer_tensor(layer, norm), p.embedding);
  f.dense = swiglu(layer, "", p.feed_forward);
}

void Binder::bind_moe_ffn(int64_t layer, const MoeOptions& options, std::string_view norm) {
  const HyperParams& p = model_.params;
  FfnWeights& f = weights(layer).ffn;
  f.kind = FfnKind::kMoe;
  f.norm = vector(layer_tensor(layer, norm), p.embedding);
  if (model_.file.find_tensor(layer_tensor(layer, "ffn_gate_up_exps"))) {
    throw Error("UNSUPPORTED_FEATURE", "tensor " + layer_tensor(layer, "ffn_gate_up_exps") +
                                           " (fused gate and up experts) is not supported; convert the model with "
                                           "separate ffn_gate_exps and ffn_up_exps");
  }
  RoutedExperts& r = f.routed;
  r.router = matrix(layer_tensor(layer, "ffn_gate_inp"), p.embedding, p.experts);
  if (options.selection_bias) r.selection_bias = optional_vector(layer_tensor(layer, "exp_probs_b", "bias"), p.experts);
  r.gate = stacked(layer_tensor(layer, "ffn_gate_exps"), p.embedding, p.expert_feed_forward, p.experts);
  r.up = stacked(layer_tensor(layer, "ffn_up_exps"), p.embedding, p.expert_feed_forward, p.experts);
  r.down = stacked(layer_tensor(layer, "ffn_down_exps"), p.expert_feed_forward, p.embedding, p.experts);
  if (options.router_bias) r.router_bias = vector(layer_tensor(layer, "ffn_gate_inp", "bias"), p.experts);
  if (options.expert_biases) {
    r.biases.gate = matrix_of_floats(layer_tensor(layer, "ffn_gate_exps", "bias"), p.expert_feed_forward, p.experts);
    r.biases.up = matrix_of_floats(layer_tensor(layer, "ffn_up_exps", "bias"), p.expert_feed_forward, p.experts);
    r.biases.down = matrix_of_floats(layer_tensor(layer, "ffn_down_exps", "bias"), p.embedding, p.experts);
  }
  if (options.shared_experts && p.shared_feed_forward > 0) f.dense = swiglu(layer, "_shexp", p.shared_feed_forward);
  if (options.shared_gate) f.shared_gate = matrix(layer_tensor(layer, "ffn_gate_inp_shexp"), p.embedding, 1);
}

void Binder::read_delta_net_params(bool grouped_heads) {
  DeltaNetParams& d = model_.params.delta_net;
  d.conv_kernel = required_count("ssm.conv_kernel");
  d.head_dim = required_count("ssm.state_size");
  d.k_heads = required_count("ssm.group_count");
  d.v_heads = required_count("ssm.time_step_rank");
  d.grouped_heads = grouped_heads;
  if (d.conv_kernel < 2) throw Error("MODEL_BAD_METADATA", key("ssm.conv_kernel") + " must be at least 2");
  if (d.v_heads % d.k_heads != 0) {
    throw Error("MODEL_BAD_METADATA", key("ssm.time_step_rank") + " = " + std::to_string(d.v_heads) +
                                          " is not a multiple of " + key("ssm.group_count") + " = " +
                                          std::to_string(d.k_heads));
  }
  const int64_t inner = required_count("ssm.inner_size");
  if (inner != d.v_heads * d.head_dim) {
    throw Error("UNSUPPORTED_FEATURE", key("ssm.inner_size") + " = " + std::to_string(inner) + " differs from " +
                                           key("ssm.time_step_rank") + " x " + key("ssm.state_size") +
                                           " (value heads of another width than the state's)");
  }
}

void Binder::read_rope_sections() {
  const std::string k = key("rope.dimension_sections");
  const std::optional<std::vector<int64_t>> sections = model_.file.get_int_array(k);
  if (!sections) throw Error("MODEL_BAD_METADATA", "the model has no " + k);
  if (sections->size() < 3 || sections->size() > 4) {
    throw Error("MODEL_BAD_METADATA", k + " has " + std::to_string(sections->size()) + " entries, expected 4");
  }
  cpu::RopeParams& rope = model_.params.rope;
  int64_t sum = 0;
  for (size_t i = 0; i < sections->size(); ++i) {
    const int64_t v = (*sections)[i];
    if (v < 0 || v > rope.dims) throw Error("MODEL_BAD_METADATA", k + " has an entry out of range");
    rope.sections[i] = static_cast<int32_t>(v);
    sum += v;
  }
  if (sum == 0 || sum > rope.dims / 2) {
    throw Error("MODEL_BAD_METADATA", k + " sums to " + std::to_string(sum) + ", not within 1.." +
                                          std::to_string(rope.dims / 2) + " (half of " + key("rope.dimension_count") +
                                          ")");
  }
}

std::vector<bool> Binder::linear_attention_layers() const {
  const int64_t layers = model_.params.layers;
  std::vector<bool> linear(static_cast<size_t>(layers));
  const std::string recurrent_key = key("attention.recurrent_layers");
  if (model_.file.find(recurrent_key)) {
    const std::optional<std::vector<int64_t>> flags = model_.file.get_int_array(recurrent_key);
    if (!flags || flags->size() < static_cast<size_t>(layers)) {
      throw Error("MODEL_BAD_METADATA", recurrent_key + " is not an array of one flag per layer");
    }
    for (int64_t l = 0; l < layers; ++l) linear[l] = (*flags)[l] != 0;
    return linear;
  }
  const int64_t interval = count_or("full_attention_interval", 4);
  for (int64_t l = 0; l < layers; ++l) linear[l] = (l + 1) % interval != 0;
  return linear;
}

void Binder::bind_delta_net(int64_t layer) {
  const HyperParams& p = model_.params;
  const DeltaNetParams& d = p.delta_net;
  AttentionWeights& a = weights(layer).attention;
  a.kind = AttentionKind::kDeltaNet;
  a.norm = vector(layer_tensor(layer, "attn_norm"), p.embedding);
  DeltaNetWeights& w = a.delta_net;
  if (model_.file.find_tensor(layer_tensor(layer, "ssm_in"))) {
    w.qkvz = matrix(layer_tensor(layer, "ssm_in"), p.embedding, d.channels() + d.value_width());
    w.beta_alpha = matrix(layer_tensor(layer, "ssm_ba"), p.embedding, 2 * d.v_heads);
  } else {
    w.qkv = matrix(layer_tensor(layer, "attn_qkv"), p.embedding, d.channels());
    w.z = matrix(layer_tensor(layer, "attn_gate"), p.embedding, d.value_width());
    if (model_.file.find_tensor(layer_tensor(layer, "ssm_ba"))) {
      w.beta_alpha = matrix(layer_tensor(layer, "ssm_ba"), p.embedding, 2 * d.v_heads);
    } else {
      w.beta = matrix(layer_tensor(layer, "ssm_beta"), p.embedding, d.v_heads);
      w.alpha = matrix(layer_tensor(layer, "ssm_alpha"), p.embedding, d.v_heads);
    }
  }
  w.conv = matrix_of_floats(layer_tensor(layer, "ssm_conv1d"), d.conv_kernel, d.channels());
  w.dt_bias = vector(layer_tensor(layer, "ssm_dt", "bias"), d.v_heads);
  w.a = vector("blk." + std::to_string(layer) + ".ssm_a", d.v_heads);
  w.norm = vector(layer_tensor(layer, "ssm_norm"), d.head_dim);
  a.output = matrix(layer_tensor(layer, "ssm_out"), d.value_width(), p.embedding);
}

}  // namespace bloomery::model
