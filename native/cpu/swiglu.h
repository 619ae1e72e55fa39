// SwiGLU, the gated activation of llama-family FFNs: out = silu(gate) * up.
#pragma once

#include <cstdint>

namespace bloomery::cpu {

void swiglu(const float* gate, const float* up, int64_t n, float* out);

}  // namespace bloomery::cpu
