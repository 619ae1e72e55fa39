// A loaded model: its hyper-parameters and its weights bound to the GGUF mapping. Each
// architecture file (qwen3moe.cc, qwen3.cc, llama.cc, qwen2.cc) fills this one shape;
// the engine's forward pass reads only this, never the architecture's name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cpu/matmul.h"
#include "cpu/moe.h"
#include "cpu/rope.h"
#include "gguf/gguf_file.h"

namespace bloomery::model {

struct HyperParams {
  std::string architecture;
  int64_t layers = 0;
  int64_t embedding = 0;
  int64_t vocab = 0;
  int64_t context_length = 0;  // the context the model was trained for
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t feed_forward = 0;  // dense FFN width (0 for MoE layers)
  int64_t experts = 0;       // 0: dense
  int64_t experts_used = 0;
  int64_t expert_feed_forward = 0;
  bool normalize_expert_weights = false;
  float rms_epsilon = 1e-6f;
  cpu::RopeParams rope;  // freq_factors points into the mapping when the model has them
  int32_t bos_token = -1;
  int32_t eos_token = -1;
};

struct LayerWeights {
  const float* attention_norm = nullptr;
  cpu::WeightMatrix q, k, v, attention_output;
  const float* q_bias = nullptr;  // qwen2
  const float* k_bias = nullptr;
  const float* v_bias = nullptr;
  const float* q_norm = nullptr;  // qwen3: per-head RMS norm of queries and keys
  const float* k_norm = nullptr;
  const float* ffn_norm = nullptr;
  // Dense FFN.
  cpu::WeightMatrix ffn_gate, ffn_up, ffn_down;
  // MoE FFN.
  cpu::WeightMatrix router;
  cpu::ExpertMatrices expert_gate, expert_up, expert_down;
};

struct Model {
  explicit Model(gguf::GgufFile gguf) : file(std::move(gguf)) {}

  gguf::GgufFile file;
  HyperParams params;
  cpu::WeightMatrix token_embedding;
  std::vector<LayerWeights> layers;
  const float* output_norm = nullptr;
  cpu::WeightMatrix output;  // token_embedding when the model ties them
};

// Opens a GGUF file and binds its weights. Throws Error with UNSUPPORTED_ARCH (an
// architecture we do not serve), UNSUPPORTED_QUANT (naming the tensor), MODEL_MISSING_TENSOR,
// MODEL_TENSOR_SHAPE, MODEL_BAD_METADATA (naming the key), or the reader's GGUF_* codes.
// `map` says how the file's bytes are held (gguf::MapOptions: mmap, mlock).
std::unique_ptr<Model> load_model(const std::string& path, const gguf::MapOptions& map = {});

// The architectures load_model serves.
std::vector<std::string> supported_architectures();

}  // namespace bloomery::model
