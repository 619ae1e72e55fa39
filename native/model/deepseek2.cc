// DeepSeek-V2/V3/R1, Kimi-K2, GLM-4.7-Flash (deepseek2): multi-head latent attention (with or
// without a low-rank query), normal RoPE on each head's last rope dims with DeepSeek's YaRN,
// leading dense layers, then routed experts (softmax or sigmoid gating, a selection bias,
// expert groups, normalized and scaled weights) plus shared experts. The next-token-prediction
// layers after the last are bound (their weights count) but not run.
#include "model/architectures.h"

namespace bloomery::model {

void bind_deepseek2(Binder& b) {
  b.read_common_params(cpu::RopeStyle::kNormal);
  b.read_mla_params();
  b.read_moe_params(Gating::kSoftmax, false);
  b.read_router_options();
  HyperParams& p = b.params();
  const int64_t dense = b.read_leading_dense();
  b.bind_embeddings();
  // GLM-4.7-Flash files name no gating function, and llama.cpp knows them by shape.
  if (!b.model().file.find("deepseek2.expert_gating_func") && (p.layers == 47 || p.layers == 48) && p.vocab == 154880) {
    p.router.gating = Gating::kSigmoid;
  }
  for (int64_t l = 0; l < p.layers + p.nextn_layers; ++l) {
    b.bind_mla_attention(l);
    b.bind_shared_moe_ffn(l, dense);
  }
}

}  // namespace bloomery::model
