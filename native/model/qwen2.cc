// Qwen2 dense: neox RoPE, biases on Q, K and V, SwiGLU FFN, often a tied output matrix.
#include "model/architectures.h"

namespace bloomery::model {

void bind_qwen2(Binder& b) {
  b.read_common_params(cpu::RopeStyle::kNeox);
  b.bind_embeddings();
  for (int64_t l = 0; l < b.params().layers; ++l) {
    b.bind_gqa_attention(l, {.biases = true});
    b.bind_dense_ffn(l);
  }
}

}  // namespace bloomery::model
