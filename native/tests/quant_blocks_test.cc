// Block layouts against the ggml type table, the small float formats against known bit
// patterns, and hand-computed Q8_0 / Q4_K blocks that pin the reference to ggml's formulas.
#include <cmath>
#include <cstring>
#include <vector>

#include "quant/blocks.h"
#include "quant/dequantize.h"
#include "quant/dot_scalar.h"
#include "quant/float_formats.h"
#include "quant/ggml_types.h"
#include "quant/iq_codes.h"
#include "quant/iq_grids.h"
#include "quant/quantize_activations.h"
#include "tests/check.h"

using namespace bloomery::quant;

namespace {
template <typename Block>
void check_block_matches_table(const char* name) {
  const auto info = ggml_type(Block::kType);
  CHECK(info.has_value()) << name;
  if (!info) return;
  CHECK(info->name == name) << name << " is ggml type " << Block::kType;
  CHECK(info->block_bytes == sizeof(Block)) << name;
  CHECK(info->block_elements == Block::kElements) << name;
}
}  // namespace

TEST(quant_blocks_match_ggml_type_table) {
  check_block_matches_table<BlockQ4_0>("Q4_0");
  check_block_matches_table<BlockQ4_1>("Q4_1");
  check_block_matches_table<BlockQ5_0>("Q5_0");
  check_block_matches_table<BlockQ5_1>("Q5_1");
  check_block_matches_table<BlockQ8_0>("Q8_0");
  check_block_matches_table<BlockQ8_1>("Q8_1");
  check_block_matches_table<BlockQ2_K>("Q2_K");
  check_block_matches_table<BlockQ3_K>("Q3_K");
  check_block_matches_table<BlockQ4_K>("Q4_K");
  check_block_matches_table<BlockQ5_K>("Q5_K");
  check_block_matches_table<BlockQ6_K>("Q6_K");
  check_block_matches_table<BlockQ8_K>("Q8_K");
  check_block_matches_table<BlockIQ4_NL>("IQ4_NL");
  check_block_matches_table<BlockIQ4_XS>("IQ4_XS");
  check_block_matches_table<BlockMXFP4>("MXFP4");
  check_block_matches_table<BlockIQ2_XXS>("IQ2_XXS");
  check_block_matches_table<BlockIQ2_XS>("IQ2_XS");
  check_block_matches_table<BlockIQ2_S>("IQ2_S");
  check_block_matches_table<BlockIQ3_XXS>("IQ3_XXS");
  check_block_matches_table<BlockIQ3_S>("IQ3_S");
  check_block_matches_table<BlockIQ1_S>("IQ1_S");
  check_block_matches_table<BlockIQ1_M>("IQ1_M");
  check_block_matches_table<BlockTQ1_0>("TQ1_0");
  check_block_matches_table<BlockTQ2_0>("TQ2_0");
}

namespace {
// FNV-1a over the little-endian bytes of a table's entries.
template <typename T, size_t N>
uint64_t fnv1a(const T (&table)[N]) {
  uint64_t h = 0xcbf29ce484222325;
  for (const T& v : table)
    for (size_t j = 0; j < sizeof(T); ++j) h = (h ^ ((static_cast<uint64_t>(v) >> (8 * j)) & 0xff)) * 0x100000001b3;
  return h;
}
}  // namespace

// The i-quants' codebooks and sign table, pinned to ggml-common.h's by a hash computed there (any
// one entry changed changes it), and the sign bytes the SIMD dots use pinned to the sign table.
TEST(quant_iq_grids_match_ggml) {
  CHECK(fnv1a(kIq2xxsGrid) == 0xbb4ee025b5ac6e8eull) << "iq2xxs_grid";
  CHECK(fnv1a(kIq2xsGrid) == 0xc9b1ee61e79909bdull) << "iq2xs_grid";
  CHECK(fnv1a(kIq2sGrid) == 0x123edd38a3b62b90ull) << "iq2s_grid";
  CHECK(fnv1a(kIq3xxsGrid) == 0xdfa5dc83d6a155d5ull) << "iq3xxs_grid";
  CHECK(fnv1a(kIq3sGrid) == 0xfa37020c25b44829ull) << "iq3s_grid";
  CHECK(fnv1a(kIq1sGrid) == 0x6703ed863501ae2eull) << "iq1s_grid";
  uint8_t signs[128];
  for (uint32_t i = 0; i < 128; ++i) signs[i] = iq_even_signs(i);
  CHECK(fnv1a(signs) == 0xf19ba8f8c3292ba5ull) << "ksigns_iq2xs";
  for (uint32_t i = 0; i < 128; ++i)
    for (int j = 0; j < 8; ++j) {
      const auto byte = static_cast<int8_t>((kIqEvenSignBytes[i] >> (8 * j)) & 0xff);
      CHECK(byte == ((signs[i] >> j) & 1 ? -1 : 1)) << "sign bytes of " << i << ", element " << j;
    }
}

