// The multi-row dots against their single-row dots: a batched prompt and one token at a
// time must give the same logits, so each output must be equal bit for bit, not close.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <random>
#include <vector>

#include "cpu/cpu_dispatch.h"
#include "quant/blocks.h"
#include "quant/f16_rows.h"
#include "quant/float_formats.h"
#include "quant/ggml_types.h"
#include "quant/kernels.h"
#include "tests/check.h"

using namespace bloomery;
using namespace bloomery::quant;

namespace {

using Bytes = std::vector<uint8_t>;

// The types whose f16 scale d leads the block: IQ4_XS and the codebook types.
bool is_leading_d(uint32_t type) {
  return type == 23 || type == 16 || type == 17 || type == 18 || type == 19 || type == 21 || type == 22;
}

// Random blocks with every f16 field (d, dmin) set to a small normal value of its own, so no block
// is inf or NaN and a kernel that takes one field, block or row for another gets other sums; `rows`
// rows of `n` elements.
Bytes random_rows(uint32_t type, int64_t n, int64_t rows, std::mt19937& rng) {
  const size_t row_bytes = *ggml_row_bytes(*ggml_type(type), static_cast<uint64_t>(n));
  Bytes out(row_bytes * static_cast<size_t>(rows));
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  const size_t block_bytes = ggml_type(type)->block_bytes;
  const std::vector<size_t> f16_fields = type == 12 || type == 13 ? std::vector<size_t>{0, 2}
                                         : type == 11             ? std::vector<size_t>{offsetof(BlockQ3_K, d)}
                                         : type == 14             ? std::vector<size_t>{offsetof(BlockQ6_K, d)}
                                         : is_leading_d(type)     ? std::vector<size_t>{0}
                                         : type == 34             ? std::vector<size_t>{offsetof(BlockTQ1_0, d)}
                                         : type == 35             ? std::vector<size_t>{offsetof(BlockTQ2_0, d)}
                                                                  : std::vector<size_t>{};
  for (size_t block = 0; block < out.size() / block_bytes; ++block) {
    for (const size_t at : f16_fields) {
      const uint16_t half = fp32_to_fp16(0.0005f + 0.001f * static_cast<float>(rng() % 1024) / 1024.0f);
      std::memcpy(out.data() + block * block_bytes + at, &half, 2);
    }
    if (type == 39) out[block * block_bytes] = static_cast<uint8_t>(120 + rng() % 10);  // MXFP4's E8M0 scale
  }
  return out;
}

// kDotRows activation rows of `n` random floats in `k`'s activation format.
struct ActivationRows {
  Bytes bytes;
  const void* rows[kDotRows];
};
ActivationRows random_activations(const QuantKernels& k, int64_t n, std::mt19937& rng) {
  const size_t a_bytes = *ggml_row_bytes(*ggml_type(k.activation_type), static_cast<uint64_t>(n));
  ActivationRows out;
  out.bytes.resize(a_bytes * kDotRows);
  std::vector<float> x(static_cast<size_t>(n));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int r = 0; r < kDotRows; ++r) {
    for (float& v : x) v = uniform(rng);
    k.quantize_activations(x.data(), out.bytes.data() + r * a_bytes, n);
    out.rows[r] = out.bytes.data() + r * a_bytes;
  }
  return out;
}

