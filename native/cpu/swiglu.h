// SwiGLU, the gated activation of llama-family FFNs: out = silu(gate) * up.
#pragma once

#include <cstdint>

#include "base/arch.h"

namespace bloomery::cpu {

// The kernel of this host's tier.
void swiglu(const float* gate, const float* up, int64_t n, float* out);

// The tiers: std::exp one at a time, and AVX-512 (avx512_math.h), the same formula.
void swiglu_scalar(const float* gate, const float* up, int64_t n, float* out);
#if BLOOMERY_X86_SIMD
void swiglu_avx512(const float* gate, const float* up, int64_t n, float* out);
#else
inline constexpr void (*swiglu_avx512)(const float*, const float*, int64_t, float*) = nullptr;
#endif

}  // namespace bloomery::cpu
