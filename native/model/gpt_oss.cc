// gpt-oss (gpt-oss-20b, gpt-oss-120b): neox RoPE with YaRN, Q/K/V and output biases, learned
// attention sinks, sliding-window layers alternating with full ones (the window and the
// period from the file: a layer l is windowed where l % period < period - 1), then in every
// layer routed experts chosen by the router's biased logits and weighted by a softmax over the
// chosen ones, each expert a clamped SwiGLU (swiglu_oai) with per-expert biases. The norm
// before the FFN is attn_post_norm.
#include <cmath>

#include "base/error.h"
#include "model/architectures.h"

namespace bloomery::model {

namespace {

// llama.cpp's constants of swiglu_oai (llama-graph.cpp): the file does not carry them.
constexpr float kSwigluAlpha = 1.702f;
constexpr float kSwigluLimit = 7.0f;

}  // namespace

void bind_gpt_oss(Binder& b) {
  b.read_common_params(cpu::RopeStyle::kNeox);
  b.read_moe_params(Gating::kSoftmaxSelected, false);
  HyperParams& p = b.params();
  const gguf::GgufFile& file = b.model().file;
  p.activation = {cpu::ActivationKind::kClampedSwiglu, kSwigluAlpha, kSwigluLimit};
  p.sliding_window = b.required_count("attention.sliding_window");
  const std::string pattern_key = "gpt-oss.attention.sliding_window_pattern";
  int64_t period = 2;
  if (file.find(pattern_key)) {
    const std::optional<int64_t> value = file.get_int(pattern_key);
    if (!value) throw Error("UNSUPPORTED_FEATURE", pattern_key + " as a per-layer array is not supported");
    if (*value < 0 || *value > p.layers) {
      throw Error("MODEL_BAD_METADATA", pattern_key + " = " + std::to_string(*value) + " is out of range");
    }
    period = *value;
  }
  const float swa_base = b.positive_float_or("rope.freq_base_swa", p.rope.freq_base);
  if (swa_base != p.rope.freq_base) {
    throw Error("UNSUPPORTED_FEATURE",
                "gpt-oss.rope.freq_base_swa (a rope base of its own for windowed layers) differs "
                "from gpt-oss.rope.freq_base; not supported");
  }
  // llama.cpp scales by the rotated width, which is the head's in every gpt-oss file.
  p.attention_scale = 1.0f / std::sqrt(static_cast<float>(p.rope.dims));
  b.bind_embeddings();
  for (int64_t l = 0; l < p.layers; ++l) {
    b.bind_gqa_attention(l, {.biases = true, .output_bias = true, .sinks = true});
    b.model().layers[l].attention.windowed = period == 0 || l % period < period - 1;
    b.bind_moe_ffn(l, {.router_bias = true, .expert_biases = true}, "post_attention_norm");
  }
}

}  // namespace bloomery::model
