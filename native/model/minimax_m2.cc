// MiniMax-M2 (minimax-m2, 230B-A10B): neox RoPE over part of each head, RMS norms of each
// row's whole query and key projections (all heads at once, not per head), and in every layer
// routed SwiGLU experts chosen by the file's gating function (sigmoid in the released files)
// with a selection bias, the chosen weights normalized. llama.cpp reads neither
// expert_weights_norm nor expert_weights_scale for this family, so neither do we.
#include "model/architectures.h"

namespace bloomery::model {

void bind_minimax_m2(Binder& b) {
  b.read_common_params(cpu::RopeStyle::kNeox);
  b.read_moe_params(b.required_gating_func(), true);
  b.bind_embeddings();
  for (int64_t l = 0; l < b.params().layers; ++l) {
    b.bind_gqa_attention(l, {.whole_qk_norms = true});
    b.bind_moe_ffn(l, {.selection_bias = true});
  }
}

}  // namespace bloomery::model
