// The 16-weight units of every quantized type with integer dots: packed int8 codes and the
// scale (and min) they are worth, decoded the same way for the matvec kernels (cuda/matvec.cu)
// and the tiled matrix-matrix products (cuda/mmq.cu), so that both take the same integer sums.
// Unit u of a row holds its weights 16 u .. 16 u + 15.
#pragma once

#include <cstddef>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/iq_decode.cuh"

namespace bloomery::cuda {

inline constexpr int kUnit = 16;  // weights in a unit

// Types whose units carry a min, taken against the activations' sum: Q4_1 and Q5_1 read that
// sum from their Q8_1 blocks (the CPU's rounded one), the K-quants with mins add up the codes.
constexpr bool has_block_offsets(uint32_t type) { return type == kTypeQ4_1 || type == kTypeQ5_1; }
constexpr bool has_code_mins(uint32_t type) { return type == kTypeQ2_K || type == kTypeQ4_K || type == kTypeQ5_K; }

// 16 weights as packed int8 codes q, worth scale * q - min.
struct Unit {
  int q[4];
  float scale;
  float min;
};

// Bits 0..3 of `bits` moved to bit 4 of bytes 0..3: Q5_0/Q5_1's fifth bits of four weights.
__device__ __forceinline__ int fifth_bits(uint32_t bits) {
  return static_cast<int>(((bits & 1u) << 4) | ((bits & 2u) << 11) | ((bits & 4u) << 18) | ((bits & 8u) << 25));
}

// The 32-element formats: unit u is half u % 2 of block u / 2; weight j of a block sits in the
// low nibble of qs[j] (j < 16) or the high nibble of qs[j - 16], and Q5's fifth bit j in qh.
template <uint32_t Type>
__device__ __forceinline__ Unit decode_unit_32(const uint8_t* row, int unit) {
  Unit u{};
  const int half = unit % 2;
  const int shift = 4 * half;
  if constexpr (Type == kTypeQ4_0) {
    const uint8_t* b = row + (unit / 2) * sizeof(BlockQ4_0);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int low = (load_int_aligned2(b + offsetof(BlockQ4_0, qs) + 4 * i) >> shift) & 0x0f0f0f0f;
      u.q[i] = static_cast<int>(__vsub4(static_cast<unsigned>(low), 0x08080808u));
    }
    u.scale = half_at(b + offsetof(BlockQ4_0, d));
  } else if constexpr (Type == kTypeQ4_1) {
    const uint8_t* b = row + (unit / 2) * sizeof(BlockQ4_1);
#pragma unroll
    for (int i = 0; i < 4; ++i) u.q[i] = (load_int_aligned4(b + offsetof(BlockQ4_1, qs) + 4 * i) >> shift) & 0x0f0f0f0f;
    u.scale = half_at(b + offsetof(BlockQ4_1, d));
    u.min = -half_at(b + offsetof(BlockQ4_1, m));
  } else if constexpr (Type == kTypeQ5_0) {
    const uint8_t* b = row + (unit / 2) * sizeof(BlockQ5_0);
    const auto qh = static_cast<uint32_t>(load_int_aligned2(b + offsetof(BlockQ5_0, qh)));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int low = (load_int_aligned2(b + offsetof(BlockQ5_0, qs) + 4 * i) >> shift) & 0x0f0f0f0f;
      const int code = low | fifth_bits(qh >> (16 * half + 4 * i));
      u.q[i] = static_cast<int>(__vsub4(static_cast<unsigned>(code), 0x10101010u));
    }
    u.scale = half_at(b + offsetof(BlockQ5_0, d));
  } else if constexpr (Type == kTypeQ5_1) {
    const uint8_t* b = row + (unit / 2) * sizeof(BlockQ5_1);
    const auto qh = static_cast<uint32_t>(load_int_aligned4(b + offsetof(BlockQ5_1, qh)));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int low = (load_int_aligned4(b + offsetof(BlockQ5_1, qs) + 4 * i) >> shift) & 0x0f0f0f0f;
      u.q[i] = low | fifth_bits(qh >> (16 * half + 4 * i));
    }
    u.scale = half_at(b + offsetof(BlockQ5_1, d));
    u.min = -half_at(b + offsetof(BlockQ5_1, m));
  } else if constexpr (Type == kTypeIQ4_NL) {
    const uint8_t* b = row + (unit / 2) * sizeof(BlockIQ4_NL);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      u.q[i] = iq4nl_values((load_int_aligned2(b + offsetof(BlockIQ4_NL, qs) + 4 * i) >> shift) & 0x0f0f0f0f);
    u.scale = half_at(b + offsetof(BlockIQ4_NL, d));
  } else if constexpr (Type == kTypeMXFP4) {
    const uint8_t* b = row + (unit / 2) * sizeof(BlockMXFP4);
    uint32_t qs[4];
    load_16_unaligned(b + offsetof(BlockMXFP4, qs), qs);
#pragma unroll
    for (int i = 0; i < 4; ++i) u.q[i] = mxfp4_values((qs[i] >> shift) & 0x0f0f0f0f);
    u.scale = e8m0_to_float_half(b[offsetof(BlockMXFP4, e)]);
  } else {
    static_assert(Type == kTypeQ8_0);
    const uint8_t* b = row + (unit / 2) * sizeof(BlockQ8_0);
    const uint8_t* qs = b + offsetof(BlockQ8_0, qs) + kUnit * half;
#pragma unroll
    for (int i = 0; i < 4; ++i) u.q[i] = load_int_aligned2(qs + 4 * i);
    u.scale = half_at(b + offsetof(BlockQ8_0, d));
  }
  return u;
}

