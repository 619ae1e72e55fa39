// The dot kernels against dequantization, each SIMD tier against the scalar reference,
// the activation quantizers' round trip, and the dispatch table's tier bookkeeping.
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "base/arch.h"
#include "base/error.h"
#include "cpu/cpu_dispatch.h"
#include "quant/blocks.h"
#include "quant/dequantize.h"
#include "quant/float_formats.h"
#include "quant/ggml_types.h"
#include "quant/kernels.h"
#include "quant/quantize_activations.h"
#include "tests/check.h"

using namespace bloomery;
using namespace bloomery::quant;

namespace {

using Bytes = std::vector<uint8_t>;

size_t row_bytes(uint32_t type, int64_t n) { return *ggml_row_bytes(*ggml_type(type), static_cast<uint64_t>(n)); }

uint16_t random_half(std::mt19937& rng, float lo, float hi, bool signed_value) {
  const float magnitude = std::uniform_real_distribution<float>(lo, hi)(rng);
  return fp32_to_fp16(signed_value && (rng() & 1) ? -magnitude : magnitude);
}

void set_half(Bytes& row, size_t offset, uint16_t h) { std::memcpy(row.data() + offset, &h, sizeof h); }

// A weight row of random codes with realistic scales: block scales are halves in
// ranges real models use (d ~ 1e-3..1e-1, K-quant super-scales smaller), MXFP4's
// exponent near 2^0.
Bytes random_weights(uint32_t type, int64_t n, std::mt19937& rng) {
  Bytes row(row_bytes(type, n));
  for (auto& b : row) b = static_cast<uint8_t>(rng());
  const size_t block = ggml_type(type)->block_bytes, blocks = row.size() / block;
  auto each_block = [&](auto&& fix) {
    for (size_t i = 0; i < blocks; ++i) fix(i * block);
  };
  switch (type) {
    case 0:
      for (int64_t i = 0; i < n; ++i) {
        const float v = std::uniform_real_distribution<float>(-1, 1)(rng);
        std::memcpy(row.data() + 4 * i, &v, 4);
      }
      break;
    case 1:
      for (int64_t i = 0; i < n; ++i) set_half(row, 2 * i, random_half(rng, 0, 1, true));
      break;
    case 30:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = fp32_to_bf16(std::uniform_real_distribution<float>(-1, 1)(rng));
        std::memcpy(row.data() + 2 * i, &h, 2);
      }
      break;
    case 2:
    case 6:
    case 8:
    case 20:
      each_block([&](size_t o) { set_half(row, o, random_half(rng, 1e-3f, 1e-1f, true)); });
      break;
    case 3:
    case 7:
      each_block([&](size_t o) {
        set_half(row, o, random_half(rng, 1e-3f, 1e-1f, false));
        set_half(row, o + 2, random_half(rng, 1e-2f, 1.0f, true));
      });
      break;
    case 10:
      each_block([&](size_t o) {
        set_half(row, o + offsetof(BlockQ2_K, d), random_half(rng, 1e-4f, 1e-2f, false));
        set_half(row, o + offsetof(BlockQ2_K, dmin), random_half(rng, 1e-4f, 1e-2f, false));
      });
      break;
    case 11:
      each_block([&](size_t o) { set_half(row, o + offsetof(BlockQ3_K, d), random_half(rng, 1e-4f, 1e-2f, true)); });
      break;
    case 12:
    case 13:
      each_block([&](size_t o) {
        set_half(row, o, random_half(rng, 1e-4f, 1e-2f, false));
        set_half(row, o + 2, random_half(rng, 1e-4f, 1e-2f, false));
      });
      break;
    case 14:
      each_block([&](size_t o) { set_half(row, o + offsetof(BlockQ6_K, d), random_half(rng, 1e-4f, 1e-2f, true)); });
      break;
    case 23:
      each_block([&](size_t o) { set_half(row, o, random_half(rng, 1e-4f, 1e-2f, true)); });
      break;
    case 39:
      each_block([&](size_t o) { row[o] = static_cast<uint8_t>(120 + rng() % 10); });
      break;
    case 16:
    case 17:
    case 18:
    case 19:
    case 21:
    case 22:
      each_block([&](size_t o) { set_half(row, o, random_half(rng, 1e-4f, 1e-2f, true)); });
      break;
    case 29:  // IQ1_M's f16 scale lies in the top nibbles of its four scale words
      each_block([&](size_t o) {
        const uint16_t d = random_half(rng, 1e-4f, 1e-2f, true);
        for (int k = 0; k < 4; ++k) {
          uint8_t& top = row[o + offsetof(BlockIQ1_M, scales) + 2 * k + 1];
          top = static_cast<uint8_t>((top & 0x0f) | (((d >> (4 * k)) & 0x0f) << 4));
        }
      });
      break;
    case 34:
      each_block([&](size_t o) { set_half(row, o + offsetof(BlockTQ1_0, d), random_half(rng, 1e-4f, 1e-2f, true)); });
      break;
    case 35:
      each_block([&](size_t o) { set_half(row, o + offsetof(BlockTQ2_0, d), random_half(rng, 1e-4f, 1e-2f, true)); });
      break;
  }
  return row;
}

