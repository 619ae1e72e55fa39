// Llama (the Llama 3 family): normal (adjacent-pair) RoPE over rope.dimension_count
// elements, with Llama 3's frequency factors when the file has rope_freqs; SwiGLU FFN.
#include "model/architectures.h"

namespace bloomery::model {

void bind_llama(Binder& b) {
  b.read_common_params(cpu::RopeStyle::kNormal);
  HyperParams& p = b.model().params;
  p.feed_forward = b.required_count("feed_forward_length");
  b.bind_embeddings();
  b.model().layers.resize(static_cast<size_t>(p.layers));
  for (int64_t l = 0; l < p.layers; ++l) {
    LayerWeights& w = b.model().layers[l];
    b.bind_attention(l, w);
    b.bind_dense_ffn(l, w);
  }
}

}  // namespace bloomery::model
