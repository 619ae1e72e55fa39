// Qwen3-Next (Qwen3-Next-80B-A3B): three of every four layers are Gated DeltaNet linear
// attention, whose value heads repeat their key heads in groups (h / (v_heads / k_heads)) and
// whose beta and alpha come from one ssm_ba; the fourth is attention with per-head Q/K norms,
// neox RoPE over part of each head and an output gate. Every layer's FFN is routed experts
// chosen by softmax (top-k renormalized) plus a shared expert behind a sigmoid gate. The norm
// before the FFN is post_attention_norm. MTP layers after the last are bound, not run.
#include "model/architectures.h"

namespace bloomery::model {

void bind_hybrid_qwen_attention(Binder& b, int64_t layer, const std::vector<bool>& linear) {
  if (layer < b.params().layers && linear[static_cast<size_t>(layer)]) {
    b.bind_delta_net(layer);
  } else {
    b.bind_gqa_attention(layer, {.qk_norms = true, .output_gate = true});
  }
}

void bind_hybrid_qwen_moe(Binder& b, const HybridQwenMoeOptions& options) {
  b.read_common_params(cpu::RopeStyle::kNeox);
  if (options.rope_sections) b.read_rope_sections();
  b.read_moe_params(Gating::kSoftmax, true);
  b.read_delta_net_params(options.grouped_delta_heads);
  HyperParams& p = b.params();
  p.shared_feed_forward = b.count_or("expert_shared_feed_forward_length", b.required_count("feed_forward_length"));
  b.bind_embeddings();
  const std::vector<bool> linear = b.linear_attention_layers();
  for (int64_t l = 0; l < p.layers + p.nextn_layers; ++l) {
    bind_hybrid_qwen_attention(b, l, linear);
    b.bind_moe_ffn(l, {.shared_experts = true, .shared_gate = true}, "post_attention_norm");
    if (l >= p.layers) b.bind_nextn(l);
  }
}

void bind_qwen3next(Binder& b) { bind_hybrid_qwen_moe(b, {.rope_sections = false, .grouped_delta_heads = true}); }

}  // namespace bloomery::model
