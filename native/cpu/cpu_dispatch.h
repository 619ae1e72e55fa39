// Picks the CPU kernels for this host once, from its instruction-set features.
#pragma once

#include <cstdint>

#include "cpu/host_info.h"
#include "quant/kernels.h"

namespace bloomery::cpu {

// The highest tier `features` can run: AVX-512 needs F/BW/VL/VNNI on top of the AVX2
// tier's AVX2/FMA/F16C (its kernels fall back to AVX2 ones).
quant::SimdTier simd_tier_for(const CpuFeatures& features);

// The tier of this host, detected on first use.
quant::SimdTier host_simd_tier();

// The kernels of weight type `type` at this host's tier (throws UNSUPPORTED_QUANT).
const quant::QuantKernels& host_quant_kernels(uint32_t type);

}  // namespace bloomery::cpu
