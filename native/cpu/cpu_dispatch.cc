#include "cpu/cpu_dispatch.h"

namespace bloomery::cpu {

quant::SimdTier simd_tier_for(const CpuFeatures& f) {
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  if (avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni) return quant::SimdTier::kAvx512;
  if (avx2) return quant::SimdTier::kAvx2;
  return quant::SimdTier::kScalar;
}

quant::SimdTier host_simd_tier() {
  static const quant::SimdTier tier = simd_tier_for(detect_cpu_features());
  return tier;
}

const quant::QuantKernels& host_quant_kernels(uint32_t type) { return quant::quant_kernels(type, host_simd_tier()); }

}  // namespace bloomery::cpu
