// MiMo-V2-Flash (mimo2): neox RoPE over part of each head, sliding-window layers beside full
// ones as the file's per-layer pattern says (windowed layers rotating with a base of their own,
// rope.freq_base_swa) and learned sinks where a layer has them, a KV head count per layer, value
// heads narrower than the key heads, attention's output scaled by attention.value_scale; then a
// dense SwiGLU FFN where a layer has no router, else routed experts chosen by sigmoid with a
// selection bias, the chosen weights normalized. The next-token-prediction layers after the
// last are bound (their weights count) but not run; a file converted without them (its trunk
// only) loads as llama.cpp loads it.
#include "base/error.h"
#include "model/architectures.h"

namespace bloomery::model {

namespace {

// llama.cpp's defaults for the windowed layers' rotation where the file does not say.
constexpr float kWindowedRopeBase = 10000.0f;

// Per layer of the pass, whether it is windowed: attention.sliding_window_pattern as one value
// for every layer or an array of one per layer (llama.cpp reads it so); absent, no layer is.
std::vector<int64_t> windowed_pattern(const gguf::GgufFile& file, int64_t layers) {
  const std::string key = "mimo2.attention.sliding_window_pattern";
  const gguf::Value* value = file.find(key);
  if (!value) return std::vector<int64_t>(static_cast<size_t>(layers), 0);
  if (value->type != gguf::ValueType::Array) {
    return std::vector<int64_t>(static_cast<size_t>(layers), *file.get_int(key) != 0 ? 1 : 0);
  }
  std::vector<int64_t> pattern = *file.get_int_array(key);
  if (static_cast<int64_t>(pattern.size()) != layers) {
    throw Error("MODEL_BAD_METADATA", key + " has " + std::to_string(pattern.size()) + " entries, expected " +
                                          std::to_string(layers) +
                                          " (one per layer before the next-token-prediction ones)");
  }
  return pattern;
}

}  // namespace

void bind_mimo2(Binder& b) {
  b.read_common_params(cpu::RopeStyle::kNeox);
  b.read_moe_params(Gating::kSigmoid, true);
  HyperParams& p = b.params();
  p.sliding_window = b.required_count("attention.sliding_window");
  p.windowed_rope.freq_base = b.positive_float_or("rope.freq_base_swa", kWindowedRopeBase);
  p.windowed_rope.freq_scale = 1.0f;
  const float value_scale = b.float_or("attention.value_scale", 1.0f);
  p.value_scale = value_scale == 0.0f ? 1.0f : value_scale;  // llama.cpp reads 0 as no scale
  const std::vector<int64_t> pattern = windowed_pattern(b.model().file, p.layers);
  b.bind_embeddings();
  const gguf::GgufFile& file = b.model().file;
  const bool has_nextn = file.find_tensor(layer_tensor(p.layers, "nextn.eh_proj")) != nullptr;
  const int64_t layers = p.layers + (has_nextn ? p.nextn_layers : 0);
  for (int64_t l = 0; l < layers; ++l) {
    b.bind_gqa_attention(l, {.optional_sinks = true});
    if (file.find_tensor(layer_tensor(l, "ffn_gate_inp"))) {
      b.bind_moe_ffn(l, {.selection_bias = true});
    } else {
      b.bind_dense_ffn(l);
    }
    if (l < p.layers) {
      b.model().layers[l].attention.windowed = pattern[static_cast<size_t>(l)] != 0;
      continue;
    }
    b.bind_nextn(l);
    // Converted MiMo files may carry the MTP head's norm as layer_out_norm (llama.cpp's fallback).
    NextnLayer& n = b.model().nextn_layers[l - p.layers];
    const float* out_norm = b.optional_vector(layer_tensor(l, "layer_out_norm"), p.embedding);
    if (!n.shared_head_norm) n.shared_head_norm = out_norm;
    n.hidden = NextnHidden::kBeforeNorm;
  }
}

}  // namespace bloomery::model