// Hand-built blocks of the 1- to 3-bit types against values worked out from ggml's formulas.
TEST(quant_iq_known_blocks) {
  float out[256];
  {
    // IQ2_XXS, first 32 elements: grid entries 0, 255, 1, 2; group 0's seven sign bits 0b0000001
    // (element 0 negative, and so by parity element 7); scale nibble 3: d * 7 / 8.
    BlockIQ2_XXS b{};
    b.d = fp32_to_fp16(1.0f);
    const uint32_t grid = 0x0201ff00u, aux = (3u << 28) | 0b0000001u;
    std::memcpy(b.qs, &grid, 4);
    std::memcpy(b.qs + 2, &aux, 4);
    dequantize_row_iq2_xxs(&b, out, 256);
    const float s = 7.0f / 8;
    CHECK(out[0] == -8 * s && out[1] == 8 * s && out[6] == 8 * s && out[7] == -8 * s) << out[0] << " " << out[7];
    // entry 255 is 0x2b2b2b1908081908: elements 8.. are 8, 25, 8, 8, 25, 43, 43, 43
    CHECK(out[8] == 8 * s && out[9] == 25 * s && out[13] == 43 * s && out[15] == 43 * s) << out[9];
  }
  {
    // IQ1_S: group 0 is grid entry 0 (all -1), the delta negative, scale 2 * 1 + 1.
    BlockIQ1_S b{};
    b.d = fp32_to_fp16(0.5f);
    b.qh[0] = static_cast<uint16_t>(0x8000 | (1 << 12));
    dequantize_row_iq1_s(&b, out, 256);
    CHECK(out[0] == 0.5f * 3 * (-1 - 0.125f)) << out[0];
  }
  {
    // TQ1_0: byte 0 holds digits (2, 0, 1, 0, 0), first most significant, as ceil(171 * 256 / 243) = 181.
    BlockTQ1_0 b{};
    b.d = fp32_to_fp16(1.0f);
    b.qs[0] = 181;
    dequantize_row_tq1_0(&b, out, 256);
    CHECK(out[0] == 1 && out[32] == -1 && out[64] == 0 && out[96] == -1) << out[0] << out[32] << out[64] << out[96];
  }
}

TEST(quant_fp16_known_bits) {
  CHECK(fp32_to_fp16(1.0f) == 0x3c00);
  CHECK(fp32_to_fp16(-2.0f) == 0xc000);
  CHECK(fp32_to_fp16(0.1f) == 0x2e66) << "0.1 rounds down to 0x2e66";
  CHECK(fp32_to_fp16(65504.0f) == 0x7bff);
  CHECK(fp32_to_fp16(65520.0f) == 0x7c00) << "the halfway point above the largest half rounds to infinity";
  CHECK(fp32_to_fp16(0x1p-24f) == 0x0001) << "smallest subnormal";
  CHECK(fp32_to_fp16(0x1p-25f) == 0x0000) << "a tie rounds to even (zero)";
  CHECK(fp32_to_fp16(1.0f + 0x1p-11f) == 0x3c00) << "a tie rounds to even";
  CHECK(fp32_to_fp16(1.0f + 3 * 0x1p-11f) == 0x3c02) << "a tie rounds to even";
  CHECK(std::isnan(fp16_to_fp32(fp32_to_fp16(NAN))));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    CHECK(fp32_to_fp16(f) == h) << "half 0x" << std::hex << h << " does not round-trip";
  }
}

TEST(quant_bf16_and_e8m0_known_bits) {
  CHECK(fp32_to_bf16(1.0f) == 0x3f80);
  CHECK(fp32_to_bf16(1.0f + 0x1p-8f) == 0x3f80) << "a tie rounds to even";
  CHECK(fp32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82) << "a tie rounds to even";
  CHECK(bf16_to_fp32(0xc040) == -3.0f);
  CHECK(e8m0_to_fp32_half(127) == 0.5f) << "2^(127-127), halved";
  CHECK(e8m0_to_fp32_half(130) == 4.0f);
  CHECK(e8m0_to_fp32_half(1) == 0x1p-127f);
  CHECK(e8m0_to_fp32_half(0) == 0x1p-128f);
}

