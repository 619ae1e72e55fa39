// Qwen3.5 / Qwen3.6 MoE (Qwen3.6-35B-A3B): Qwen3-Next's layout (three Gated DeltaNet layers to
// one gated attention layer, routed experts plus a sigmoid-gated shared expert, post_attention_norm
// before the FFN), with value heads that tile their key heads (h % k_heads), separate ssm_beta
// and ssm_alpha, and the interleaved multi-axis rope of the file's rope sections, which at text
// positions rotates like neox rope but for the pairs of the fourth section.
#include "model/architectures.h"

namespace bloomery::model {

void bind_qwen35moe(Binder& b) { bind_hybrid_qwen_moe(b, {.rope_sections = true, .grouped_delta_heads = false}); }

}  // namespace bloomery::model