std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
  std::vector<float> x(n);
  std::normal_distribution<float> normal(0, 1);
  for (auto& v : x) v = normal(rng);
  return x;
}

std::vector<float> dequantize(uint32_t type, const Bytes& row, int64_t n) {
  std::vector<float> out(n);
  switch (type) {
    case 9:
      dequantize_row_q8_1(row.data(), out.data(), n);
      break;
    case 15:
      dequantize_row_q8_k(row.data(), out.data(), n);
      break;
    default:
      quant_kernels(type, SimdTier::kScalar).dequantize_row(row.data(), out.data(), n);
  }
  return out;
}

Bytes quantize_activations(const QuantKernels& k, const std::vector<float>& x) {
  Bytes out(row_bytes(k.activation_type, static_cast<int64_t>(x.size())));
  k.quantize_activations(x.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}

const char* type_name(uint32_t type) { return ggml_type(type)->name.data(); }

// Element counts that cover whole super-blocks and, for the 32-element formats, an odd
// block count (the AVX-512 kernels pair blocks).
int64_t test_length(uint32_t type) { return ggml_type(type)->block_elements == 256 ? 4096 : 32 * 37; }

}  // namespace

TEST(quant_scalar_dot_matches_dequantized_product) {
  std::mt19937 rng(1234);
  for (uint32_t type : cpu_weight_types()) {
    const QuantKernels& k = quant_kernels(type, SimdTier::kScalar);
    const int64_t n = test_length(type);
    for (int rep = 0; rep < 8; ++rep) {
      const Bytes w = random_weights(type, n, rng);
      const Bytes a = quantize_activations(k, random_floats(n, rng));
      const std::vector<float> wf = dequantize(type, w, n), af = dequantize(k.activation_type, a, n);
      double exact = 0, magnitude = 0;
      for (int64_t i = 0; i < n; ++i) {
        exact += static_cast<double>(wf[i]) * af[i];
        magnitude += std::fabs(static_cast<double>(wf[i]) * af[i]);
      }
      // Q8_1's sum term s is itself rounded to half, so Q4_1/Q5_1 agree only to that.
      const double tolerance = (k.activation_type == 9 ? 2e-3 : 2e-5) * magnitude;
      const float dot = k.vec_dot(w.data(), a.data(), n);
      CHECK(std::fabs(dot - exact) <= tolerance) << type_name(type) << " rep " << rep << ": dot " << dot << " vs "
                                                 << exact << " (tolerance " << tolerance << ")";
    }
  }
}

TEST(quant_simd_dot_matches_scalar) {
  const SimdTier host = cpu::host_simd_tier();
  std::printf("  host SIMD tier: %s\n", simd_tier_name(host).data());
  std::mt19937 rng(99);
  for (uint32_t type : cpu_weight_types()) {
    const int64_t n = test_length(type);
    const QuantKernels& scalar = quant_kernels(type, SimdTier::kScalar);
    const bool host_bf16 = cpu::detect_cpu_features().avx512bf16;
    for (const auto& [tier, bf16] :
         {std::pair{SimdTier::kAvx2, false}, std::pair{SimdTier::kAvx512, false}, std::pair{SimdTier::kAvx512, true}}) {
      if (tier > host || (bf16 && !host_bf16)) continue;
      const QuantKernels& k = quant_kernels(type, tier, bf16);
      // A fallback is tested at its own tier; so is a repacked kernel that tier shares.
      const quant::VecDotFn below =
          tier == SimdTier::kAvx512 ? quant_kernels(type, SimdTier::kAvx2).vec_dot_repacked : nullptr;
      const quant::VecDotFn plain = k.vec_dot_tier == tier ? k.vec_dot : nullptr;
      const quant::VecDotFn repacked = k.vec_dot_repacked != below && !bf16 ? k.vec_dot_repacked : nullptr;
      if (bf16 && k.vec_dot == quant_kernels(type, tier).vec_dot) continue;  // no AVX-512 BF16 kernel
      if (!plain && !repacked) continue;
      int failures = 0;
      for (int rep = 0; rep < 64 && failures < 3; ++rep) {
        const Bytes w = random_weights(type, n, rng);
        const Bytes a = quantize_activations(k, random_floats(n, rng));
        const std::vector<float> wf = dequantize(type, w, n), af = dequantize(k.activation_type, a, n);
        double magnitude = 0;
        for (int64_t i = 0; i < n; ++i) magnitude += std::fabs(static_cast<double>(wf[i]) * af[i]);
        const float expected = scalar.vec_dot(w.data(), a.data(), n);
        for (const quant::VecDotFn dot : {plain, repacked}) {
          if (!dot) continue;
          const float got = dot(w.data(), a.data(), n);
          const bool ok = std::fabs(got - expected) <= 1e-5 * magnitude;
          failures += !ok;
          CHECK(ok) << type_name(type) << " " << simd_tier_name(tier) << (dot == plain ? "" : " repacked") << " rep "
                    << rep << ": " << got << " vs scalar " << expected << " (magnitude " << magnitude << ")";
        }
      }
    }
  }
}

