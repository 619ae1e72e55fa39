// What every architecture file uses to read a GGUF: hyper-parameters under the
// architecture's key prefix, and tensors checked by name, shape and type before binding.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "model/model.h"

namespace bloomery::model {

class Binder {
 public:
  Binder(Model& model, std::string architecture);

  Model& model() { return model_; }

  // `<arch>.<key>` as a positive integer / float; MODEL_BAD_METADATA naming the key when absent.
  int64_t required_count(std::string_view key) const;
  int64_t count_or(std::string_view key, int64_t fallback) const;
  float float_or(std::string_view key, float fallback) const;

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
  // Token embedding, output norm and output matrix (tied to the embedding when absent).
  void bind_embeddings();
  // Attention norm and Q/K/V/O of layer `layer`.
  void bind_attention(int64_t layer, LayerWeights& weights);
  // Qwen3's per-head RMS norms of Q and K.
  void bind_qk_norms(int64_t layer, LayerWeights& weights);
  // FFN norm and a dense SwiGLU FFN.
  void bind_dense_ffn(int64_t layer, LayerWeights& weights);

 private:
  const gguf::Tensor& tensor(const std::string& name, std::initializer_list<int64_t> shape) const;
  cpu::WeightMatrix bind_matrix(const gguf::Tensor& t) const;
  std::string key(std::string_view suffix) const;

  Model& model_;
  std::string architecture_;
};

// `blk.<layer>.<name>.<kind>`: the name llama.cpp gives a layer's tensor.
std::string layer_tensor(int64_t layer, std::string_view name, std::string_view kind = "weight");

}  // namespace bloomery::model
