// Qwen2 dense: neox RoPE, biases on Q, K and V, SwiGLU FFN, often a tied output matrix.
#include "model/architectures.h"

namespace bloomery::model {

void bind_qwen2(Binder& b) {
  b.read_common_params(cpu::RopeStyle::kNeox);
  HyperParams& p = b.model().params;
  p.feed_forward = b.required_count("feed_forward_length");
  b.bind_embeddings();
  b.model().layers.resize(static_cast<size_t>(p.layers));
  for (int64_t l = 0; l < p.layers; ++l) {
    LayerWeights& w = b.model().layers[l];
    b.bind_attention(l, w);
    w.q_bias = b.vector(layer_tensor(l, "attn_q", "bias"), p.heads * p.head_dim);
    w.k_bias = b.vector(layer_tensor(l, "attn_k", "bias"), p.kv_heads * p.head_dim);
    w.v_bias = b.vector(layer_tensor(l, "attn_v", "bias"), p.kv_heads * p.head_dim);
    b.bind_dense_ffn(l, w);
  }
}

}  // namespace bloomery::model
