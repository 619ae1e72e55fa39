// GLM-5 (glm-dsa): deepseek32's blocks (MLA with DeepSeek sparse attention, leading dense
// layers, sigmoid-routed experts with a selection bias, a shared expert) where only some
// layers have a lightning indexer of their own (attention.indexer.types: 1 for those; the
// others attend what the last such layer selected), its rope normal and its key layer norm
// of epsilon 0, as llama.cpp's glm-dsa graph. The next-token-prediction layers after the last
// are bound (their weights count) but not run.
#include "base/error.h"
#include "model/architectures.h"

namespace bloomery::model {

namespace {

// Which layers have an indexer of their own: the file's attention.indexer.types, else (as
// llama.cpp, for files written before the key) every layer of GLM-5 and 5.1, or GLM-5.2's
// pattern (the first three, then every fourth) for its million-token context.
std::vector<bool> indexer_layers(Binder& b) {
  const HyperParams& p = b.params();
  const std::string key = "glm-dsa.attention.indexer.types";
  std::vector<bool> own(static_cast<size_t>(p.layers));
  if (b.model().file.find(key)) {
    const std::optional<std::vector<int64_t>> types = b.model().file.get_int_array(key);
    if (!types || static_cast<int64_t>(types->size()) != p.layers) {
      throw Error("MODEL_BAD_METADATA", key + " must hold one 0 or 1 per layer (" + std::to_string(p.layers) + ")");
    }
    for (int64_t l = 0; l < p.layers; ++l) {
      const int64_t t = (*types)[static_cast<size_t>(l)];
      if (t != 0 && t != 1) throw Error("MODEL_BAD_METADATA", key + " holds " + std::to_string(t) + ", not 0 or 1");
      own[static_cast<size_t>(l)] = t == 1;
    }
  } else {
    constexpr int64_t kGlm52Layers = 78;
    for (int64_t l = 0; l < p.layers; ++l) {
      own[static_cast<size_t>(l)] =
          p.context_length < (int64_t{1} << 20) || (l < kGlm52Layers && (l < 2 || (l - 2) % 4 == 0));
    }
  }
  if (p.layers > 0 && !own[0]) {
    throw Error("MODEL_BAD_METADATA", key + ": the first layer has no indexer of its own, and no layer before it does");
  }
  return own;
}

}  // namespace

void bind_glm_dsa(Binder& b) {
  b.read_common_params(cpu::RopeStyle::kNormal);
  b.read_mla_params();
  b.read_indexer_params(cpu::RopeStyle::kNormal, 0.0f);
  b.read_moe_params(Gating::kSigmoid, false);
  b.read_router_options();
  HyperParams& p = b.params();
  const int64_t dense = b.read_leading_dense();
  b.bind_embeddings();
  const std::vector<bool> own = indexer_layers(b);
  for (int64_t l = 0; l < p.layers + p.nextn_layers; ++l) {
    // Next-token-prediction layers (not run) keep an indexer where the file has one.
    const bool indexed = l < p.layers ? own[static_cast<size_t>(l)]
                                      : b.model().file.find_tensor(layer_tensor(l, "indexer.attn_q_b")) != nullptr;
    b.bind_sparse_mla_attention(l, indexed);
    b.bind_shared_moe_ffn(l, dense);
  }
}

}  // namespace bloomery::model
