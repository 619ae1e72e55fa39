// The architectures we serve, one file each: each reads its hyper-parameters and binds
// its weights into the Binder's model.
#pragma once

#include "model/binder.h"

namespace bloomery::model {

void bind_qwen3moe(Binder& binder);
void bind_qwen3(Binder& binder);
void bind_llama(Binder& binder);
void bind_qwen2(Binder& binder);
void bind_glm4moe(Binder& binder);
void bind_deepseek2(Binder& binder);
void bind_deepseek32(Binder& binder);
void bind_glm_dsa(Binder& binder);
void bind_gpt_oss(Binder& binder);
void bind_minimax_m2(Binder& binder);
void bind_mimo2(Binder& binder);
void bind_qwen3next(Binder& binder);
void bind_qwen35moe(Binder& binder);
void bind_qwen35(Binder& binder);
void bind_deepseek4(Binder& binder);

// The hybrid Qwens' (qwen3next, qwen35moe, qwen35) attention of layer `layer`: Gated DeltaNet
// where `linear` (Binder::linear_attention_layers) says so, else attention with per-head Q/K
// norms and an output gate (and MTP layers, past the last, bound as attention).
void bind_hybrid_qwen_attention(Binder& binder, int64_t layer, const std::vector<bool>& linear);

// Where Qwen3.5 MoE's files depart from Qwen3-Next's description (qwen3next.cc), which both bind.
struct HybridQwenMoeOptions {
  // The interleaved multi-axis rope of rope.dimension_sections (Binder::read_rope_sections).
  bool rope_sections = false;
  // Gated DeltaNet's value heads repeat their key heads in groups, else tile them (DeltaNetParams).
  bool grouped_delta_heads = true;
};
void bind_hybrid_qwen_moe(Binder& binder, const HybridQwenMoeOptions& options);

}  // namespace bloomery::model
