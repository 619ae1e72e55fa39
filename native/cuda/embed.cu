// Embedding rows dequantized with the CPU path's arithmetic (quant/dequantize.cc), product by
// product (no fused multiply-add), so the first residual rows are the same floats.
#include <cstddef>
#include <string>

#include "base/error.h"
#include "cuda/common.cuh"
#include "cuda/iq_decode.cuh"

namespace bloomery::cuda {

namespace {

// Element j of a 32-element block's 4-bit codes: the low nibble of qs[j] (j < 16), else the high nibble of qs[j - 16].
__device__ __forceinline__ int nibble(const uint8_t* qs, int j) { return (qs[j % 16] >> (4 * (j / 16))) & 0x0f; }

// Q5_0/Q5_1: the nibble and the fifth bit (bit j of the little-endian qh).
__device__ __forceinline__ int five_bits(const uint8_t* qs, const uint8_t* qh, int j) {
  return nibble(qs, j) | (((qh[j / 8] >> (j % 8)) & 1) << 4);
}

// The first of the four entries a codebook lookup (iq4nl_values, mxfp4_values) returns.
__device__ __forceinline__ float first_entry(int entries) {
  return static_cast<float>(static_cast<int8_t>(entries & 0xff));
}

template <uint32_t Type>
__device__ float dequantize(const uint8_t* row, int e) {
  if constexpr (Type == kTypeF32) {
    return reinterpret_cast<const float*>(row)[e];
  } else if constexpr (Type == kTypeF16) {
    return half_bits_to_float(reinterpret_cast<const uint16_t*>(row)[e]);
  } else if constexpr (Type == kTypeBF16) {
    return bf16_bits_to_float(reinterpret_cast<const uint16_t*>(row)[e]);
  } else if constexpr (Type == kTypeQ4_0) {
    const uint8_t* b = row + (e / 32) * sizeof(BlockQ4_0);
    return __fmul_rn(static_cast<float>(nibble(b + offsetof(BlockQ4_0, qs), e % 32) - 8), half_at(b));
  } else if constexpr (Type == kTypeQ4_1) {
    const uint8_t* b = row + (e / 32) * sizeof(BlockQ4_1);
    const float q = static_cast<float>(nibble(b + offsetof(BlockQ4_1, qs), e % 32));
    return __fadd_rn(__fmul_rn(q, half_at(b + offsetof(BlockQ4_1, d))), half_at(b + offsetof(BlockQ4_1, m)));
  } else if constexpr (Type == kTypeQ5_0) {
    const uint8_t* b = row + (e / 32) * sizeof(BlockQ5_0);
    const int q = five_bits(b + offsetof(BlockQ5_0, qs), b + offsetof(BlockQ5_0, qh), e % 32);
    return __fmul_rn(static_cast<float>(q - 16), half_at(b + offsetof(BlockQ5_0, d)));
  } else if constexpr (Type == kTypeQ5_1) {
    const uint8_t* b = row + (e / 32) * sizeof(BlockQ5_1);
    const float q = static_cast<float>(five_bits(b + offsetof(BlockQ5_1, qs), b + offsetof(BlockQ5_1, qh), e % 32));
    return __fadd_rn(__fmul_rn(q, half_at(b + offsetof(BlockQ5_1, d))), half_at(b + offsetof(BlockQ5_1, m)));
  } else if constexpr (Type == kTypeQ8_0) {
    const uint8_t* b = row + (e / 32) * sizeof(BlockQ8_0);
    return __fmul_rn(half_at(b + offsetof(BlockQ8_0, d)),
                     static_cast<float>(static_cast<int8_t>(b[offsetof(BlockQ8_0, qs) + e % 32])));
  } else if constexpr (Type == kTypeIQ4_NL) {
    const uint8_t* b = row + (e / 32) * sizeof(BlockIQ4_NL);
    const float value = first_entry(iq4nl_values(static_cast<uint32_t>(nibble(b + offsetof(BlockIQ4_NL, qs), e % 32))));
    return __fmul_rn(half_at(b + offsetof(BlockIQ4_NL, d)), value);
  } else if constexpr (Type == kTypeMXFP4) {
    const uint8_t* b = row + (e / 32) * sizeof(BlockMXFP4);
    const float value = first_entry(mxfp4_values(static_cast<uint32_t>(nibble(b + offsetof(BlockMXFP4, qs), e % 32))));
    return __fmul_rn(value, e8m0_to_float_half(b[offsetof(BlockMXFP4, e)]));
  } else if constexpr (Type == kTypeQ2_K || Type == kTypeQ3_K) {
    // Element o: half h = o / 128, pair p = (o % 128) / 32, offset l = o % 32 (see matvec.cu).
    using Block = std::conditional_t<Type == kTypeQ2_K, BlockQ2_K, BlockQ3_K>;
    const uint8_t* b = row + (e / 256) * sizeof(Block);
    const int o = e % 256, h = o / 128, p = (o % 128) / 32, l = o % 32;
    const int low = (b[offsetof(Block, qs) + 32 * h + l] >> (2 * p)) & 3;
    const float d = half_at(b + offsetof(Block, d));
    if constexpr (Type == kTypeQ2_K) {
      const uint8_t scale = b[offsetof(BlockQ2_K, scales) + o / 16];
      const float dl = __fmul_rn(d, static_cast<float>(scale & 0x0f));
      const float ml = __fmul_rn(half_at(b + offsetof(BlockQ2_K, dmin)), static_cast<float>(scale >> 4));
      return __fsub_rn(__fmul_rn(dl, static_cast<float>(low)), ml);
    } else {
      const int high = (b[offsetof(BlockQ3_K, hmask) + l] >> (4 * h + p)) & 1;
      const float dl = __fmul_rn(d, static_cast<float>(q3k_scale(b + offsetof(BlockQ3_K, scales), o / 16)));
      return __fmul_rn(dl, static_cast<float>((low | (high << 2)) - 4));
    }
  } else if constexpr (Type == kTypeQ4_K || Type == kTypeQ5_K) {
    using Block = std::conditional_t<Type == kTypeQ4_K, BlockQ4_K, BlockQ5_K>;
    const uint8_t* b = row + (e / 256) * sizeof(Block);
    const int o = e % 256, j = o / 32;
    const uint8_t* s = b + offsetof(Block, scales);
    int q = (b[offsetof(Block, qs) + 32 * (j / 2) + o % 32] >> (4 * (j % 2))) & 0x0f;
    if constexpr (Type == kTypeQ5_K) q |= ((b[offsetof(BlockQ5_K, qh) + o % 32] >> j) & 1) << 4;
    const float dl = __fmul_rn(half_at(b + offsetof(Block, d)), static_cast<float>(k4_scale(s, j)));
    const float ml = __fmul_rn(half_at(b + offsetof(Block, dmin)), static_cast<float>(k4_min(s, j)));
    return __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);
  } else if constexpr (Type == kTypeQ6_K) {
    const uint8_t* b = row + (e / 256) * sizeof(BlockQ6_K);
    const int o = e % 256, h = o / 128, t = (o % 128) / 32, l = o % 32;
    const int low = (b[offsetof(BlockQ6_K, ql) + 64 * h + 32 * (t & 1) + l] >> (4 * (t >> 1))) & 0x0f;
    const int high = (b[offsetof(BlockQ6_K, qh) + 32 * h + l] >> (2 * t)) & 3;
    const auto scale = static_cast<int8_t>(b[offsetof(BlockQ6_K, scales) + 8 * h + 2 * t + l / 16]);
    const float d = half_at(b + offsetof(BlockQ6_K, d));
    return __fmul_rn(__fmul_rn(d, static_cast<float>(scale)), static_cast<float>((low | (high << 4)) - 32));
  } else if constexpr (is_low_bit_type(Type)) {
    // (d * scale) * factor, then times q (or q + 0.125 * delta_sign), as quant/iq_codes.h says.
    const uint8_t* b = row + (e / 256) * iq_block_bytes<Type>();
    const IqGroup g = iq_group<Type>(b, (e % 256) / 8);
    const int j = e % 8;
    const float q = static_cast<float>(static_cast<int8_t>(((j < 4 ? g.lo : g.hi) >> (8 * (j % 4))) & 0xff));
    const float dl = __fmul_rn(__fmul_rn(iq_block_d<Type>(b), static_cast<float>(g.scale)), iq_factor<Type>());
    return g.delta_sign ? __fmul_rn(dl, __fadd_rn(q, 0.125f * static_cast<float>(g.delta_sign))) : __fmul_rn(dl, q);
  } else {
    static_assert(Type == kTypeIQ4_XS);
    const uint8_t* b = row + (e / 256) * sizeof(BlockIQ4_XS);
    const int o = e % 256, j = o / 32;
    const float dl = __fmul_rn(half_at(b + offsetof(BlockIQ4_XS, d)), static_cast<float>(iq4xs_scale(b, j)));
    const float value =
        first_entry(iq4nl_values(static_cast<uint32_t>(nibble(b + offsetof(BlockIQ4_XS, qs) + 16 * j, o % 32))));
    return __fmul_rn(dl, value);
  }
}

template <uint32_t Type>
__global__ void embed_kernel(const uint8_t* table, size_t row_bytes, int cols, const int32_t* tokens, float* out) {
  const uint8_t* row = table + static_cast<size_t>(tokens[blockIdx.x]) * row_bytes;
  float* y = out + static_cast<int64_t>(blockIdx.x) * cols;
  for (int e = threadIdx.x; e < cols; e += blockDim.x) y[e] = dequantize<Type>(row, e);
}

}  // namespace

bool embedding_supports(uint32_t type) {
  return with_type(FloatTypes{}, type, [](auto) {}) || with_type(QuantizedTypes{}, type, [](auto) {});
}

void embed(const DeviceMatrix& table, const int32_t* tokens, int64_t n, float* out, StreamHandle stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const auto grid = static_cast<unsigned>(n);
  constexpr int kThreads = 256;
  const auto cols = static_cast<int>(table.cols);
  const auto launch = [&](auto t) {
    embed_kernel<decltype(t)::value><<<grid, kThreads, 0, s>>>(table.data, table.row_bytes, cols, tokens, out);
  };
  if (!with_type(FloatTypes{}, table.type, launch) && !with_type(QuantizedTypes{}, table.type, launch)) {
    throw Error("UNSUPPORTED_QUANT", "no GPU embedding kernel for ggml type " + std::to_string(table.type));
  }
}

}  // namespace bloomery::cuda
