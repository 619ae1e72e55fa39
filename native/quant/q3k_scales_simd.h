// Q3_K's sixteen sub-block scales unpacked in registers, for its AVX2 and AVX-512 dots (a
// round trip through memory would stall on store forwarding once per block). Include only
// from SIMD-tier code.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#define BLOOMERY_Q3K_SCALES_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace bloomery::quant {

// Byte j = q3k_scale(packed, j): the low nibble is nibble j / 8 of byte j % 8, the high two
// bits are bits 2 * (j / 4) of byte 8 + j % 4, and the bias is 32.
BLOOMERY_Q3K_SCALES_AVX2 inline __m128i q3k_scales(const uint8_t* packed) {
  int64_t nibbles;
  int32_t high;
  std::memcpy(&nibbles, packed, 8);
  std::memcpy(&high, packed + 8, 4);
  const __m128i bytes = _mm_cvtsi64_si128(nibbles);
  const __m128i low4 = _mm_set1_epi8(0x0f);
  const __m128i low = _mm_unpacklo_epi64(_mm_and_si128(bytes, low4), _mm_and_si128(_mm_srli_epi16(bytes, 4), low4));
  // 32-bit lane k holds the four bytes' bit pair k, moved to bits 4..5 of each byte.
  const __m128i pairs = _mm_srlv_epi32(_mm_set1_epi32(high), _mm_setr_epi32(0, 2, 4, 6));
  const __m128i top = _mm_slli_epi32(_mm_and_si128(pairs, _mm_set1_epi8(3)), 4);
  return _mm_sub_epi8(_mm_or_si128(low, top), _mm_set1_epi8(32));
}

}  // namespace bloomery::quant