// The 256-element formats: unit u is the 16 weights (u % 16) * 16 .. of super-block u / 16.
template <uint32_t Type>
__device__ __forceinline__ Unit decode_unit_256(const uint8_t* row, int unit) {
  Unit u{};
  const int sixteenth = unit % 16;
  if constexpr (Type == kTypeQ4_K || Type == kTypeQ5_K) {
    // Sub-block j (32 weights) of a super-block: low nibbles of qs[32 (j/2) ..] for even j, high
    // for odd; Q5_K's fifth bit of weight l of sub-block j is bit j of qh[l].
    using Block = std::conditional_t<Type == kTypeQ4_K, BlockQ4_K, BlockQ5_K>;
    const uint8_t* b = row + (unit / 16) * sizeof(Block);
    const int j = sixteenth / 2;
    const int4 raw = *reinterpret_cast<const int4*>(b + offsetof(Block, qs) + 32 * (j / 2) + 16 * (unit % 2));
    const int shift = 4 * (j % 2);
    u.q[0] = (raw.x >> shift) & 0x0f0f0f0f;
    u.q[1] = (raw.y >> shift) & 0x0f0f0f0f;
    u.q[2] = (raw.z >> shift) & 0x0f0f0f0f;
    u.q[3] = (raw.w >> shift) & 0x0f0f0f0f;
    if constexpr (Type == kTypeQ5_K) {
      const int4 high = *reinterpret_cast<const int4*>(b + offsetof(Block, qh) + 16 * (unit % 2));
      u.q[0] |= ((high.x >> j) & 0x01010101) << 4;
      u.q[1] |= ((high.y >> j) & 0x01010101) << 4;
      u.q[2] |= ((high.z >> j) & 0x01010101) << 4;
      u.q[3] |= ((high.w >> j) & 0x01010101) << 4;
    }
    const uint8_t* scales = b + offsetof(Block, scales);
    u.scale = half_at(b + offsetof(Block, d)) * static_cast<float>(k4_scale(scales, j));
    u.min = half_at(b + offsetof(Block, dmin)) * static_cast<float>(k4_min(scales, j));
  } else if constexpr (Type == kTypeQ6_K) {
    // Element o of a super-block: half h = o / 128, quarter t = (o % 128) / 32, offset l = o % 32;
    // its low four bits are a nibble of ql[64 h + 32 (t & 1) + l], its high two bits sit in
    // qh[32 h + l] at 2 t, and its scale is scales[8 h + 2 t + l / 16].
    const uint8_t* b = row + (unit / 16) * sizeof(BlockQ6_K);
    const int o = sixteenth * kUnit;
    const int h = o / 128, t = (o % 128) / 32, l = o % 32;
    const uint8_t* ql = b + offsetof(BlockQ6_K, ql) + 64 * h + 32 * (t & 1) + l;
    const uint8_t* qh = b + offsetof(BlockQ6_K, qh) + 32 * h + l;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int low = (load_int_aligned2(ql + 4 * i) >> (4 * (t >> 1))) & 0x0f0f0f0f;
      const int high = ((load_int_aligned2(qh + 4 * i) >> (2 * t)) & 0x03030303) << 4;
      u.q[i] = static_cast<int>(__vsub4(static_cast<unsigned>(low | high), 0x20202020u));
    }
    const auto scale = static_cast<int8_t>(b[offsetof(BlockQ6_K, scales) + 8 * h + 2 * t + l / 16]);
    u.scale = half_at(b + offsetof(BlockQ6_K, d)) * static_cast<float>(scale);
  } else if constexpr (Type == kTypeQ2_K || Type == kTypeQ3_K) {
    // Element o: half h = o / 128, pair p = (o % 128) / 32, offset l = o % 32; its two low bits
    // sit at 2 p in qs[32 h + l], Q3_K's third bit (set: no -4) at 4 h + p in hmask[l]. Each 16
    // weights have one scale (Q2_K: and one min) of their own.
    using Block = std::conditional_t<Type == kTypeQ2_K, BlockQ2_K, BlockQ3_K>;
    const uint8_t* b = row + (unit / 16) * sizeof(Block);
    const int h = sixteenth / 8, p = (sixteenth % 8) / 2, l = 16 * (sixteenth % 2);
    const uint8_t* qs = b + offsetof(Block, qs) + 32 * h + l;
    const float d = half_at(b + offsetof(Block, d));
    if constexpr (Type == kTypeQ2_K) {
#pragma unroll
      for (int i = 0; i < 4; ++i) u.q[i] = (load_int_aligned4(qs + 4 * i) >> (2 * p)) & 0x03030303;
      const uint8_t scale = b[offsetof(BlockQ2_K, scales) + sixteenth];
      u.scale = d * static_cast<float>(scale & 0x0f);
      u.min = half_at(b + offsetof(BlockQ2_K, dmin)) * static_cast<float>(scale >> 4);
    } else {
      const uint8_t* hmask = b + offsetof(BlockQ3_K, hmask) + l;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int low = (load_int_aligned2(qs + 4 * i) >> (2 * p)) & 0x03030303;
        const int high = ((load_int_aligned2(hmask + 4 * i) >> (4 * h + p)) & 0x01010101) << 2;
        u.q[i] = static_cast<int>(__vsub4(static_cast<unsigned>(low | high), 0x04040404u));
      }
      u.scale = d * static_cast<float>(q3k_scale(b + offsetof(BlockQ3_K, scales), sixteenth));
    }
  } else {
    static_assert(Type == kTypeIQ4_XS);
    // Sub-block j (32 weights): weight l in the low nibble of qs[16 j + l] (l < 16) or the high one of qs[16 j + l -
    // 16].
    const uint8_t* b = row + (unit / 16) * sizeof(BlockIQ4_XS);
    const int j = sixteenth / 2;
    const uint8_t* qs = b + offsetof(BlockIQ4_XS, qs) + 16 * j;
#pragma unroll
    for (int i = 0; i < 4; ++i) u.q[i] = iq4nl_values((load_int_aligned4(qs + 4 * i) >> (4 * (unit % 2))) & 0x0f0f0f0f);
    u.scale = half_at(b + offsetof(BlockIQ4_XS, d)) * static_cast<float>(iq4xs_scale(b, j));
  }
  return u;
}