TEST(quant_kernel_table_records_tiers) {
  for (uint32_t type : cpu_weight_types()) {
    for (SimdTier tier : {SimdTier::kScalar, SimdTier::kAvx2, SimdTier::kAvx512}) {
      const QuantKernels& k = quant_kernels(type, tier);
      CHECK(k.type == type && k.vec_dot_tier <= tier && k.vec_dot && k.dequantize_row && k.quantize_activations)
          << type_name(type) << " at " << simd_tier_name(tier);
    }
  }
#if BLOOMERY_X86_SIMD
  CHECK(quant_kernels(12, SimdTier::kAvx512).vec_dot_tier == SimdTier::kAvx512) << "Q4_K has an AVX-512 dot";
  CHECK(quant_kernels(11, SimdTier::kAvx2).vec_dot_tier == SimdTier::kAvx2) << "Q3_K has an AVX2 dot";
  CHECK(quant_kernels(11, SimdTier::kAvx512).vec_dot_rows != nullptr) << "Q3_K has an AVX-512 multi-row dot";
  CHECK(quant_kernels(20, SimdTier::kAvx512).vec_dot_tier == SimdTier::kAvx2) << "IQ4_NL falls back to AVX2";
  CHECK(quant_kernels(2, SimdTier::kAvx512).vec_dot_tier == SimdTier::kAvx2) << "Q4_0 runs its AVX2 dot there";
  CHECK(quant_kernels(30, SimdTier::kAvx512, true).vec_dot != quant_kernels(30, SimdTier::kAvx512).vec_dot)
      << "BF16 takes dpbf16 where the CPU has AVX-512 BF16";
#else
  // Off x86 the AVX tiers have no kernels: every tier's table holds the scalar dots.
  for (uint32_t type : cpu_weight_types()) {
    CHECK(quant_kernels(type, SimdTier::kAvx512).vec_dot_tier == SimdTier::kScalar) << type_name(type);
  }
#endif
  CHECK(quant_kernels(14, SimdTier::kAvx512).activation_type == 15) << "Q6_K dots against Q8_K";
  CHECK(quant_kernels(39, SimdTier::kAvx2).activation_type == 8) << "MXFP4 dots against Q8_0";
  bool refused = false;
  try {
    quant_kernels(24, SimdTier::kScalar);  // I8
  } catch (const Error& e) {
    refused = e.code() == "UNSUPPORTED_QUANT";
  }
  CHECK(refused) << "a type without CPU kernels must be refused by name";

  cpu::CpuFeatures f;
  CHECK(cpu::simd_tier_for(f) == SimdTier::kScalar);
  f.avx2 = f.fma = f.f16c = true;
  CHECK(cpu::simd_tier_for(f) == SimdTier::kAvx2);
  f.avx512f = f.avx512bw = f.avx512vl = true;
  CHECK(cpu::simd_tier_for(f) == SimdTier::kAvx2) << "the AVX-512 tier needs VNNI";
  f.avx512vnni = true;
  CHECK(cpu::simd_tier_for(f) == SimdTier::kAvx2) << "the AVX-512 tier needs BMI2";
  f.bmi2 = true;
  CHECK(cpu::simd_tier_for(f) == SimdTier::kAvx512);

  CHECK(cpu::capped_tier(SimdTier::kAvx512, nullptr) == SimdTier::kAvx512);
  CHECK(cpu::capped_tier(SimdTier::kAvx512, "") == SimdTier::kAvx512);
  CHECK(cpu::capped_tier(SimdTier::kAvx512, "avx2") == SimdTier::kAvx2);
  CHECK(cpu::capped_tier(SimdTier::kAvx512, "scalar") == SimdTier::kScalar);
  CHECK(cpu::capped_tier(SimdTier::kAvx2, "avx512") == SimdTier::kAvx2) << "a cap cannot raise the host's tier";
  std::string refused_code;
  try {
    cpu::capped_tier(SimdTier::kAvx2, "sse4");
  } catch (const Error& e) {
    refused_code = e.code();
  }
  CHECK(refused_code == "INVALID_ARGUMENT") << "an unknown cap must be refused by name";
}

