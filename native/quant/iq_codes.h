// The 1- to 3-bit types' blocks unpacked into one form: value e of a block is
//   (d * scale[e / 16]) * factor * (q[e] + kIq1Delta * delta_sign[e / 8])
// with q the signed codebook value, scale the odd integer multiplier of its 16 elements, and the
// delta term only in IQ1_S and IQ1_M. In that order of float steps the value is, bit for bit,
// ggml's dequantized one (its (0.5 + s) * 0.25 is (2s + 1) * 0.125 to the bit: powers of two).
// The scalar dots and the dequantizer read blocks through this; the SIMD dots read the bits.
#pragma once

#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/float_formats.h"
#include "quant/iq_grids.h"

namespace bloomery::quant {

struct IqCodes {
  float d = 0;       // the block's f16 scale
  float factor = 1;  // 0.125 (IQ2), 0.25 (IQ3_XXS) or 1
  int8_t q[kQKK];
  int16_t scale[kQKK / 16];
  int8_t delta_sign[kQKK / 8] = {};  // +1 or -1 in IQ1_S and IQ1_M, 0 in the others
};

namespace iq_detail {

inline uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline uint16_t load_u16(const void* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Eight elements from an entry of eight magnitudes and a sign byte (bit j: element j negative).
inline void put8(int8_t* q, uint64_t entry, uint8_t signs) {
  for (int j = 0; j < 8; ++j) {
    const int v = static_cast<int>((entry >> (8 * j)) & 0xff);
    q[j] = static_cast<int8_t>((signs >> j) & 1 ? -v : v);
  }
}

// Four elements from an entry of four magnitudes and four sign bits.
inline void put4(int8_t* q, uint32_t entry, uint32_t signs) {
  for (int j = 0; j < 4; ++j) {
    const int v = static_cast<int>((entry >> (8 * j)) & 0xff);
    q[j] = static_cast<int8_t>((signs >> j) & 1 ? -v : v);
  }
}

// Eight signed values of an IQ1 entry.
inline void put_signed8(int8_t* q, uint64_t entry) {
  for (int j = 0; j < 8; ++j) q[j] = static_cast<int8_t>((entry >> (8 * j)) & 0xff);
}

// A base-3 digit of a TQ1_0 byte: the byte holds ceil(digits * 256 / 243) for its five digits read
// as a fraction; multiplying by 3^n (mod 256) brings digit n to the top, and * 3 >> 8 reads it.
inline int trit(uint8_t byte, int n) {
  static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  const uint8_t shifted = static_cast<uint8_t>(byte * kPow3[n]);
  return (shifted * 3) >> 8;
}

}  // namespace iq_detail

inline void decode_iq(const BlockIQ2_XXS& b, IqCodes& c) {
  c.d = fp16_to_fp32(b.d), c.factor = 0.125f;
  for (int r = 0; r < 8; ++r) {
    const uint32_t grid = iq_detail::load_u32(b.qs + 4 * r), aux = iq_detail::load_u32(b.qs + 4 * r + 2);
    for (int l = 0; l < 4; ++l)
      iq_detail::put8(c.q + 32 * r + 8 * l, kIq2xxsGrid[(grid >> (8 * l)) & 0xff],
                      iq_even_signs((aux >> (7 * l)) & 127));
    c.scale[2 * r] = c.scale[2 * r + 1] = static_cast<int16_t>(2 * (aux >> 28) + 1);
  }
}

inline void decode_iq(const BlockIQ2_XS& b, IqCodes& c) {
  c.d = fp16_to_fp32(b.d), c.factor = 0.125f;
  for (int g = 0; g < 32; ++g) iq_detail::put8(c.q + 8 * g, kIq2xsGrid[b.qs[g] & 511], iq_even_signs(b.qs[g] >> 9));
  for (int r = 0; r < 8; ++r) {
    c.scale[2 * r] = static_cast<int16_t>(2 * (b.scales[r] & 0x0f) + 1);
    c.scale[2 * r + 1] = static_cast<int16_t>(2 * (b.scales[r] >> 4) + 1);
  }
}

inline void decode_iq(const BlockIQ2_S& b, IqCodes& c) {
  c.d = fp16_to_fp32(b.d), c.factor = 0.125f;
  for (int g = 0; g < 32; ++g) {
    const int index = b.qs[g] | (((b.qh[g / 4] >> (2 * (g % 4))) & 3) << 8);
    iq_detail::put8(c.q + 8 * g, kIq2sGrid[index], b.qs[32 + g]);
  }
  for (int r = 0; r < 8; ++r) {
    c.scale[2 * r] = static_cast<int16_t>(2 * (b.scales[r] & 0x0f) + 1);
    c.scale[2 * r + 1] = static_cast<int16_t>(2 * (b.scales[r] >> 4) + 1);
  }
}

inline void decode_iq(const BlockIQ3_XXS& b, IqCodes& c) {
  c.d = fp16_to_fp32(b.d), c.factor = 0.25f;
  for (int r = 0; r < 8; ++r) {
    const uint32_t aux = iq_detail::load_u32(b.qs + kQKK / 4 + 4 * r);
    for (int l = 0; l < 4; ++l) {
      const uint8_t signs = iq_even_signs((aux >> (7 * l)) & 127);
      int8_t* q = c.q + 32 * r + 8 * l;
      iq_detail::put4(q, kIq3xxsGrid[b.qs[8 * r + 2 * l]], signs);
      iq_detail::put4(q + 4, kIq3xxsGrid[b.qs[8 * r + 2 * l + 1]], signs >> 4);
    }
    c.scale[2 * r] = c.scale[2 * r + 1] = static_cast<int16_t>(2 * (aux >> 28) + 1);
  }
}

inline void decode_iq(const BlockIQ3_S& b, IqCodes& c) {
  c.d = fp16_to_fp32(b.d), c.factor = 1;
  for (int r = 0; r < 8; ++r) {
    for (int l = 0; l < 4; ++l) {
      const uint8_t signs = b.signs[4 * r + l];
      int8_t* q = c.q + 32 * r + 8 * l;
      iq_detail::put4(q, kIq3sGrid[b.qs[8 * r + 2 * l] | ((b.qh[r] << (8 - 2 * l)) & 256)], signs);
      iq_detail::put4(q + 4, kIq3sGrid[b.qs[8 * r + 2 * l + 1] | ((b.qh[r] << (7 - 2 * l)) & 256)], signs >> 4);
    }
    c.scale[2 * r] = c.scale[2 * r + 1] = static_cast<int16_t>(2 * ((b.scales[r / 2] >> (4 * (r % 2))) & 0x0f) + 1);
  }
}

inline void decode_iq(const BlockIQ1_S& b, IqCodes& c) {
  c.d = fp16_to_fp32(b.d), c.factor = 1;
  for (int r = 0; r < 8; ++r) {
    const uint16_t qh = iq_detail::load_u16(b.qh + r);
    for (int l = 0; l < 4; ++l) {
      iq_detail::put_signed8(c.q + 32 * r + 8 * l, kIq1sGrid[b.qs[4 * r + l] | (((qh >> (3 * l)) & 7) << 8)]);
      c.delta_sign[4 * r + l] = qh & 0x8000 ? -1 : 1;
    }
    c.scale[2 * r] = c.scale[2 * r + 1] = static_cast<int16_t>(2 * ((qh >> 12) & 7) + 1);
  }
}

// IQ1_M's f16 block scale: the top nibbles of its four 16-bit scale words, lowest word first.
inline uint16_t iq1m_block_scale(const BlockIQ1_M& b) {
  uint16_t sc[4];
  std::memcpy(sc, b.scales, sizeof sc);
  return static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}

inline void decode_iq(const BlockIQ1_M& b, IqCodes& c) {
  c.d = fp16_to_fp32(iq1m_block_scale(b)), c.factor = 1;
  uint16_t sc[4];
  std::memcpy(sc, b.scales, sizeof sc);
  for (int g = 0; g < 32; ++g) {
    const uint8_t qh = b.qh[g / 2];
    const int shift = 4 * (g % 2);  // each qh byte: group 2k in its low nibble, 2k + 1 in its high one
    iq_detail::put_signed8(c.q + 8 * g, kIq1sGrid[b.qs[g] | (((qh >> shift) & 7) << 8)]);
    c.delta_sign[g] = (qh >> shift) & 8 ? -1 : 1;
  }
  for (int s = 0; s < 16; ++s) c.scale[s] = static_cast<int16_t>(2 * ((sc[s / 4] >> (3 * (s % 4))) & 7) + 1);
}

inline void decode_iq(const BlockTQ1_0& b, IqCodes& c) {
  c.d = fp16_to_fp32(b.d), c.factor = 1;
  for (int e = 0; e < 160; ++e) c.q[e] = static_cast<int8_t>(iq_detail::trit(b.qs[e % 32], e / 32) - 1);
  for (int e = 0; e < 80; ++e) c.q[160 + e] = static_cast<int8_t>(iq_detail::trit(b.qs[32 + e % 16], e / 16) - 1);
  for (int e = 0; e < 16; ++e) c.q[240 + e] = static_cast<int8_t>(iq_detail::trit(b.qh[e % 4], e / 4) - 1);
  for (auto& s : c.scale) s = 1;
}

inline void decode_iq(const BlockTQ2_0& b, IqCodes& c) {
  c.d = fp16_to_fp32(b.d), c.factor = 1;
  for (int e = 0; e < kQKK; ++e)
    c.q[e] = static_cast<int8_t>(((b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3) - 1);
  for (auto& s : c.scale) s = 1;
}

}  // namespace bloomery::quant
