// Llama (the Llama 3 family): normal (adjacent-pair) RoPE over rope.dimension_count
// elements, with Llama 3's frequency factors when the file has rope_freqs; SwiGLU FFN.
#include "model/architectures.h"

namespace bloomery::model {

void bind_llama(Binder& b) {
  b.read_common_params(cpu::RopeStyle::kNormal);
  b.bind_embeddings();
  for (int64_t l = 0; l < b.params().layers; ++l) {
    b.bind_gqa_attention(l, {});
    b.bind_dense_ffn(l);
  }
}

}  // namespace bloomery::model
