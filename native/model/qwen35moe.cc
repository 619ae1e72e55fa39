// Qwen3.5 / Qwen3.6 MoE (Qwen3.6-35B-A3B): Qwen3-Next's layout (three Gated DeltaNet layers to
// one gated attention layer, routed experts plus a sigmoid-gated shared expert, post_attention_norm
// before the FFN), with value heads that tile their key heads (h % k_heads), separate ssm_beta
// and ssm_alpha, and the interleaved multi-axis rope of the file's rope sections, which at text
// positions rotates like neox rope but for the pairs of the fourth section.
#include "model/architectures.h"

namespace bloomery::model {

void bind_qwen35moe(Binder& b) {
  b.read_common_params(cpu::RopeStyle::kNeox);
  b.read_rope_sections();
  b.read_moe_params(Gating::kSoftmax, true);
  b.read_delta_net_params(false);
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

}  // namespace bloomery::model
