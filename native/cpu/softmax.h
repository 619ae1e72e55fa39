// Softmax in place, as ggml computes it: max subtracted, the sum of exponentials in double.
#pragma once

#include <cstdint>

#include "base/arch.h"

namespace bloomery::cpu {

// The kernel of this host's tier.
void softmax(float* x, int64_t n);

// The tiers: std::exp one at a time, and AVX-512 (avx512_math.h).
void softmax_scalar(float* x, int64_t n);
#if BLOOMERY_X86_SIMD
void softmax_avx512(float* x, int64_t n);
#else
inline constexpr void (*softmax_avx512)(float*, int64_t) = nullptr;
#endif

}  // namespace bloomery::cpu
