// Block layouts of ggml's quantized types, byte for byte as ggml-common.h lays them out
// (GGUF tensors are arrays of these). Each block names its ggml type id and element
// count; quant_blocks_test ties both, and the size, to the table in ggml_types.
// Half-precision fields are raw IEEE half bits (see float_formats.h).
#pragma once

#include <cstdint>
#include <cstring>

namespace bloomery::quant {

inline constexpr int kQK = 32;    // elements per block of the 32-element formats
inline constexpr int kQKK = 256;  // elements per super-block of the K-quants

struct BlockQ4_0 {
  static constexpr uint32_t kType = 2, kElements = kQK;
  uint16_t d;
  uint8_t qs[kQK / 2];  // element j in the low nibble of qs[j], element j+16 in the high nibble
};

struct BlockQ4_1 {
  static constexpr uint32_t kType = 3, kElements = kQK;
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};

struct BlockQ5_0 {
  static constexpr uint32_t kType = 6, kElements = kQK;
  uint16_t d;
  uint8_t qh[4];  // fifth bits: bit j of the little-endian word belongs to element j
  uint8_t qs[kQK / 2];
};

struct BlockQ5_1 {
  static constexpr uint32_t kType = 7, kElements = kQK;
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};

struct BlockQ8_0 {
  static constexpr uint32_t kType = 8, kElements = kQK;
  uint16_t d;
  int8_t qs[kQK];
};

struct BlockQ8_1 {
  static constexpr uint32_t kType = 9, kElements = kQK;
  uint16_t d;
  uint16_t s;  // d * sum(qs), which the Q4_1/Q5_1 dots use for the weights' offset m
  int8_t qs[kQK];
};

struct BlockQ2_K {
  static constexpr uint32_t kType = 10, kElements = kQKK;
  uint8_t scales[kQKK / 16];  // per 16 elements: scale in the low nibble, min in the high
  uint8_t qs[kQKK / 4];
  uint16_t d;
  uint16_t dmin;
};

struct BlockQ3_K {
  static constexpr uint32_t kType = 11, kElements = kQKK;
  uint8_t hmask[kQKK / 8];  // third bits
  uint8_t qs[kQKK / 4];     // low two bits
  uint8_t scales[12];       // sixteen 6-bit scales, biased by 32
  uint16_t d;
};

struct BlockQ4_K {
  static constexpr uint32_t kType = 12, kElements = kQKK;
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];  // eight 6-bit scales and eight 6-bit mins, one pair per 32 elements
  uint8_t qs[kQKK / 2];
};

struct BlockQ5_K {
  static constexpr uint32_t kType = 13, kElements = kQKK;
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};

struct BlockQ6_K {
  static constexpr uint32_t kType = 14, kElements = kQKK;
  uint8_t ql[kQKK / 2];  // low four bits
  uint8_t qh[kQKK / 4];  // high two bits
  int8_t scales[kQKK / 16];
  uint16_t d;
};

struct BlockQ8_K {
  static constexpr uint32_t kType = 15, kElements = kQKK;
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];  // sums of qs per 16 elements, for the K-quants' mins and offsets
};

struct BlockIQ4_NL {
  static constexpr uint32_t kType = 20, kElements = kQK;
  uint16_t d;
  uint8_t qs[kQK / 2];
};

struct BlockIQ4_XS {
  static constexpr uint32_t kType = 23, kElements = kQKK;
  uint16_t d;
  uint16_t scales_h;            // high two bits of eight 6-bit scales
  uint8_t scales_l[kQKK / 64];  // low four bits, two scales per byte
  uint8_t qs[kQKK / 2];
};

struct BlockMXFP4 {
  static constexpr uint32_t kType = 39, kElements = kQK;
  uint8_t e;  // E8M0 scale
  uint8_t qs[kQK / 2];
};

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIQ4_NL) == 18 && sizeof(BlockIQ4_XS) == 136 && sizeof(BlockMXFP4) == 17);

// The non-linear 4-bit codebook of IQ4_NL and IQ4_XS.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// E2M1 values doubled (so they are integers); e8m0_to_fp32_half undoes the doubling.
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// The integer dot of a 32-element block of 4-bit codebook indices (IQ4_NL, MXFP4; element j in
// the low nibble of qs[j], element j + 16 in the high one) with a Q8_0 block's codes.
inline int codebook_block_dot(const uint8_t* qs, const int8_t* y, const int8_t* values) {
  int sum = 0;
  for (int j = 0; j < kQK / 2; ++j) sum += y[j] * values[qs[j] & 0x0f] + y[j + kQK / 2] * values[qs[j] >> 4];
  return sum;
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block: the first four
// pairs sit in the low six bits of bytes 0..7, the last four are split between the
// nibbles of bytes 8..11 and the top two bits of bytes 0..7.
struct ScaleMin {
  uint8_t scale;
  uint8_t min;
};
inline ScaleMin k4_scale_min(const uint8_t* scales, int j) {
  if (j < 4) return {static_cast<uint8_t>(scales[j] & 63), static_cast<uint8_t>(scales[j + 4] & 63)};
  return {static_cast<uint8_t>((scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4)),
          static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4))};
}

// All eight pairs of k4_scale_min at once, with word operations (for the SIMD dots).
inline void k4_unpack_scale_mins(const uint8_t* packed, uint8_t scales[8], uint8_t mins[8]) {
  uint32_t w[3];
  std::memcpy(w, packed, sizeof w);
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kTop2 = 0xc0c0c0c0;
  const uint32_t scales_lo = w[0] & kLow6, mins_lo = w[1] & kLow6;
  const uint32_t scales_hi = (w[2] & kLow4) | ((w[0] & kTop2) >> 2);
  const uint32_t mins_hi = ((w[2] >> 4) & kLow4) | ((w[1] & kTop2) >> 2);
  std::memcpy(scales, &scales_lo, 4);
  std::memcpy(scales + 4, &scales_hi, 4);
  std::memcpy(mins, &mins_lo, 4);
  std::memcpy(mins + 4, &mins_hi, 4);
}

// The sixteen signed scales of a Q3_K block: low nibbles from bytes 0..7 (both nibbles),
// high two bits from bytes 8..11, stored with a bias of 32.
inline int q3k_scale(const uint8_t* scales, int j) {
  const int low = j < 8 ? scales[j] & 0x0f : scales[j - 8] >> 4;
  const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// The eight signed scales of an IQ4_XS block, one per 32 elements, stored with a bias of 32.
inline int iq4xs_scale(const BlockIQ4_XS& b, int j) {
  const int low = (b.scales_l[j / 2] >> (4 * (j % 2))) & 0x0f;
  const int high = (b.scales_h >> (2 * j)) & 3;
  return (low | (high << 4)) - 32;
}

}  // namespace bloomery::quant
