// Embedding rows dequantized with the CPU path's arithmetic (quant/dequantize.cc), product by
// product (no fused multiply-add), so the first residual rows are the same floats.
#include <cstddef>

#include "base/error.h"
#include "cuda/common.cuh"

namespace bloomery::cuda {

namespace {

using quant::BlockQ4_K;
using quant::BlockQ6_K;
using quant::BlockQ8_0;

template <uint32_t Type>
__device__ float dequantize(const uint8_t* row, int e) {
  if constexpr (Type == kTypeF32) {
    return reinterpret_cast<const float*>(row)[e];
  } else if constexpr (Type == kTypeF16) {
    return half_bits_to_float(reinterpret_cast<const uint16_t*>(row)[e]);
  } else if constexpr (Type == kTypeQ8_0) {
    const uint8_t* b = row + (e / 32) * sizeof(BlockQ8_0);
    const float d = half_bits_to_float(*reinterpret_cast<const uint16_t*>(b + offsetof(BlockQ8_0, d)));
    return d * static_cast<float>(static_cast<int8_t>(b[offsetof(BlockQ8_0, qs) + e % 32]));
  } else if constexpr (Type == kTypeQ4_K) {
    const uint8_t* b = row + (e / 256) * sizeof(BlockQ4_K);
    const int o = e % 256, j = o / 32;
    const uint8_t* s = b + offsetof(BlockQ4_K, scales);
    const int scale = j < 4 ? s[j] & 63 : (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    const int min = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    const int q = (b[offsetof(BlockQ4_K, qs) + 32 * (j / 2) + o % 32] >> (4 * (j % 2))) & 0x0f;
    const float d = half_bits_to_float(*reinterpret_cast<const uint16_t*>(b + offsetof(BlockQ4_K, d)));
    const float dmin = half_bits_to_float(*reinterpret_cast<const uint16_t*>(b + offsetof(BlockQ4_K, dmin)));
    return __fsub_rn(__fmul_rn(__fmul_rn(d, static_cast<float>(scale)), static_cast<float>(q)),
                     __fmul_rn(dmin, static_cast<float>(min)));
  } else {
    static_assert(Type == kTypeQ6_K);
    const uint8_t* b = row + (e / 256) * sizeof(BlockQ6_K);
    const int o = e % 256, h = o / 128, t = (o % 128) / 32, l = o % 32;
    const int low = (b[offsetof(BlockQ6_K, ql) + 64 * h + 32 * (t & 1) + l] >> (4 * (t >> 1))) & 0x0f;
    const int high = (b[offsetof(BlockQ6_K, qh) + 32 * h + l] >> (2 * t)) & 3;
    const auto scale = static_cast<int8_t>(b[offsetof(BlockQ6_K, scales) + 8 * h + 2 * t + l / 16]);
    const float d = half_bits_to_float(*reinterpret_cast<const uint16_t*>(b + offsetof(BlockQ6_K, d)));
    return __fmul_rn(__fmul_rn(d, static_cast<float>(scale)), static_cast<float>((low | (high << 4)) - 32));
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
  return type == kTypeF32 || type == kTypeF16 || type == kTypeQ8_0 || type == kTypeQ4_K || type == kTypeQ6_K;
}

void embed(const DeviceMatrix& table, const int32_t* tokens, int64_t n, float* out, StreamHandle stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const auto grid = static_cast<unsigned>(n);
  constexpr int kThreads = 256;
  const auto cols = static_cast<int>(table.cols);
  switch (table.type) {
    case kTypeF32:
      embed_kernel<kTypeF32><<<grid, kThreads, 0, s>>>(table.data, table.row_bytes, cols, tokens, out);
      break;
    case kTypeF16:
      embed_kernel<kTypeF16><<<grid, kThreads, 0, s>>>(table.data, table.row_bytes, cols, tokens, out);
      break;
    case kTypeQ8_0:
      embed_kernel<kTypeQ8_0><<<grid, kThreads, 0, s>>>(table.data, table.row_bytes, cols, tokens, out);
      break;
    case kTypeQ4_K:
      embed_kernel<kTypeQ4_K><<<grid, kThreads, 0, s>>>(table.data, table.row_bytes, cols, tokens, out);
      break;
    case kTypeQ6_K:
      embed_kernel<kTypeQ6_K><<<grid, kThreads, 0, s>>>(table.data, table.row_bytes, cols, tokens, out);
      break;
    default:
      throw Error("UNSUPPORTED_QUANT", "no GPU embedding kernel for ggml type " + std::to_string(table.type));
  }
}

}  // namespace bloomery::cuda
