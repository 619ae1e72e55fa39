#include "model/binder.h"

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

}  // namespace

std::string layer_tensor(int64_t layer, std::string_view name, std::string_view kind) {
  return "blk." + std::to_string(layer) + "." + std::string(name) + "." + std::string(kind);
}

Binder::Binder(Model& model, std::string architecture) : model_(model), architecture_(std::move(architecture)) {
  model_.params.architecture = architecture_;
}

std::string Binder::key(std::string_view suffix) const { return architecture_ + "." + std::string(suffix); }

int64_t Binder::required_count(std::string_view suffix) const {
  const std::string k = key(suffix);
  const std::optional<int64_t> value = model_.file.get_int(k);
  if (!value) throw Error("MODEL_BAD_METADATA", "the model has no " + k);
  // llama.cpp reads these as 32-bit; the bound also keeps products of two of them within int64.
  if (*value < 1 || *value > std::numeric_limits<int32_t>::max()) {
    throw Error("MODEL_BAD_METADATA", k + " = " + std::to_string(*value) + " is out of range");
  }
  return *value;
}

int64_t Binder::count_or(std::string_view suffix, int64_t fallback) const {
  return model_.file.find(key(suffix)) ? required_count(suffix) : fallback;
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

void Binder::check_all_bound() const {
  if (bound_.size() == model_.file.tensors().size()) return;
  for (const gguf::Tensor& t : model_.file.tensors()) {
    if (bound_.count(t.name)) continue;
    throw Error("MODEL_UNEXPECTED_TENSOR", "tensor " + std::string(t.name) + " is not part of a " + architecture_ +
                                               " model of " + key("block_count") + " = " +
                                               std::to_string(model_.params.layers) + " layers");
  }
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

cpu::ExpertMatrices Binder::experts(const std::string& name, int64_t cols, int64_t rows, int64_t count) const {
  return {bind_matrix(tensor(name, {cols, rows, count})), count};
}

const float* Binder::vector(const std::string& name, int64_t length) const {
  const gguf::Tensor& t = tensor(name, {length});
  if (t.type.id != 0) {
    throw Error("UNSUPPORTED_QUANT", "tensor " + name + " has type " + std::string(t.type.name) + ", expected F32");
  }
  return reinterpret_cast<const float*>(t.data);
}

const float* Binder::optional_vector(const std::string& name, int64_t length) const {
  return model_.file.find_tensor(name) ? vector(name, length) : nullptr;
}

void Binder::read_common_params(cpu::RopeStyle style) {
  HyperParams& p = model_.params;
  const gguf::GgufFile& file = model_.file;
  const auto bad = [](const std::string& message) { return Error("MODEL_BAD_METADATA", message); };
  p.layers = required_count("block_count");
  // Every layer has tensors: a larger count is a lie, and would size the layer table from it.
  if (static_cast<uint64_t>(p.layers) > file.tensors().size()) {
    throw bad(key("block_count") + " = " + std::to_string(p.layers) + ", but the file holds only " +
              std::to_string(file.tensors().size()) + " tensors");
  }
  p.embedding = required_count("embedding_length");
  p.context_length = required_count("context_length");
  p.heads = required_count("attention.head_count");
  p.kv_heads = count_or("attention.head_count_kv", p.heads);
  if (p.heads % p.kv_heads != 0) {
    throw bad(key("attention.head_count") + " = " + std::to_string(p.heads) + " is not a multiple of " +
              key("attention.head_count_kv") + " = " + std::to_string(p.kv_heads));
  }
  if (!file.find(key("attention.key_length")) && p.embedding % p.heads != 0) {
    throw bad(key("embedding_length") + " = " + std::to_string(p.embedding) + " is not a multiple of " +
              key("attention.head_count") + " = " + std::to_string(p.heads) + ", and there is no " +
              key("attention.key_length"));
  }
  p.head_dim = count_or("attention.key_length", p.embedding / p.heads);
  if (count_or("attention.value_length", p.head_dim) != p.head_dim) {
    throw bad(key("attention.value_length") + " differs from the key length");
  }
  if (!file.find(key("attention.layer_norm_rms_epsilon"))) {
    throw bad("the model has no " + key("attention.layer_norm_rms_epsilon"));
  }
  p.rms_epsilon = positive_float_or("attention.layer_norm_rms_epsilon", 0);

  p.rope.style = style;
  p.rope.dims = count_or("rope.dimension_count", p.head_dim);
  if (p.rope.dims > p.head_dim || p.rope.dims % 2 != 0) {
    throw bad(key("rope.dimension_count") + " = " + std::to_string(p.rope.dims) + " does not fit a head of " +
              std::to_string(p.head_dim));
  }
  p.rope.freq_base = positive_float_or("rope.freq_base", 10000.0f);
  const std::string scaling(file.get_string(key("rope.scaling.type")).value_or("none"));
  if (scaling != "none" && scaling != "linear") {
    throw bad(key("rope.scaling.type") + " = " + scaling + " is not supported");
  }
  const float factor = positive_float_or("rope.scaling.factor", positive_float_or("rope.scale_linear", 1.0f));
  p.rope.freq_scale = scaling == "linear" || file.find(key("rope.scale_linear")) ? 1.0f / factor : 1.0f;
  p.rope.freq_factors = optional_vector("rope_freqs.weight", p.rope.dims / 2);
}

void Binder::read_expert_counts() {
  HyperParams& p = model_.params;
  p.experts = required_count("expert_count");
  p.experts_used = required_count("expert_used_count");
  if (p.experts_used > p.experts) {
    throw Error("MODEL_BAD_METADATA", key("expert_used_count") + " = " + std::to_string(p.experts_used) + " exceeds " +
                                          key("expert_count") + " = " + std::to_string(p.experts));
  }
  p.expert_feed_forward = required_count("expert_feed_forward_length");
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
}

void Binder::bind_attention(int64_t layer, LayerWeights& w) {
  const HyperParams& p = model_.params;
  const int64_t q_width = p.heads * p.head_dim;
  const int64_t kv_width = p.kv_heads * p.head_dim;
  w.attention_norm = vector(layer_tensor(layer, "attn_norm"), p.embedding);
  w.q = matrix(layer_tensor(layer, "attn_q"), p.embedding, q_width);
  w.k = matrix(layer_tensor(layer, "attn_k"), p.embedding, kv_width);
  w.v = matrix(layer_tensor(layer, "attn_v"), p.embedding, kv_width);
  w.attention_output = matrix(layer_tensor(layer, "attn_output"), q_width, p.embedding);
}

void Binder::bind_qk_norms(int64_t layer, LayerWeights& w) {
  const int64_t head_dim = model_.params.head_dim;
  w.q_norm = vector(layer_tensor(layer, "attn_q_norm"), head_dim);
  w.k_norm = vector(layer_tensor(layer, "attn_k_norm"), head_dim);
}

void Binder::bind_dense_ffn(int64_t layer, LayerWeights& w) {
  const HyperParams& p = model_.params;
  w.ffn_norm = vector(layer_tensor(layer, "ffn_norm"), p.embedding);
  w.ffn_gate = matrix(layer_tensor(layer, "ffn_gate"), p.embedding, p.feed_forward);
  w.ffn_up = matrix(layer_tensor(layer, "ffn_up"), p.embedding, p.feed_forward);
  w.ffn_down = matrix(layer_tensor(layer, "ffn_down"), p.feed_forward, p.embedding);
}

}  // namespace bloomery::model
