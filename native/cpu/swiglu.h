// SwiGLU, the gated activation of llama-family FFNs: out = silu(gate) * up, as llama.cpp's CPU
// backend computes it (ggml_vec_swiglu_f32): the SIMD tier's SiLU over whole blocks
// (avx512_math.h, avx2_math.h) and gate / (1 + std::exp(-gate)) for the last partial block.
#pragma once

#include <cstdint>

#include "base/arch.h"

namespace bloomery::cpu {

// The kernel of this host's tier.
void swiglu(const float* gate, const float* up, int64_t n, float* out);

// The tiers: std::exp one at a time, AVX2 (blocks of 8) and AVX-512 (blocks of 16).
void swiglu_scalar(const float* gate, const float* up, int64_t n, float* out);
#if BLOOMERY_X86_SIMD
void swiglu_avx2(const float* gate, const float* up, int64_t n, float* out);
void swiglu_avx512(const float* gate, const float* up, int64_t n, float* out);
#else
inline constexpr void (*swiglu_avx2)(const float*, const float*, int64_t, float*) = nullptr;
inline constexpr void (*swiglu_avx512)(const float*, const float*, int64_t, float*) = nullptr;
#endif

// SiLU alone, out = silu(x) (in place allowed), as ggml_vec_silu_f32 computes it: swiglu's blocks
// and last partial block without the product (Gated DeltaNet's convolution output).
void vec_silu(const float* x, int64_t n, float* out);
void vec_silu_scalar(const float* x, int64_t n, float* out);
#if BLOOMERY_X86_SIMD
void vec_silu_avx2(const float* x, int64_t n, float* out);
void vec_silu_avx512(const float* x, int64_t n, float* out);
#else
inline constexpr void (*vec_silu_avx2)(const float*, int64_t, float*) = nullptr;
inline constexpr void (*vec_silu_avx512)(const float*, int64_t, float*) = nullptr;
#endif

// gpt-oss's clamped SwiGLU (ggml_swiglu_oai): g = min(gate, limit), u = clamp(up, -limit,
// limit), out = g / (1 + e^(alpha * -g)) * (u + 1), one element at a time with std::exp as
// ggml's CPU backend computes it (it has no SIMD form).
void clamped_swiglu(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out);

// DeepSeek-V4's limited SwiGLU (ggml_swiglu_clamp): g = min(gate, limit), u = clamp(up, -limit,
// limit), out = g / (1 + e^-g) * u, one element at a time with std::exp as ggml's CPU backend
// computes it.
void limited_swiglu(const float* gate, const float* up, int64_t n, float limit, float* out);

}  // namespace bloomery::cpu
