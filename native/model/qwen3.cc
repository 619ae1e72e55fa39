// Qwen3 dense: neox RoPE, per-head Q/K RMS norms, SwiGLU FFN. Its rerankers (Qwen3-Reranker) add a
// head over the last row whose labels' logits go through a softmax, as llama.cpp's build_pooling.
#include "model/architectures.h"

namespace bloomery::model {

void bind_qwen3(Binder& b) {
  b.read_common_params(cpu::RopeStyle::kNeox);
  b.bind_embeddings();
  b.bind_rank_head({.last_row = true, .softmax = true});
  for (int64_t l = 0; l < b.params().layers; ++l) {
    b.bind_gqa_attention(l, {.qk_norms = true});
    b.bind_dense_ffn(l);
  }
}

}  // namespace bloomery::model
