// SwiGLU, the gated activation of llama-family FFNs: out = silu(gate) * up, as llama.cpp's CPU
// backend computes it (ggml_vec_swiglu_f32): the SIMD tier's SiLU over whole blocks
// (avx512_math.h, avx2_math.h) and gate / (1 + std::exp(-gate)) for the last partial block.
#pragma once

#include <cstdint>

namespace bloomery::cpu {

// The kernel of this host's tier.
void swiglu(const float* gate, const float* up, int64_t n, float* out);

// The tiers: std::exp one at a time, AVX2 (blocks of 8) and AVX-512 (blocks of 16).
void swiglu_scalar(const float* gate, const float* up, int64_t n, float* out);
void swiglu_avx2(const float* gate, const float* up, int64_t n, float* out);
void swiglu_avx512(const float* gate, const float* up, int64_t n, float* out);

}  // namespace bloomery::cpu
