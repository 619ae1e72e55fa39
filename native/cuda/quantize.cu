// Activation rows quantized exactly as the CPU path quantizes them (quant/quantize_activations.cc),
// so the integer dots see the same codes and GPU and CPU differ only in float summation order:
// for the K-quants and IQ4_XS, Q8_K's one scale per 256 values (the signed value of largest
// magnitude maps to -127, rounding half to even); for the 32-value formats, Q8_0's half-precision
// scale per 32 values (127 / amax, rounding half to even), and for Q8_1 also the block's sum.
#include <string>

#include "base/error.h"
#include "cuda/common.cuh"
#include "quant/kernels.h"

namespace bloomery::cuda {

namespace {

// One warp per 256 values; each lane quantizes 8 of them.
__global__ void quantize_q8_k_kernel(const float* x, int64_t super_blocks, ActivationBlock* out) {
  const int64_t sb = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (sb >= super_blocks) return;
  const int lane = threadIdx.x % kWarp;
  const float* in = x + sb * 256 + lane * 8;
  float v[8];
  float best = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    v[i] = in[i];
    if (fabsf(v[i]) > fabsf(best)) best = v[i];
  }
  // The signed value of largest magnitude (on a tie of magnitudes, the positive one: both
  // signs give the same codes up to the rare value that would round to +-128).
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, best, offset);
    if (fabsf(other) > fabsf(best) || (fabsf(other) == fabsf(best) && other > best)) best = other;
  }
  ActivationBlock& block = out[sb * 8 + lane / 4];
  if (best == 0.0f) {
#pragma unroll
    for (int i = 0; i < 8; ++i) block.qs[(lane % 4) * 8 + i] = 0;
    if (lane % 4 == 0) block.d = 0.0f;
    return;
  }
  const float inverse = -127.0f / best;
#pragma unroll
  for (int i = 0; i < 8; ++i)
    block.qs[(lane % 4) * 8 + i] = static_cast<int8_t>(min(127, __float2int_rn(inverse * v[i])));
  if (lane % 4 == 0) block.d = 1.0f / inverse;
}

// One warp per block of 32: each lane quantizes one value. Q8_1's sum multiplies the codes'
// sum by the unrounded scale, as quant::quantize_row_q8_1 does.
template <bool WithSum>
__global__ void quantize_q8_0_kernel(const float* x, int64_t blocks, ActivationBlock* out) {
  const int64_t block = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (block >= blocks) return;
  const int lane = threadIdx.x % kWarp;
  const float v = x[block * 32 + lane];
  const float amax = warp_max(fabsf(v));
  const float inverse = amax != 0.0f ? 127.0f / amax : 0.0f;
  const int code = __float2int_rn(v * inverse);
  out[block].qs[lane] = static_cast<int8_t>(code);
  const float d = amax / 127.0f;
  if constexpr (WithSum) {
    int sum = code;
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    const uint32_t d_bits = __half_as_ushort(__float2half_rn(d));
    const uint32_t sum_bits = __half_as_ushort(__float2half_rn(__fmul_rn(static_cast<float>(sum), d)));
    if (lane == 0) out[block].d_and_sum = d_bits | (sum_bits << 16);
  } else {
    if (lane == 0) out[block].d = round_to_half(d);
  }
}

}  // namespace

ActivationFormat activation_format(uint32_t weight_type) {
  const uint32_t format = quant::quant_kernels(weight_type, quant::SimdTier::kScalar).activation_type;
  switch (format) {
    case kTypeQ8_0:
      return ActivationFormat::kQ8_0;
    case kTypeQ8_1:
      return ActivationFormat::kQ8_1;
    case kTypeQ8_K:
      return ActivationFormat::kQ8_K;
    default:
      throw Error("UNSUPPORTED_QUANT", "ggml type " + std::to_string(weight_type) +
                                           " has no integer dot (activations of type " + std::to_string(format) + ")");
  }
}

void quantize_activations(const float* x, int64_t n, int64_t cols, uint32_t weight_type, ActivationBlock* out,
                          StreamHandle stream) {
  constexpr int kThreads = 256;
  const auto s = static_cast<cudaStream_t>(stream);
  const int64_t blocks = n * cols / 32;
  const unsigned grid_32 = ceil_div(blocks, kThreads / kWarp);
  switch (activation_format(weight_type)) {
    case ActivationFormat::kQ8_0:
      quantize_q8_0_kernel<false><<<grid_32, kThreads, 0, s>>>(x, blocks, out);
      break;
    case ActivationFormat::kQ8_1:
      quantize_q8_0_kernel<true><<<grid_32, kThreads, 0, s>>>(x, blocks, out);
      break;
    case ActivationFormat::kQ8_K: {
      const int64_t super_blocks = n * cols / 256;
      quantize_q8_k_kernel<<<ceil_div(super_blocks, kThreads / kWarp), kThreads, 0, s>>>(x, super_blocks, out);
      break;
    }
  }
}

}  // namespace bloomery::cuda
