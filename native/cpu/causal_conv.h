// The short causal convolution of Gated DeltaNet (ggml_ssm_conv): per channel, each output is
// the dot of the channel's `kernel` taps with its last `kernel` inputs, the earliest first;
// before a sequence's first input, the state holds the inputs that came before (zeros at the
// start). The state is kept as ggml keeps it: per channel, its last kernel - 1 inputs.
#pragma once

#include <cstdint>

#include "base/arch.h"

namespace bloomery::cpu {

// A token's convolution over every channel (conv_token_* below).
using ConvToken = void (*)(const float* const* inputs, const float* taps_by_tap, int64_t kernel, int64_t channels,
                           float* out);

// The host's tier of conv_token: llama.cpp's CPU build for this host rounds as it does.
ConvToken host_conv_token();

// Convolves n rows of `channels` inputs (rows `stride` floats apart) in place, each row of outputs
// then passed through SiLU (cpu::vec_silu, as ggml_silu over the row), and moves `state` ([channels][kernel - 1]) on
// past them. `taps` is [channels][kernel]. `conv_token` is the host's tier but where a caller needs another
// rounding (the GPU's kernel fuses every product, as conv_token_scalar).
void causal_conv_silu(float* rows, int64_t n, int64_t stride, int64_t channels, int64_t kernel, const float* taps,
                      float* state, ConvToken conv_token = host_conv_token());

// One token's outputs of every channel: out[c] = the sum of inputs[k][c] * taps_by_tap[k * channels + c]
// from k = 0 on, into 0, in float (ggml's order: the earliest input first), each product fused
// into the sum or rounded first as the ggml build of the tier compiles the loop. GCC vectorizes it
// over the taps: a vector's worth of products round before they are added, one by one, and only
// the taps past the last whole vector fuse. The tiers: one channel at a time, every product fused
// (std::fma), as ggml's AVX-512 builds with fewer than 8 taps (Qwen3-Next's and Qwen3.5's 4); AVX-512
// (a vector of channels at a time) likewise; AVX2 (likewise) as llama.cpp's AVX2 build, whose
// vectors of 4 round the products of the first kernel & ~3 taps (of 4 taps: all four, none fused).
// `out` may be inputs[kernel - 1].
void conv_token_scalar(const float* const* inputs, const float* taps_by_tap, int64_t kernel, int64_t channels,
                       float* out);
#if BLOOMERY_X86_SIMD
void conv_token_avx2(const float* const* inputs, const float* taps_by_tap, int64_t kernel, int64_t channels,
                     float* out);
void conv_token_avx512(const float* const* inputs, const float* taps_by_tap, int64_t kernel, int64_t channels,
                       float* out);
#else
inline constexpr void (*conv_token_avx2)(const float* const*, const float*, int64_t, int64_t, float*) = nullptr;
inline constexpr void (*conv_token_avx512)(const float* const*, const float*, int64_t, int64_t, float*) = nullptr;
#endif

}  // namespace bloomery::cpu
