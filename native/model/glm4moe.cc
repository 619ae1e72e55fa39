// GLM-4.5 / 4.6 / 4.7 (glm4moe): neox RoPE over part of each head, biases on Q, K and V,
// per-head Q/K norms where the file has them (GLM-4.5's largest), leading dense layers, then
// routed experts chosen by sigmoid with a selection bias, plus a shared expert. The norm
// before the FFN is attn_post_norm. The next-token-prediction layers after the last are bound
// (their weights count) but not run.
#include "base/error.h"
#include "model/architectures.h"

namespace bloomery::model {

void bind_glm4moe(Binder& b) {
  b.read_common_params(cpu::RopeStyle::kNeox);
  b.read_moe_params(Gating::kSigmoid, false);
  b.read_router_options();
  if (b.model().file.find("glm4moe.rope.dimension_sections")) {
    throw Error("UNSUPPORTED_FEATURE", "glm4moe.rope.dimension_sections (multimodal rope) is not supported");
  }
  HyperParams& p = b.params();
  const int64_t dense = b.read_leading_dense();
  b.bind_embeddings();
  for (int64_t l = 0; l < p.layers + p.nextn_layers; ++l) {
    b.bind_gqa_attention(l, {.biases = true, .optional_qk_norms = true});
    b.bind_shared_moe_ffn(l, dense, "post_attention_norm");
  }
}

}  // namespace bloomery::model