TEST(quant_q8_0_known_block) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);
  BlockQ8_0 b;
  quantize_row_q8_0(x, &b, 32);
  // amax 16: d = 16/127 = 0.1259843, which is half 0x3008 (0.12597656); id = 127/16.
  CHECK(b.d == 0x3008) << b.d;
  CHECK(b.qs[0] == -127 && b.qs[16] == 0 && b.qs[17] == 8 && b.qs[18] == 16 && b.qs[31] == 119)
      << int(b.qs[0]) << " " << int(b.qs[17]) << " " << int(b.qs[18]) << " " << int(b.qs[31]);
  float y[32];
  dequantize_row_q8_0(&b, y, 32);
  CHECK(y[0] == -127 * 0.12597656f && y[31] == 119 * 0.12597656f) << y[0] << " " << y[31];

  // The dot of that block with itself: sum(qs^2) * d^2.
  int sum_squares = 0;
  for (int j = 0; j < 32; ++j) sum_squares += b.qs[j] * b.qs[j];
  const float expected = static_cast<float>(sum_squares) * (0.12597656f * 0.12597656f);
  CHECK(vec_dot_q8_0_q8_0(&b, &b, 32) == expected) << vec_dot_q8_0_q8_0(&b, &b, 32) << " vs " << expected;
}

// Q8_0's activations round half to even (llama.cpp's x86 path), not half away from zero (ggml's
// scalar reference): with amax 127 the inverse scale is 1, so each value's own half decides.
TEST(quant_q8_0_rounds_halves_to_even) {
  float x[32] = {};
  x[0] = 127.0f;
  const float halves[] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 125.5f, -126.5f};
  const int8_t even[] = {0, 2, 2, 0, -2, -2, 126, -126};
  for (int j = 0; j < 8; ++j) x[1 + j] = halves[j];
  BlockQ8_0 b;
  quantize_row_q8_0(x, &b, 32);
  for (int j = 0; j < 8; ++j) CHECK(b.qs[1 + j] == even[j]) << halves[j] << " quantized to " << int(b.qs[1 + j]);
}

TEST(quant_q4_k_known_block) {
  // Scales 10 + 7j and mins 3 + 8j reach above 15, so the packed high bits of
  // sub-blocks 4..7 matter. Packed here as ggml's get_scale_min_k4 reads them.
  int scale[8], min[8];
  for (int j = 0; j < 8; ++j) scale[j] = 10 + 7 * j, min[j] = 3 + 8 * j;
  BlockQ4_K b{};
  b.d = 0x3c00;     // 1.0
  b.dmin = 0x3800;  // 0.5
  for (int j = 0; j < 4; ++j) {
    b.scales[j] = static_cast<uint8_t>(scale[j] | ((scale[j + 4] >> 4) << 6));
    b.scales[j + 4] = static_cast<uint8_t>(min[j] | ((min[j + 4] >> 4) << 6));
    b.scales[j + 8] = static_cast<uint8_t>((scale[j + 4] & 0x0f) | ((min[j + 4] & 0x0f) << 4));
  }
  for (int e = 0; e < 256; ++e) {
    const int sub = e / 32, byte = 32 * (sub / 2) + e % 32;
    b.qs[byte] |= static_cast<uint8_t>((e % 16) << (4 * (sub % 2)));
  }
  float y[256];
  dequantize_row_q4_k(&b, y, 256);
  CHECK(y[0] == -1.5f) << "10*0 - 0.5*3: " << y[0];
  CHECK(y[200] == 390.5f) << "52*8 - 0.5*51: " << y[200];
  CHECK(y[255] == 855.5f) << "59*15 - 0.5*59: " << y[255];
  for (int e = 0; e < 256; ++e) {
    const float expected = static_cast<float>(scale[e / 32] * (e % 16)) - 0.5f * static_cast<float>(min[e / 32]);
    CHECK(y[e] == expected) << "element " << e << ": " << y[e] << " vs " << expected;
  }

  // Against a Q8_K row of all ones (d = 1): the dot is the sum of the dequantized values.
  BlockQ8_K ones{};
  ones.d = 1.0f;
  for (int j = 0; j < 256; ++j) ones.qs[j] = 1;
  for (int j = 0; j < 16; ++j) ones.bsums[j] = 16;
  double sum = 0;
  for (int e = 0; e < 256; ++e) sum += y[e];
  CHECK(vec_dot_q4_k_q8_k(&b, &ones, 256) == static_cast<float>(sum)) << vec_dot_q4_k_q8_k(&b, &ones, 256);
}