// `avx512` (single-row, and `avx512_rows` where there is one) gives `avx2`'s bits on random rows.
void check_same_bits(uint32_t type, VecDotFn avx2, VecDotFn avx512, VecDotRowsFn avx512_rows,
                     const QuantKernels& format, std::mt19937& rng) {
  const int64_t n = ggml_type(type)->block_elements == 256 ? 4096 : 32 * 37;  // 37: an odd last block
  int mismatches = 0;
  for (int rep = 0; rep < 16; ++rep) {
    const Bytes w = random_rows(type, n, 1, rng);
    const ActivationRows activations = random_activations(format, n, rng);
    float rows_out[kDotRows];
    if (avx512_rows) avx512_rows(w.data(), activations.rows, kDotRows, n, rows_out);
    for (int r = 0; r < kDotRows; ++r) {
      const float want = avx2(w.data(), activations.rows[r], n);
      const float single = avx512(w.data(), activations.rows[r], n);
      const float rows = avx512_rows ? rows_out[r] : single;
      const bool same = std::memcmp(&single, &want, sizeof want) == 0 && std::memcmp(&rows, &want, sizeof want) == 0;
      mismatches += !same;
      CHECK(same || mismatches > 3) << ggml_type(type)->name << " rep " << rep << " row " << r << std::setprecision(9)
                                    << ": avx512 " << single << ", rows " << rows << ", avx2 " << want;
    }
  }
  CHECK(mismatches == 0) << ggml_type(type)->name << ": " << mismatches << " of " << 16 * kDotRows << " differ";
}

}  // namespace

TEST(quant_multi_row_dots_match_single_row_dots_bit_for_bit) {
  if (cpu::host_simd_tier() < SimdTier::kAvx512) return;
  std::mt19937 rng(7);
  const int64_t n = 1024;
  // Q3_K, Q4_K, Q6_K, and the 1- to 3-bit types.
  for (const uint32_t type : {11u, 12u, 14u, 16u, 17u, 18u, 19u, 21u, 22u, 29u, 34u, 35u}) {
    const QuantKernels& k = quant_kernels(type, SimdTier::kAvx512);
    CHECK(k.vec_dot_rows != nullptr) << type;
    if (!k.vec_dot_rows) continue;
    const Bytes w = random_rows(type, n, 1, rng);
    const ActivationRows activations = random_activations(k, n, rng);
    const void* const* rows = activations.rows;
    for (int count = 1; count <= kDotRows; ++count) {
      float got[kDotRows];
      k.vec_dot_rows(w.data(), rows, count, n, got);
      for (int r = 0; r < count; ++r) {
        const float expected = k.vec_dot(w.data(), rows[r], n);
        CHECK(std::memcmp(&got[r], &expected, sizeof(float)) == 0)
            << "type " << type << " rows " << count << " row " << r << ": " << got[r] << " vs " << expected;
      }
    }
  }
}

// The several-weight-row dots (Q8_0 in its own layout; Q4_0, IQ4_NL, MXFP4 repacked; a decode
// step's one activation row and a prompt's 2 to 8) against the single-row dots of the same layout, on
// rows whose MXFP4 scales include the two E8M0 exponents below the normal range (0 and 1), at both tiers.
TEST(quant_weight_row_dots_match_single_row_dots_bit_for_bit) {
  if (cpu::host_simd_tier() < SimdTier::kAvx2) return;
  std::mt19937 rng(11);
  const int64_t n = 32 * 37;
  int checked_repacked = 0, checked_plain = 0;
  for (const SimdTier tier : {SimdTier::kAvx2, SimdTier::kAvx512}) {
    if (cpu::host_simd_tier() < tier) continue;
    for (const uint32_t type : cpu_weight_types()) {
      const QuantKernels& k = quant_kernels(type, tier);
      for (const bool repacked : {false, true}) {
        const VecDotWeightRowsFn several = repacked ? k.vec_dot_weight_rows_repacked : k.vec_dot_weight_rows;
        const VecDotFn single = repacked ? k.vec_dot_repacked : k.vec_dot;
        if (!several) continue;
        ++(repacked ? checked_repacked : checked_plain);
        const size_t row_bytes = *ggml_row_bytes(*ggml_type(type), static_cast<uint64_t>(n));
        for (int rows = 1; rows <= kDotRows; ++rows) {
          Bytes w = random_rows(type, n, kWeightRows, rng);
          if (type == 39) {
            const size_t block_bytes = ggml_type(type)->block_bytes;
            for (size_t block = rows; block < w.size() / block_bytes; block += 7) w[block * block_bytes] = block % 2;
          }
          const ActivationRows activations = random_activations(k, n, rng);
          float got[kDotRows * kWeightRows];
          // Odd row counts prefetch the rows themselves meanwhile (as if they came next): the same sums.
          const bool prefetch = rows % 2 == 1;
          several(w.data(), row_bytes, activations.rows, rows, n, got, prefetch ? w.data() : nullptr,
                  prefetch ? w.size() : 0);
          for (int r = 0; r < rows; ++r) {
            for (int j = 0; j < kWeightRows; ++j) {
              const float want = single(w.data() + j * row_bytes, activations.rows[r], n);
              CHECK(std::memcmp(&got[r * kWeightRows + j], &want, sizeof want) == 0)
                  << ggml_type(type)->name << (repacked ? " repacked" : "") << " tier " << simd_tier_name(tier)
                  << " rows " << rows << " activation row " << r << " weight row " << j << std::setprecision(9) << ": "
                  << got[r * kWeightRows + j] << " vs " << want;
            }
          }
        }
      }
    }
  }
  CHECK(checked_repacked >= 3) << "Q4_0, IQ4_NL and MXFP4 have repacked several-weight-row dots";
  CHECK(checked_plain >= 1) << "Q8_0 has a several-weight-row dot";
}

