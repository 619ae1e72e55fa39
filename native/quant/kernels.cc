#include "quant/kernels.h"

#include <array>
#include <string>

#include "base/error.h"
#include "quant/dequantize.h"
#include "quant/dot_scalar.h"
#include "quant/dot_simd.h"
#include "quant/quantize_activations.h"

namespace bloomery::quant {

namespace {

// One row per weight type: the scalar kernels every tier shares, and the dot of each
// SIMD tier where one exists (nullptr: that tier uses the tier below).
struct KernelRow {
  uint32_t type;
  uint32_t activation_type;
  DequantizeRowFn dequantize_row;
  QuantizeRowFn quantize_activations;
  VecDotFn dot_scalar;
  VecDotFn dot_avx2;
  VecDotFn dot_avx512;
  VecDotRowsFn dot_rows_avx512 = nullptr;  // the AVX-512 tier's single-row dot's arithmetic (AVX2's where it has none)
  VecDotFn dot_avx512_bf16 = nullptr;      // in place of dot_avx512 where the CPU has AVX-512 BF16
  // The repacked order (QuantKernels::vec_dot_repacked) where llama.cpp repacks the type on AVX2
  // hosts and up, and on AVX-512 hosts.
  VecDotFn repacked_avx2 = nullptr;
  VecDotFn repacked_avx512 = nullptr;
  VecDotRowsFn repacked_rows_avx512 = nullptr;
  VecDotWeightRowsFn repacked_weight_rows_avx2 = nullptr;    // AVX2 and up
  VecDotWeightRowsFn repacked_weight_rows_avx512 = nullptr;  // AVX-512 hosts: the same sums through VNNI
  VecDotWeightRowsFn weight_rows_avx2 = nullptr;             // vec_dot's, eight weight rows at once; AVX2 and up
  VecDotWeightRowsFn weight_rows_avx512 = nullptr;           // AVX-512 hosts: the same sums through VNNI
};

constexpr uint32_t kF32 = 0, kF16 = 1, kQ8_0 = 8, kQ8_1 = 9, kQ8_K = 15, kBF16 = 30;

// Each SIMD tier's dot sums in the order of llama.cpp's dot for that weight type on a host of
// that tier, so the same activations give the same bits (and near-ties fall on its side):
// the float dots follow ggml's float dots per tier (float_dot.h); llama.cpp's x86 quantized
// dots are AVX2 code on AVX-512 hosts too, so an AVX-512 kernel here (where the wider registers
// pay) keeps the AVX2 kernel's int32 lanes and float steps, and a type without one runs the
// AVX2 kernel there.
constexpr KernelRow kRows[] = {
    {0, kF32, dequantize_row_f32, quantize_row_f32, vec_dot_f32_f32, vec_dot_f32_f32_avx2, vec_dot_f32_f32_avx512},
    {1, kF16, dequantize_row_f16, quantize_row_f16, vec_dot_f16_f16, vec_dot_f16_f16_avx2, vec_dot_f16_f16_avx512},
    {2, kQ8_0, dequantize_row_q4_0, quantize_row_q8_0, vec_dot_q4_0_q8_0, vec_dot_q4_0_q8_0_avx2, nullptr, nullptr,
     nullptr, vec_dot_q4_0_q8_0_repacked_avx2, vec_dot_q4_0_q8_0_repacked_avx2, nullptr,
     vec_dot_weight_rows_q4_0_q8_0_repacked_avx2, vec_dot_weight_rows_q4_0_q8_0_repacked_vnni},
    {3, kQ8_1, dequantize_row_q4_1, quantize_row_q8_1, vec_dot_q4_1_q8_1, vec_dot_q4_1_q8_1_avx2, nullptr},
    {6, kQ8_0, dequantize_row_q5_0, quantize_row_q8_0, vec_dot_q5_0_q8_0, vec_dot_q5_0_q8_0_avx2, nullptr},
    {7, kQ8_1, dequantize_row_q5_1, quantize_row_q8_1, vec_dot_q5_1_q8_1, vec_dot_q5_1_q8_1_avx2, nullptr},
    {8, kQ8_0, dequantize_row_q8_0, quantize_row_q8_0, vec_dot_q8_0_q8_0, vec_dot_q8_0_q8_0_avx2, nullptr, nullptr,
     nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, vec_dot_weight_rows_q8_0_q8_0_avx2,
     vec_dot_weight_rows_q8_0_q8_0_vnni},
    {10, kQ8_K, dequantize_row_q2_k, quantize_row_q8_k, vec_dot_q2_k_q8_k, vec_dot_q2_k_q8_k_avx2, nullptr, nullptr,
     nullptr, nullptr, vec_dot_q2_k_q8_k_repacked_avx2},
    {11, kQ8_K, dequantize_row_q3_k, quantize_row_q8_k, vec_dot_q3_k_q8_k, vec_dot_q3_k_q8_k_avx2,
     vec_dot_q3_k_q8_k_avx512, vec_dot_rows_q3_k_q8_k_avx512},
    {12, kQ8_K, dequantize_row_q4_k, quantize_row_q8_k, vec_dot_q4_k_q8_k, vec_dot_q4_k_q8_k_avx2,
     vec_dot_q4_k_q8_k_avx512, vec_dot_rows_q4_k_q8_k_avx512, nullptr, vec_dot_q4_k_q8_k_repacked_avx2,
     vec_dot_q4_k_q8_k_repacked_avx512, vec_dot_rows_q4_k_q8_k_repacked_avx512},
    {13, kQ8_K, dequantize_row_q5_k, quantize_row_q8_k, vec_dot_q5_k_q8_k, vec_dot_q5_k_q8_k_avx2,
     vec_dot_q5_k_q8_k_avx512},
    {14, kQ8_K, dequantize_row_q6_k, quantize_row_q8_k, vec_dot_q6_k_q8_k, vec_dot_q6_k_q8_k_avx2,
     vec_dot_q6_k_q8_k_avx512, vec_dot_rows_q6_k_q8_k_avx512},
    {16, kQ8_K, dequantize_row_iq2_xxs, quantize_row_q8_k, vec_dot_iq2_xxs_q8_k, vec_dot_iq2_xxs_q8_k_avx2,
     vec_dot_iq2_xxs_q8_k_avx512, vec_dot_rows_iq2_xxs_q8_k_avx512},
    {17, kQ8_K, dequantize_row_iq2_xs, quantize_row_q8_k, vec_dot_iq2_xs_q8_k, vec_dot_iq2_xs_q8_k_avx2,
     vec_dot_iq2_xs_q8_k_avx512, vec_dot_rows_iq2_xs_q8_k_avx512},
    {18, kQ8_K, dequantize_row_iq3_xxs, quantize_row_q8_k, vec_dot_iq3_xxs_q8_k, vec_dot_iq3_xxs_q8_k_avx2,
     vec_dot_iq3_xxs_q8_k_avx512, vec_dot_rows_iq3_xxs_q8_k_avx512},
    {19, kQ8_K, dequantize_row_iq1_s, quantize_row_q8_k, vec_dot_iq1_s_q8_k, vec_dot_iq1_s_q8_k_avx2,
     vec_dot_iq1_s_q8_k_avx512, vec_dot_rows_iq1_s_q8_k_avx512},
    {20, kQ8_0, dequantize_row_iq4_nl, quantize_row_q8_0, vec_dot_iq4_nl_q8_0, vec_dot_iq4_nl_q8_0_avx2, nullptr,
     nullptr, nullptr, vec_dot_iq4_nl_q8_0_repacked_avx2, vec_dot_iq4_nl_q8_0_repacked_avx2, nullptr,
     vec_dot_weight_rows_iq4_nl_q8_0_repacked_avx2, vec_dot_weight_rows_iq4_nl_q8_0_repacked_vnni},
    {21, kQ8_K, dequantize_row_iq3_s, quantize_row_q8_k, vec_dot_iq3_s_q8_k, vec_dot_iq3_s_q8_k_avx2,
     vec_dot_iq3_s_q8_k_avx512, vec_dot_rows_iq3_s_q8_k_avx512},
    {22, kQ8_K, dequantize_row_iq2_s, quantize_row_q8_k, vec_dot_iq2_s_q8_k, vec_dot_iq2_s_q8_k_avx2,
     vec_dot_iq2_s_q8_k_avx512, vec_dot_rows_iq2_s_q8_k_avx512},
    {23, kQ8_K, dequantize_row_iq4_xs, quantize_row_q8_k, vec_dot_iq4_xs_q8_k, vec_dot_iq4_xs_q8_k_avx2,
     vec_dot_iq4_xs_q8_k_avx512},
    {29, kQ8_K, dequantize_row_iq1_m, quantize_row_q8_k, vec_dot_iq1_m_q8_k, vec_dot_iq1_m_q8_k_avx2,
     vec_dot_iq1_m_q8_k_avx512, vec_dot_rows_iq1_m_q8_k_avx512},
    {30, kBF16, dequantize_row_bf16, quantize_row_bf16, vec_dot_bf16_bf16, vec_dot_bf16_bf16_avx2,
     vec_dot_bf16_bf16_avx512, nullptr, vec_dot_bf16_bf16_avx512_bf16},
    {34, kQ8_K, dequantize_row_tq1_0, quantize_row_q8_k, vec_dot_tq1_0_q8_k, vec_dot_tq1_0_q8_k_avx2, nullptr,
     vec_dot_rows_tq1_0_q8_k_avx512},
    {35, kQ8_K, dequantize_row_tq2_0, quantize_row_q8_k, vec_dot_tq2_0_q8_k, vec_dot_tq2_0_q8_k_avx2, nullptr,
     vec_dot_rows_tq2_0_q8_k_avx512},
    {39, kQ8_0, dequantize_row_mxfp4, quantize_row_q8_0, vec_dot_mxfp4_q8_0, vec_dot_mxfp4_q8_0_avx2,
     vec_dot_mxfp4_q8_0_avx512, nullptr, nullptr, vec_dot_mxfp4_q8_0_repacked_avx2, vec_dot_mxfp4_q8_0_repacked_avx2,
     nullptr, vec_dot_weight_rows_mxfp4_q8_0_repacked_avx2, vec_dot_weight_rows_mxfp4_q8_0_repacked_vnni},
};
constexpr size_t kRowCount = std::size(kRows);
constexpr size_t kTierCount = 3;

// Resolves the tier of each row: the highest tier at or below `tier` that has a dot.
QuantKernels resolve(const KernelRow& row, SimdTier tier, bool avx512_bf16) {
  QuantKernels k{
      row.type, row.activation_type, row.dequantize_row, row.quantize_activations, row.dot_scalar, SimdTier::kScalar,
      nullptr};
  if (tier >= SimdTier::kAvx2 && row.dot_avx2) k.vec_dot = row.dot_avx2, k.vec_dot_tier = SimdTier::kAvx2;
  if (tier >= SimdTier::kAvx512 && row.dot_avx512) k.vec_dot = row.dot_avx512, k.vec_dot_tier = SimdTier::kAvx512;
  if (tier >= SimdTier::kAvx512) k.vec_dot_rows = row.dot_rows_avx512;
  if (tier >= SimdTier::kAvx512 && avx512_bf16 && row.dot_avx512_bf16) k.vec_dot = row.dot_avx512_bf16;
  if (tier == SimdTier::kAvx2) k.vec_dot_repacked = row.repacked_avx2;
  if (tier >= SimdTier::kAvx2) k.vec_dot_weight_rows_repacked = row.repacked_weight_rows_avx2;
  if (tier >= SimdTier::kAvx2) k.vec_dot_weight_rows = row.weight_rows_avx2;
  if (tier >= SimdTier::kAvx512 && row.weight_rows_avx512) k.vec_dot_weight_rows = row.weight_rows_avx512;
  if (tier >= SimdTier::kAvx512 && row.repacked_weight_rows_avx512) {
    k.vec_dot_weight_rows_repacked = row.repacked_weight_rows_avx512;
  }
  if (tier >= SimdTier::kAvx512)
    k.vec_dot_repacked = row.repacked_avx512, k.vec_dot_rows_repacked = row.repacked_rows_avx512;
  return k;
}

// [without, with AVX-512 BF16][tier][row]
using Table = std::array<std::array<std::array<QuantKernels, kRowCount>, kTierCount>, 2>;

const Table& table() {
  static const Table t = [] {
    Table out{};
    for (size_t bf16 = 0; bf16 < 2; ++bf16)
      for (size_t tier = 0; tier < kTierCount; ++tier)
        for (size_t r = 0; r < kRowCount; ++r)
          out[bf16][tier][r] = resolve(kRows[r], static_cast<SimdTier>(tier), bf16);
    return out;
  }();
  return t;
}

constexpr std::array<uint32_t, kRowCount> kTypeIds = [] {
  std::array<uint32_t, kRowCount> ids{};
  for (size_t r = 0; r < kRowCount; ++r) ids[r] = kRows[r].type;
  return ids;
}();

}  // namespace

std::string_view simd_tier_name(SimdTier tier) {
  switch (tier) {
    case SimdTier::kScalar:
      return "scalar";
    case SimdTier::kAvx2:
      return "avx2";
    case SimdTier::kAvx512:
      return "avx512";
  }
  return "unknown";
}

const QuantKernels& quant_kernels(uint32_t type, SimdTier tier, bool avx512_bf16) {
  for (size_t r = 0; r < kRowCount; ++r)
    if (kRows[r].type == type) return table()[avx512_bf16 ? 1 : 0][static_cast<size_t>(tier)][r];
  throw Error("UNSUPPORTED_QUANT", "ggml type " + std::to_string(type) + " has no CPU kernels");
}

std::span<const uint32_t> cpu_weight_types() { return kTypeIds; }

}  // namespace bloomery::quant