constexpr bool has_super_blocks(uint32_t type) {
  return type == kTypeQ2_K || type == kTypeQ3_K || type == kTypeQ4_K || type == kTypeQ5_K || type == kTypeQ6_K ||
         type == kTypeIQ4_XS;
}

// The 1- to 3-bit types: unit u is groups 2 (u % 16) and 2 (u % 16) + 1 of super-block u / 16, which
// share a scale. IQ1's values q + 0.125 * delta_sign are kept as the integers 8 q + delta_sign at an
// eighth of the scale.
template <uint32_t Type>
__device__ __forceinline__ Unit decode_unit_low_bit(const uint8_t* row, int unit) {
  const uint8_t* b = row + (unit / 16) * iq_block_bytes<Type>();
  const IqGroup g0 = iq_group<Type>(b, 2 * (unit % 16)), g1 = iq_group<Type>(b, 2 * (unit % 16) + 1);
  Unit u{};
  u.q[0] = static_cast<int>(g0.lo), u.q[1] = static_cast<int>(g0.hi);
  u.q[2] = static_cast<int>(g1.lo), u.q[3] = static_cast<int>(g1.hi);
  float factor = iq_factor<Type>();
  if constexpr (Type == kTypeIQ1_S || Type == kTypeIQ1_M) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int delta_sign = i < 2 ? g0.delta_sign : g1.delta_sign;
      const uint32_t eight_q = (static_cast<uint32_t>(u.q[i]) << 3) & 0xf8f8f8f8u;
      u.q[i] = static_cast<int>(__vadd4(eight_q, delta_sign > 0 ? 0x01010101u : 0xffffffffu));
    }
    factor = 0.125f;
  }
  u.scale = iq_block_d<Type>(b) * static_cast<float>(g0.scale) * factor;
  return u;
}

// The types of 32-weight blocks, one scale (and min) each: decode_unit_32's.
constexpr bool has_blocks_of_32(uint32_t type) { return !is_low_bit_type(type) && !has_super_blocks(type); }

template <uint32_t Type>
__device__ __forceinline__ Unit decode_unit(const uint8_t* row, int unit) {
  if constexpr (has_blocks_of_32(Type)) {
    return decode_unit_32<Type>(row, unit);
  } else if constexpr (is_low_bit_type(Type)) {
    return decode_unit_low_bit<Type>(row, unit);
  } else {
    return decode_unit_256<Type>(row, unit);
  }
}

}  // namespace bloomery::cuda
