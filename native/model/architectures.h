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
void bind_gpt_oss(Binder& binder);
void bind_minimax_m2(Binder& binder);
void bind_mimo2(Binder& binder);
void bind_qwen3next(Binder& binder);
void bind_qwen35moe(Binder& binder);
void bind_qwen35(Binder& binder);

}  // namespace bloomery::model
