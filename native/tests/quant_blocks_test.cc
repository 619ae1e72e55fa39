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
