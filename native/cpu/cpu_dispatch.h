// Picks the CPU kernels for this host once, from its instruction-set features.
#pragma once

#include <cstdint>

#include "cpu/host_info.h"
#include "quant/kernels.h"

namespace bloomery::cpu {

// The highest tier `features` can run: AVX-512 needs F/BW/VL/VNNI on top of the AVX2
// tier's AVX2/FMA/F16C (its kernels fall back to AVX2 ones).
quant::SimdTier simd_tier_for(const CpuFeatures& features);

// `host` capped by `cap`, a tier's name ("scalar", "avx2", "avx512"; null or empty: no cap), as
// MKL_ENABLE_INSTRUCTIONS caps MKL: a cap above `host` leaves `host`. Any other name is refused
// (INVALID_ARGUMENT).
quant::SimdTier capped_tier(quant::SimdTier host, const char* cap);

// The tier of this host, detected on first use and capped by the environment's
// BLOOMERY_CPU_ISA: one machine can run the kernels of another (their sums in that machine's
// order), to reproduce its results or to measure how far two correct orders part.
quant::SimdTier host_simd_tier();

// The kernels of weight type `type` at this host's tier, with its AVX-512 BF16 where the tier is
// AVX-512 (throws UNSUPPORTED_QUANT).
const quant::QuantKernels& host_quant_kernels(uint32_t type);

}  // namespace bloomery::cpu
