// The 1- to 3-bit types on the GPU (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, TQ1_0,
// TQ2_0): their codebooks in device memory (the same lists as the CPU's, quant/iq_grid_lists.h), and
// each block's groups of 8 elements decoded as quant/iq_codes.h decodes them on the CPU: signed
// values, the odd integer scale of their 16 elements, and IQ1's delta sign. A value is
//   (d * scale) * factor * (q + 0.125 * delta_sign).
#pragma once

#include <cstdint>

#include "cuda/common.cuh"
#include "quant/iq_grid_lists.h"

namespace bloomery::cuda {

namespace iq_tables {
// Per translation unit (internal linkage): device code cannot read the CPU's constexpr arrays.
static const __device__ uint64_t kIq2xxsGrid[256] = {BLOOMERY_IQ2XXS_GRID};
static const __device__ uint64_t kIq2xsGrid[512] = {BLOOMERY_IQ2XS_GRID};
static const __device__ uint64_t kIq2sGrid[1024] = {BLOOMERY_IQ2S_GRID};
static const __device__ uint32_t kIq3xxsGrid[256] = {BLOOMERY_IQ3XXS_GRID};
static const __device__ uint32_t kIq3sGrid[512] = {BLOOMERY_IQ3S_GRID};
static const __device__ uint64_t kIq1sGrid[2048] = {BLOOMERY_IQ1S_GRID};
}  // namespace iq_tables

// Eight elements: signed int8 values, elements 0..3 in lo (element 0 lowest), 4..7 in hi.
struct IqGroup {
  uint32_t lo;
  uint32_t hi;
  int scale;       // odd integer multiplier of the group's 16 elements
  int delta_sign;  // IQ1_S, IQ1_M: +1 or -1; 0 in the others
};

__device__ __forceinline__ uint32_t u16_at(const uint8_t* p) { return p[0] | (static_cast<uint32_t>(p[1]) << 8); }
__device__ __forceinline__ uint32_t u32_at(const uint8_t* p) { return u16_at(p) | (u16_at(p + 2) << 16); }

// Four unsigned bytes, negated where bits 0..3 say so.
__device__ __forceinline__ uint32_t apply_signs4(uint32_t values, uint32_t bits) {
  const uint32_t mask = (((bits & 15u) * 0x00204081u) & 0x01010101u) * 0xffu;
  return __vsub4(values ^ mask, mask);
}

// Seven stored signs and the parity bit that makes the count of negatives even (ggml's ksigns_iq2xs).
__device__ __forceinline__ uint32_t even_signs(uint32_t seven) { return seven | ((__popc(seven) & 1u) << 7); }

__device__ __forceinline__ IqGroup grid8(uint64_t entry, uint32_t signs, int scale) {
  return {apply_signs4(static_cast<uint32_t>(entry), signs),
          apply_signs4(static_cast<uint32_t>(entry >> 32), signs >> 4), scale, 0};
}

// TQ1_0's base-3 digit n of a byte (quant/iq_codes.h, iq_detail::trit).
__device__ __forceinline__ int trit(uint32_t byte, int n) {
  constexpr uint32_t kPow3[5] = {1, 3, 9, 27, 81};
  return static_cast<int>((((byte * kPow3[n]) & 0xffu) * 3u) >> 8);
}

// The value (-1..1) of element e of a ternary block.
template <uint32_t Type>
__device__ __forceinline__ int ternary(const uint8_t* b, int e) {
  if constexpr (Type == kTypeTQ1_0) {
    if (e < 160) return trit(b[e % 32], e / 32) - 1;
    if (e < 240) return trit(b[32 + (e - 160) % 16], (e - 160) / 16) - 1;
    return trit(b[offsetof(quant::BlockTQ1_0, qh) + (e - 240) % 4], (e - 240) / 4) - 1;
  } else {
    static_assert(Type == kTypeTQ2_0);
    return ((b[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3) - 1;
  }
}

// Group g (elements 8g .. 8g + 7) of block b.
template <uint32_t Type>
__device__ __forceinline__ IqGroup iq_group(const uint8_t* b, int g) {
  const int r = g / 4, l = g % 4;  // the 32-element run, and the group within it
  if constexpr (Type == kTypeIQ2_XXS) {
    const uint8_t* qs = b + offsetof(quant::BlockIQ2_XXS, qs) + 8 * r;
    const uint32_t aux = u32_at(qs + 4);
    return grid8(iq_tables::kIq2xxsGrid[qs[l]], even_signs((aux >> (7 * l)) & 127),
                 2 * static_cast<int>(aux >> 28) + 1);
  } else if constexpr (Type == kTypeIQ2_XS) {
    const uint32_t v = u16_at(b + offsetof(quant::BlockIQ2_XS, qs) + 2 * g);
    const int scale = (b[offsetof(quant::BlockIQ2_XS, scales) + r] >> (4 * (l / 2))) & 0x0f;
    return grid8(iq_tables::kIq2xsGrid[v & 511], even_signs(v >> 9), 2 * scale + 1);
  } else if constexpr (Type == kTypeIQ2_S) {
    const int high = (b[offsetof(quant::BlockIQ2_S, qh) + r] >> (2 * l)) & 3;
    const int index = b[offsetof(quant::BlockIQ2_S, qs) + g] | (high << 8);
    const int scale = (b[offsetof(quant::BlockIQ2_S, scales) + r] >> (4 * (l / 2))) & 0x0f;
    return grid8(iq_tables::kIq2sGrid[index], b[offsetof(quant::BlockIQ2_S, qs) + 32 + g], 2 * scale + 1);
  } else if constexpr (Type == kTypeIQ3_XXS) {
    const uint8_t* qs = b + offsetof(quant::BlockIQ3_XXS, qs);
    const uint32_t aux = u32_at(qs + 64 + 4 * r);
    const uint32_t signs = even_signs((aux >> (7 * l)) & 127);
    return {apply_signs4(iq_tables::kIq3xxsGrid[qs[2 * g]], signs),
            apply_signs4(iq_tables::kIq3xxsGrid[qs[2 * g + 1]], signs >> 4), 2 * static_cast<int>(aux >> 28) + 1, 0};
  } else if constexpr (Type == kTypeIQ3_S) {
    const uint8_t* qs = b + offsetof(quant::BlockIQ3_S, qs) + 8 * r + 2 * l;
    const int qh = b[offsetof(quant::BlockIQ3_S, qh) + r];
    const uint32_t signs = b[offsetof(quant::BlockIQ3_S, signs) + g];
    const int scale = (b[offsetof(quant::BlockIQ3_S, scales) + r / 2] >> (4 * (r % 2))) & 0x0f;
    return {apply_signs4(iq_tables::kIq3sGrid[qs[0] | ((qh << (8 - 2 * l)) & 256)], signs),
            apply_signs4(iq_tables::kIq3sGrid[qs[1] | ((qh << (7 - 2 * l)) & 256)], signs >> 4), 2 * scale + 1, 0};
  } else if constexpr (Type == kTypeIQ1_S) {
    const uint32_t qh = u16_at(b + offsetof(quant::BlockIQ1_S, qh) + 2 * r);
    const uint64_t entry = iq_tables::kIq1sGrid[b[offsetof(quant::BlockIQ1_S, qs) + g] | (((qh >> (3 * l)) & 7) << 8)];
    return {static_cast<uint32_t>(entry), static_cast<uint32_t>(entry >> 32), 2 * static_cast<int>((qh >> 12) & 7) + 1,
            qh & 0x8000 ? -1 : 1};
  } else if constexpr (Type == kTypeIQ1_M) {
    const uint32_t qh = b[offsetof(quant::BlockIQ1_M, qh) + g / 2] >> (4 * (g % 2));
    const uint64_t entry = iq_tables::kIq1sGrid[b[offsetof(quant::BlockIQ1_M, qs) + g] | ((qh & 7) << 8)];
    const int s = g / 2;  // the 16-element sub-block
    const uint32_t word = u16_at(b + offsetof(quant::BlockIQ1_M, scales) + 2 * (s / 4));
    return {static_cast<uint32_t>(entry), static_cast<uint32_t>(entry >> 32),
            2 * static_cast<int>((word >> (3 * (s % 4))) & 7) + 1, qh & 8 ? -1 : 1};
  } else {
    static_assert(Type == kTypeTQ1_0 || Type == kTypeTQ2_0);
    uint32_t q[2] = {0, 0};
#pragma unroll
    for (int j = 0; j < 8; ++j)
      q[j / 4] |= (static_cast<uint32_t>(ternary<Type>(b, 8 * g + j)) & 0xffu) << (8 * (j % 4));
    return {q[0], q[1], 1, 0};
  }
}

// The block's f16 scale d.
template <uint32_t Type>
__device__ __forceinline__ float iq_block_d(const uint8_t* b) {
  if constexpr (Type == kTypeIQ1_M) {
    const uint8_t* sc = b + offsetof(quant::BlockIQ1_M, scales);
    const uint32_t bits = (sc[1] >> 4) | (sc[3] & 0xf0u) | ((sc[5] & 0xf0u) << 4) | ((sc[7] & 0xf0u) << 8);
    return half_bits_to_float(static_cast<uint16_t>(bits));
  } else if constexpr (Type == kTypeTQ1_0) {
    return half_bits_to_float(static_cast<uint16_t>(u16_at(b + offsetof(quant::BlockTQ1_0, d))));
  } else if constexpr (Type == kTypeTQ2_0) {
    return half_bits_to_float(static_cast<uint16_t>(u16_at(b + offsetof(quant::BlockTQ2_0, d))));
  } else {
    return half_bits_to_float(static_cast<uint16_t>(u16_at(b)));
  }
}

// The power of two the (d * scale) of a type is multiplied by.
template <uint32_t Type>
constexpr float iq_factor() {
  if constexpr (Type == kTypeIQ2_XXS || Type == kTypeIQ2_XS || Type == kTypeIQ2_S) return 0.125f;
  if constexpr (Type == kTypeIQ3_XXS) return 0.25f;
  return 1.0f;
}

template <uint32_t Type>
constexpr size_t iq_block_bytes() {
  if constexpr (Type == kTypeIQ2_XXS) return sizeof(quant::BlockIQ2_XXS);
  if constexpr (Type == kTypeIQ2_XS) return sizeof(quant::BlockIQ2_XS);
  if constexpr (Type == kTypeIQ2_S) return sizeof(quant::BlockIQ2_S);
  if constexpr (Type == kTypeIQ3_XXS) return sizeof(quant::BlockIQ3_XXS);
  if constexpr (Type == kTypeIQ3_S) return sizeof(quant::BlockIQ3_S);
  if constexpr (Type == kTypeIQ1_S) return sizeof(quant::BlockIQ1_S);
  if constexpr (Type == kTypeIQ1_M) return sizeof(quant::BlockIQ1_M);
  if constexpr (Type == kTypeTQ1_0) return sizeof(quant::BlockTQ1_0);
  return sizeof(quant::BlockTQ2_0);
}

}  // namespace bloomery::cuda