// llama.cpp's quantized dots on x86 are its AVX2 code on AVX-512 hosts too, so every AVX-512
// quantized kernel keeps the AVX2 kernel's order: its single-row and multi-row dots give the
// AVX2 dot's bits (the oracle tests hold the AVX2 kernels to llama.cpp's).
TEST(quant_avx512_quantized_dots_equal_the_avx2_dots_bit_for_bit) {
  if (cpu::host_simd_tier() < SimdTier::kAvx512) return;
  std::mt19937 rng(8);
  int checked = 0;
  for (const uint32_t type : cpu_weight_types()) {
    const QuantKernels& avx2 = quant_kernels(type, SimdTier::kAvx2);
    const QuantKernels& avx512 = quant_kernels(type, SimdTier::kAvx512);
    // The float formats (dotted against themselves) follow ggml's AVX-512 float dots, which differ
    // from its AVX2 ones.
    // The 1- to 3-bit types have AVX-512 several-row dots beside their AVX2 single-row ones.
    if ((avx512.vec_dot_tier != SimdTier::kAvx512 && !avx512.vec_dot_rows) || avx512.activation_type == type) continue;
    ++checked;
    check_same_bits(type, avx2.vec_dot, avx512.vec_dot, avx512.vec_dot_rows, avx512, rng);
    // The repacked order too, where llama.cpp repacks the type on both tiers.
    if (avx2.vec_dot_repacked && avx512.vec_dot_repacked) {
      check_same_bits(type, avx2.vec_dot_repacked, avx512.vec_dot_repacked, avx512.vec_dot_rows_repacked, avx512, rng);
    }
  }
  CHECK(checked >= 15) << "the AVX-512 quantized kernels: Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, MXFP4, and the nine 1- to "
                          "3-bit types";
}

