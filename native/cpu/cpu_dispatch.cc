#include "cpu/cpu_dispatch.h"

#include <cstdlib>
#include <string>

#include "base/error.h"

namespace bloomery::cpu {

quant::SimdTier simd_tier_for(const CpuFeatures& f) {
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  if (avx2 && f.bmi2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni) return quant::SimdTier::kAvx512;
  if (avx2) return quant::SimdTier::kAvx2;
  return quant::SimdTier::kScalar;
}

quant::SimdTier capped_tier(quant::SimdTier host, const char* cap) {
  if (cap == nullptr || *cap == '\0') return host;
  for (const quant::SimdTier tier : {quant::SimdTier::kScalar, quant::SimdTier::kAvx2, quant::SimdTier::kAvx512}) {
    if (quant::simd_tier_name(tier) == cap) return tier < host ? tier : host;
  }
  throw Error("INVALID_ARGUMENT",
              "BLOOMERY_CPU_ISA is \"" + std::string(cap) + "\"; expected scalar, avx2 or avx512 (or unset)");
}

quant::SimdTier host_simd_tier() {
  // A refused cap leaves the static unset, so every later call refuses it too.
  static const quant::SimdTier tier =
      capped_tier(simd_tier_for(detect_cpu_features()), std::getenv("BLOOMERY_CPU_ISA"));
  return tier;
}

const quant::QuantKernels& host_quant_kernels(uint32_t type) {
  static const bool avx512_bf16 = detect_cpu_features().avx512bf16;
  return quant::quant_kernels(type, host_simd_tier(), avx512_bf16);
}

}  // namespace bloomery::cpu