TEST(quant_activation_quantizers_round_trip) {
  std::mt19937 rng(7);
  const int64_t n = 1024;
  std::vector<float> x = random_floats(n, rng);
  x[5] = -7.5f;  // the block's largest magnitude, negative: Q8_K maps it to -127 exactly
  for (uint32_t act : {8u, 9u, 15u}) {
    Bytes q(row_bytes(act, n));
    (act == 8 ? quantize_row_q8_0 : act == 9 ? quantize_row_q8_1 : quantize_row_q8_k)(x.data(), q.data(), n);
    const std::vector<float> back = dequantize(act, q, n);
    const int block = act == 15 ? 256 : 32;
    for (int64_t b = 0; b < n / block; ++b) {
      float amax = 0;
      for (int j = 0; j < block; ++j) amax = std::max(amax, std::fabs(x[b * block + j]));
      // Half a step of 127 levels, plus the half rounding of d for Q8_0/Q8_1.
      const float bound = amax / 127 * 0.5f + amax * (act == 15 ? 1e-6f : 1e-3f);
      for (int j = 0; j < block; ++j) {
        const int64_t i = b * block + j;
        CHECK(std::fabs(back[i] - x[i]) <= bound)
            << type_name(act) << " element " << i << ": " << back[i] << " vs " << x[i];
      }
    }
  }
  Bytes q8k(row_bytes(15, n));
  quantize_row_q8_k(x.data(), q8k.data(), n);
  const auto* blocks = reinterpret_cast<const BlockQ8_K*>(q8k.data());
  CHECK(blocks[0].qs[5] == -127) << int(blocks[0].qs[5]);
  for (int64_t b = 0; b < n / 256; ++b)
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += blocks[b].qs[16 * j + l];
      CHECK(blocks[b].bsums[j] == sum) << "block " << b << " bsum " << j;
    }
  Bytes q81(row_bytes(9, n));
  quantize_row_q8_1(x.data(), q81.data(), n);
  const auto* b81 = reinterpret_cast<const BlockQ8_1*>(q81.data());
  for (int64_t b = 0; b < n / 32; ++b) {
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += b81[b].qs[j];
    CHECK(b81[b].s == fp32_to_fp16(static_cast<float>(sum) * fp16_to_fp32(b81[b].d)) ||
          std::fabs(fp16_to_fp32(b81[b].s) - static_cast<float>(sum) * fp16_to_fp32(b81[b].d)) <=
              std::fabs(fp16_to_fp32(b81[b].s)) * 1e-3f)
        << "Q8_1 block " << b << " s";
  }
}

// A rough single-thread rate per tier for the served models' formats (cache-resident
// rows, so an upper bound); printed, not checked.
TEST(quant_dot_throughput) {
  const SimdTier host = cpu::host_simd_tier();
  std::mt19937 rng(5);
  const int64_t n = 4096, rows = 512;
  for (uint32_t type : {12u, 14u, 8u, 16u}) {
    std::vector<Bytes> w;
    for (int64_t r = 0; r < rows; ++r) w.push_back(random_weights(type, n, rng));
    for (SimdTier tier : {SimdTier::kScalar, SimdTier::kAvx2, SimdTier::kAvx512}) {
      if (tier > host) continue;
      const QuantKernels& k = quant_kernels(type, tier);
      const Bytes a = quantize_activations(k, random_floats(n, rng));
      float sink = 0;
      const int passes = tier == SimdTier::kScalar ? 2 : 20;
      const auto start = std::chrono::steady_clock::now();
      for (int p = 0; p < passes; ++p)
        for (const Bytes& row : w) sink += k.vec_dot(row.data(), a.data(), n);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("  %-5s %-7s %6.1f GB/s (weights)%s\n", type_name(type), simd_tier_name(k.vec_dot_tier).data(),
                  static_cast<double>(passes * rows) * static_cast<double>(w[0].size()) / s / 1e9,
                  std::isfinite(sink) ? "" : " (non-finite)");
    }
  }
}