// Queries of width d against `count` random f16 rows, through `k` and through the scalar tier.
TEST(quant_f16_row_kernels_match_scalar) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  const F16RowKernels& simd = f16_row_kernels(cpu::host_simd_tier());
  const F16RowKernels& scalar = f16_row_kernels(SimdTier::kScalar);
  for (const int64_t d : {int64_t{128}, int64_t{133}}) {  // 133: the tails run too
    const int64_t count = 37, stride = d + 5;
    std::vector<uint16_t> rows(static_cast<size_t>(count * stride));
    for (uint16_t& v : rows) v = fp32_to_fp16(uniform(rng));
    for (int queries = 1; queries <= kQueryTile; ++queries) {
      std::vector<float> q(static_cast<size_t>(queries * d)), weights(static_cast<size_t>(queries * count));
      for (float& v : q) v = uniform(rng);
      for (float& v : weights) v = uniform(rng);
      std::vector<float> want(static_cast<size_t>(queries * std::max(d, count))), got(want.size());
      std::vector<const float*> q_rows, w_rows;
      std::vector<float*> want_rows, got_rows;
      for (int i = 0; i < queries; ++i) {
        q_rows.push_back(q.data() + i * d);
        w_rows.push_back(weights.data() + i * count);
        want_rows.push_back(want.data() + i * std::max(d, count));
        got_rows.push_back(got.data() + i * std::max(d, count));
      }
      scalar.scores(rows.data(), stride, count, q_rows.data(), queries, d, 0.5f, want_rows.data());
      simd.scores(rows.data(), stride, count, q_rows.data(), queries, d, 0.5f, got_rows.data());
      for (int i = 0; i < queries; ++i)
        for (int64_t j = 0; j < count; ++j)
          CHECK(std::fabs(got_rows[i][j] - want_rows[i][j]) <= 1e-5f * d) << d << " q" << i << " row " << j;
      scalar.weighted_sum(w_rows.data(), queries, rows.data(), stride, count, d, want_rows.data());
      simd.weighted_sum(w_rows.data(), queries, rows.data(), stride, count, d, got_rows.data());
      for (int i = 0; i < queries; ++i)
        for (int64_t j = 0; j < d; ++j)
          CHECK(std::fabs(got_rows[i][j] - want_rows[i][j]) <= 1e-5f * count) << d << " q" << i << " elem " << j;
    }
  }
  std::vector<float> want(133), got(133);
  for (float& v : want) v = uniform(rng) * 1e3f;
  got = want;
  scalar.round(want.data(), 133);
  simd.round(got.data(), 133);
  CHECK(std::memcmp(want.data(), got.data(), 133 * sizeof(float)) == 0) << "f16 rounding";
}

// A query's scores and weighted sums do not depend on the queries passed with it: the
// same bits alone as in a full tile (a prompt's pass and one token's pass agree).
TEST(quant_f16_row_kernels_are_independent_of_the_tile) {
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  const F16RowKernels& k = f16_row_kernels(cpu::host_simd_tier());
  const int64_t d = 128, count = 29;
  std::vector<uint16_t> rows(static_cast<size_t>(count * d));
  for (uint16_t& v : rows) v = fp32_to_fp16(uniform(rng));
  std::vector<float> q(static_cast<size_t>(kQueryTile * d)), weights(static_cast<size_t>(kQueryTile * count));
  for (float& v : q) v = uniform(rng);
  for (float& v : weights) v = uniform(rng);
  std::vector<float> tile_scores(static_cast<size_t>(kQueryTile * count)),
      tile_sums(static_cast<size_t>(kQueryTile * d));
  std::vector<const float*> q_rows, w_rows;
  std::vector<float*> score_rows, sum_rows;
  for (int i = 0; i < kQueryTile; ++i) {
    q_rows.push_back(q.data() + i * d);
    w_rows.push_back(weights.data() + i * count);
    score_rows.push_back(tile_scores.data() + i * count);
    sum_rows.push_back(tile_sums.data() + i * d);
  }
  k.scores(rows.data(), d, count, q_rows.data(), kQueryTile, d, 0.25f, score_rows.data());
  k.weighted_sum(w_rows.data(), kQueryTile, rows.data(), d, count, d, sum_rows.data());
  for (int i = 0; i < kQueryTile; ++i) {
    std::vector<float> alone_scores(static_cast<size_t>(count)), alone_sums(static_cast<size_t>(d));
    float* s = alone_scores.data();
    float* o = alone_sums.data();
    k.scores(rows.data(), d, count, &q_rows[i], 1, d, 0.25f, &s);
    k.weighted_sum(&w_rows[i], 1, rows.data(), d, count, d, &o);
    CHECK(std::memcmp(s, score_rows[i], count * sizeof(float)) == 0) << "scores of query " << i;
    CHECK(std::memcmp(o, sum_rows[i], d * sizeof(float)) == 0) << "sums of query " << i;
  }
}
