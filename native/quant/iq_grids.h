// The i-quants' codebooks (iq_grid_lists.h) and sign tables, as CPU arrays.
#pragma once

#include <array>
#include <bit>
#include <cstdint>

#include "quant/iq_grid_lists.h"

namespace bloomery::quant {

inline constexpr uint64_t kIq2xxsGrid[256] = {BLOOMERY_IQ2XXS_GRID};
inline constexpr uint64_t kIq2xsGrid[512] = {BLOOMERY_IQ2XS_GRID};
inline constexpr uint64_t kIq2sGrid[1024] = {BLOOMERY_IQ2S_GRID};
inline constexpr uint32_t kIq3xxsGrid[256] = {BLOOMERY_IQ3XXS_GRID};
inline constexpr uint32_t kIq3sGrid[512] = {BLOOMERY_IQ3S_GRID};
inline constexpr uint64_t kIq1sGrid[2048] = {BLOOMERY_IQ1S_GRID};

// IQ1_S's and IQ1_M's offset of every value of a group of 8, its sign stored per group.
inline constexpr float kIq1Delta = 0.125f;

// IQ2_XXS, IQ2_XS and IQ3_XXS store seven of a group's eight signs: the eighth makes the count of
// negative values even (ggml's ksigns_iq2xs). Bit j of the result: element j is negative.
constexpr uint8_t iq_even_signs(uint32_t seven_bits) {
  return static_cast<uint8_t>(seven_bits | ((std::popcount(seven_bits & 127u) & 1u) << 7));
}

// The same signs as eight bytes of +1 (0x01) or -1 (0xff), element 0 lowest (for _mm_sign_epi8).
inline constexpr std::array<uint64_t, 128> kIqEvenSignBytes = [] {
  std::array<uint64_t, 128> out{};
  for (uint32_t i = 0; i < 128; ++i)
    for (int j = 0; j < 8; ++j) out[i] |= static_cast<uint64_t>((iq_even_signs(i) >> j) & 1 ? 0xff : 0x01) << (8 * j);
  return out;
}();

}  // namespace bloomery::quant
