// Qwen3-MoE (Qwen3-30B-A3B, Qwen3-Coder-30B-A3B, Qwen3-235B-A22B): neox RoPE, per-head
// Q/K RMS norms, and in every layer routed SwiGLU experts chosen by softmax, whose top-k
// weights are renormalized to sum to one (norm_topk_prob).
#include "model/architectures.h"

namespace bloomery::model {

void bind_qwen3moe(Binder& b) {
  b.read_common_params(cpu::RopeStyle::kNeox);
  b.read_moe_params(Gating::kSoftmax, true);
  b.bind_embeddings();
  for (int64_t l = 0; l < b.params().layers; ++l) {
    b.bind_gqa_attention(l, {.qk_norms = true});
    b.bind_moe_ffn(l, {});
  }
}

}  // namespace bloomery::model
