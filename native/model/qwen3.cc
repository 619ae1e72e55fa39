// Qwen3 dense: neox RoPE, per-head Q/K RMS norms, SwiGLU FFN.
#include "model/architectures.h"

namespace bloomery::model {

void bind_qwen3(Binder& b) {
  b.read_common_params(cpu::RopeStyle::kNeox);
  HyperParams& p = b.model().params;
  p.feed_forward = b.required_count("feed_forward_length");
  b.bind_embeddings();
  b.model().layers.resize(static_cast<size_t>(p.layers));
  for (int64_t l = 0; l < p.layers; ++l) {
    LayerWeights& w = b.model().layers[l];
    b.bind_attention(l, w);
    b.bind_qk_norms(l, w);
    b.bind_dense_ffn(l, w);
  }
}

}  // namespace bloomery::model
