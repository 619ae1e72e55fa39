// DeepSeek-V3.2 (deepseek32): deepseek2's blocks (MLA with a low-rank query and DeepSeek's YaRN,
// leading dense layers, routed experts by the file's gating function with groups and a
// selection bias, a shared expert) with DeepSeek sparse attention: every layer's lightning
// indexer (neox rope, a key layer norm of epsilon 1e-6) picks the positions its MLA attends.
// The next-token-prediction layers after the last are bound (their weights count) but not run.
#include "model/architectures.h"

namespace bloomery::model {

void bind_deepseek32(Binder& b) {
  b.read_common_params(cpu::RopeStyle::kNormal);
  b.read_mla_params();
  b.read_indexer_params(cpu::RopeStyle::kNeox, 1e-6f);
  b.read_moe_params(b.required_gating_func(), false);
  b.read_router_options();
  HyperParams& p = b.params();
  const int64_t dense = b.read_leading_dense();
  b.bind_embeddings();
  for (int64_t l = 0; l < p.layers + p.nextn_layers; ++l) {
    b.bind_sparse_mla_attention(l, true);
    b.bind_shared_moe_ffn(l, dense);
  }
}

}  // namespace bloomery::model
