// Conversions between float and the small float formats ggml stores: IEEE half (F16),
// bfloat16 (BF16) and the E8M0 power-of-two scale of MXFP4. Bit-exact with ggml's
// reference conversions (round to nearest even), so quantized data matches llama.cpp's.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace bloomery::quant {

inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  const uint32_t bits = exponent == 0x1f ? sign | 0x7f800000u | (mantissa << 13)
                                         : sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13);
  return std::bit_cast<float>(bits);
}

inline uint16_t fp32_to_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7e00u;   // NaN stays a (quiet) NaN
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and above round to infinity
  if (magnitude < 0x38800000u) {
    // Below the smallest normal half: the result is a subnormal count of 2^-24 steps;
    // scaling by 2^24 is exact and lrint rounds to nearest even.
    return sign | static_cast<uint16_t>(std::lrint(std::bit_cast<float>(magnitude) * 0x1p24f));
  }
  const uint32_t rebiased = magnitude - ((127u - 15u) << 23);
  return sign | static_cast<uint16_t>((rebiased + 0xfffu + ((rebiased >> 13) & 1u)) >> 13);
}

inline float bf16_to_fp32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

inline uint16_t fp32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 64u);  // keep NaN quiet
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// MXFP4's shared scale 2^(e-127), halved because its codebook stores doubled E2M1 values.
inline float e8m0_to_fp32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  return std::bit_cast<float>(bits);
}

}  // namespace bloomery::quant
