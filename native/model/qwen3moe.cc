// Qwen3-MoE (Qwen3-30B-A3B, Qwen3-Coder-30B-A3B, Qwen3-235B-A22B): neox RoPE, per-head
// Q/K RMS norms, and in every layer a routed SwiGLU MoE whose top-k weights are
// renormalized to sum to one (norm_topk_prob).
#include "model/architectures.h"

namespace bloomery::model {

void bind_qwen3moe(Binder& b) {
  b.read_common_params(cpu::RopeStyle::kNeox);
  HyperParams& p = b.model().params;
  b.read_expert_counts();
  p.normalize_expert_weights = true;
  b.bind_embeddings();
  b.model().layers.resize(static_cast<size_t>(p.layers));
  for (int64_t l = 0; l < p.layers; ++l) {
    LayerWeights& w = b.model().layers[l];
    b.bind_attention(l, w);
    b.bind_qk_norms(l, w);
    w.ffn_norm = b.vector(layer_tensor(l, "ffn_norm"), p.embedding);
    w.router = b.matrix(layer_tensor(l, "ffn_gate_inp"), p.embedding, p.experts);
    w.expert_gate = b.experts(layer_tensor(l, "ffn_gate_exps"), p.embedding, p.expert_feed_forward, p.experts);
    w.expert_up = b.experts(layer_tensor(l, "ffn_up_exps"), p.embedding, p.expert_feed_forward, p.experts);
    w.expert_down = b.experts(layer_tensor(l, "ffn_down_exps"), p.expert_feed_forward, p.embedding, p.experts);
  }
}

}  // namespace bloomery::model
