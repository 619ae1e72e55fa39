// What every architecture file uses to read a GGUF: hyper-parameters under the
// architecture's key prefix, and tensors checked by name, shape and type before binding.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>

#include "model/model.h"

namespace bloomery::model {

class Binder {
 public:
  Binder(Model& model, std::string architecture);

  Model& model() { return model_; }

  // `<arch>.<key>` as a positive integer (at most 2^31 - 1); MODEL_BAD_METADATA naming the key when
  // absent or out of range.
  int64_t required_count(std::string_view key) const;
  int64_t count_or(std::string_view key, int64_t fallback) const;
  // `<arch>.<key>` as a finite positive float, or `fallback` when absent.
  float positive_float_or(std::string_view key, float fallback) const;

  // A matrix of `rows` rows of `cols` elements (GGUF shape [cols, rows]).
  cpu::WeightMatrix matrix(const std::string& name, int64_t cols, int64_t rows) const;
  // The same, or an empty matrix when the file has no such tensor.
  cpu::WeightMatrix optional_matrix(const std::string& name, int64_t cols, int64_t rows) const;
  // `count` matrices of [cols, rows] stored as one tensor [cols, rows, count].
  cpu::ExpertMatrices experts(const std::string& name, int64_t cols, int64_t rows, int64_t count) const;
  // An F32 vector of `length` (norm weights, biases).
  const float* vector(const std::string& name, int64_t length) const;
  const float* optional_vector(const std::string& name, int64_t length) const;

  // The hyper-parameters every architecture we serve shares (attention, norm, rope, vocab).
  void read_common_params(cpu::RopeStyle style);
  // expert_count, expert_used_count (at most expert_count) and expert_feed_forward_length.
  void read_expert_counts();
  // Token embedding, output norm and output matrix (tied to the embedding when absent); the
  // vocabulary's size (the tokenizer's tokens must match it) and its BOS/EOS ids.
  void bind_embeddings();
  // Attention norm and Q/K/V/O of layer `layer`.
  void bind_attention(int64_t layer, LayerWeights& weights);
  // Qwen3's per-head RMS norms of Q and K.
  void bind_qk_norms(int64_t layer, LayerWeights& weights);
  // FFN norm and a dense SwiGLU FFN.
  void bind_dense_ffn(int64_t layer, LayerWeights& weights);

  // MODEL_UNEXPECTED_TENSOR naming a tensor of the file that nothing bound (a block_count
  // smaller than the file's layers, or a tensor the architecture does not use), as llama.cpp.
  void check_all_bound() const;

 private:
  const gguf::Tensor& tensor(const std::string& name, std::initializer_list<int64_t> shape) const;
  cpu::WeightMatrix bind_matrix(const gguf::Tensor& t) const;
  std::string key(std::string_view suffix) const;
  int32_t token_id(std::string_view key) const;

  Model& model_;
  std::string architecture_;
  mutable std::unordered_set<std::string_view> bound_;  // names of the tensors bound so far (by tensor())
};

// `blk.<layer>.<name>.<kind>`: the name llama.cpp gives a layer's tensor.
std::string layer_tensor(int64_t layer, std::string_view name, std::string_view kind = "weight");

}  // namespace bloomery::model
