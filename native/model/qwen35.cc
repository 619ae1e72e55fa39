// Qwen3.5 dense: Qwen3.5 MoE's attention layers (Gated DeltaNet three times in four, then gated
// attention with the interleaved multi-axis rope) over a dense SwiGLU FFN in every layer.
#include "model/architectures.h"

namespace bloomery::model {

void bind_qwen35(Binder& b) {
  b.read_common_params(cpu::RopeStyle::kNeox);
  b.read_rope_sections();
  b.read_delta_net_params(false);
  HyperParams& p = b.params();
  b.bind_embeddings();
  const std::vector<bool> linear = b.linear_attention_layers();
  for (int64_t l = 0; l < p.layers + p.nextn_layers; ++l) {
    bind_hybrid_qwen_attention(b, l, linear);
    b.bind_dense_ffn(l, "post_attention_norm");
    if (l >= p.layers) b.bind_nextn(l);
  }
}

}  // namespace bloomery::model
