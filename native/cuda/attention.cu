// Causal attention over the f16 KV cache in device memory (which position_heads, rope.cu,
// writes): the choice of kernel, and the exact kernel. The tensor-core kernels
// (attention_tiled.cu) serve head_dim 64 and 128; other head dims run the exact kernel, which
// is also the reference the tiled kernels are tested against (native/tests/cuda_attention_test.cc).
//
// The exact kernel: one block per (query row, head); grouped-query heads share a KV head, whose
// rows the block's neighbours read from L2. The roundings are the CPU path's (cpu/attention.cc, as
// llama.cpp's graph without flash attention): the query rounded to f16, each score a float dot
// times the scale, the softmax's exps and sums as the CPU's AVX-512 softmax takes them, the
// probabilities rounded to f16, each output element a float sum over positions. The dots and the
// output sums run in sequence, where the CPU's run in ggml's SIMD order (quant/f16_rows.h): the
// two part in the last bits (the H200 measured at most 6e-6 relative over 2,102 positions). A
// window starts each row at its first visible position (the CPU's masked entries before it add
// exact zeros); a sink joins the maximum and adds its exp (libm's) to the sum after the row's, as
// ggml_soft_max_ext's sinks.
#include "base/error.h"
#include "cuda/common.cuh"

namespace bloomery::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kMaxHeadDim = 256;
constexpr int kPerThread = kMaxHeadDim / kThreads;  // output elements each thread sums
constexpr int kTile = 2048;                         // scores held in shared memory at once

__device__ float block_max(float v, float* scratch) {
  v = warp_max(v);
  if (threadIdx.x % kWarp == 0) scratch[threadIdx.x / kWarp] = v;
  __syncthreads();
  float result = -INFINITY;
  for (int w = 0; w < kThreads / kWarp; ++w) result = fmaxf(result, scratch[w]);
  __syncthreads();
  return result;
}

__device__ double block_sum(double v, double* scratch) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (threadIdx.x % kWarp == 0) scratch[threadIdx.x / kWarp] = v;
  __syncthreads();
  double result = 0.0;
  for (int w = 0; w < kThreads / kWarp; ++w) result += scratch[w];
  __syncthreads();
  return result;
}

// q . k over the head, element by element in order, times the scale.
__device__ float score(const float* query, const uint16_t* k, int head_dim, float scale) {
  float dot = 0.0f;
  for (int i = 0; i < head_dim; i += 8) {
    const uint4 raw = *reinterpret_cast<const uint4*>(k + i);
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      dot = __fadd_rn(dot, __fmul_rn(query[i + 2 * w], half_bits_to_float(static_cast<uint16_t>(words[w]))));
      dot = __fadd_rn(dot, __fmul_rn(query[i + 2 * w + 1], half_bits_to_float(static_cast<uint16_t>(words[w] >> 16))));
    }
  }
  return __fmul_rn(dot, scale);
}

// Three sweeps over the keys: the scores' maximum, the sum of their exps, then the
// f16-rounded probabilities times the values. Scores of up to kTile positions stay in
// shared memory between sweeps; longer rows recompute them (the same floats each time).
__global__ void __launch_bounds__(kThreads)
    attention_kernel(const float* q, const int32_t* positions, const uint16_t* keys, const uint16_t* values,
                     AttentionShape shape, float* out) {
  __shared__ float query[kMaxHeadDim];
  __shared__ float tile[kTile];
  __shared__ float max_scratch[kThreads / kWarp];
  __shared__ double sum_scratch[kThreads / kWarp];
  const int token = blockIdx.x;
  const int head = blockIdx.y;
  const int head_dim = static_cast<int>(shape.head_dim), value_dim = static_cast<int>(shape.value_dim);
  const int kv_head = head / static_cast<int>(shape.heads / shape.kv_heads);
  const float* q_head = q + (static_cast<int64_t>(token) * shape.heads + head) * head_dim;
  for (int i = threadIdx.x; i < head_dim; i += kThreads) query[i] = round_to_half(q_head[i]);
  __syncthreads();

  const int length = positions[token] + 1;
  const int first = shape.window > 0 ? max(0, length - static_cast<int>(shape.window)) : 0;
  const bool resident = length - first <= kTile;
  const uint16_t* k_head = keys + kv_head * head_dim;
  const uint16_t* v_head = values + kv_head * value_dim;
  const auto key = [&](int j) { return score(query, k_head + j * shape.key_row, head_dim, shape.scale); };

  float local_max = -INFINITY;
  for (int j = first + threadIdx.x; j < length; j += kThreads) {
    const float s = key(j);
    if (resident) tile[j - first] = s;
    local_max = fmaxf(local_max, s);
  }
  float max = block_max(local_max, max_scratch);
  if (shape.sinks) max = fmaxf(max, shape.sinks[head]);

  // As cpu/softmax_avx512.cc over a row padded with masked cells: blocks of 16 positions (half a
  // warp), each summed in float as _mm512_reduce_add_ps sums it (a butterfly over 8, 4, 2 and 1
  // lanes), the block sums added in double.
  double local_sum = 0.0;
  for (int base = first / kSoftmaxBlock * kSoftmaxBlock; base < length; base += kThreads) {
    const int j = base + static_cast<int>(threadIdx.x);
    float block = j >= first && j < length ? exp_as_host(__fsub_rn(resident ? tile[j - first] : key(j), max)) : 0.0f;
    for (int offset = kSoftmaxBlock / 2; offset > 0; offset /= 2) {
      block = __fadd_rn(block, __shfl_xor_sync(0xffffffffu, block, offset));
    }
    if (threadIdx.x % kSoftmaxBlock == 0) local_sum += static_cast<double>(block);
  }
  double sum = block_sum(local_sum, sum_scratch);
  if (shape.sinks) sum += static_cast<double>(exp_as_libm(__fsub_rn(shape.sinks[head], max)));
  const auto inverse = static_cast<float>(1.0 / sum);

  float acc[kPerThread] = {};
  for (int begin = first; begin < length; begin += kTile) {
    const int count = min(kTile, length - begin);
    for (int j = threadIdx.x; j < count; j += kThreads) {
      const float s = resident ? tile[j] : key(begin + j);
      tile[j] = round_to_half(__fmul_rn(exp_as_host(__fsub_rn(s, max)), inverse));
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kPerThread; ++r) {
      const int d = threadIdx.x + r * kThreads;
      if (d >= value_dim) continue;
      const uint16_t* v = v_head + static_cast<int64_t>(begin) * shape.value_row + d;
      float sum_v = acc[r];
      for (int j = 0; j < count; ++j) {
        sum_v = __fadd_rn(sum_v, __fmul_rn(tile[j], half_bits_to_float(v[j * shape.value_row])));
      }
      acc[r] = sum_v;
    }
    __syncthreads();
  }
  float* o = out + (static_cast<int64_t>(token) * shape.heads + head) * value_dim;
#pragma unroll
  for (int r = 0; r < kPerThread; ++r) {
    const int d = threadIdx.x + r * kThreads;
    if (d < value_dim) o[d] = acc[r];
  }
}

}  // namespace

void exact_causal_attention(const float* q, int64_t n, const int32_t* positions, const uint16_t* keys,
                            const uint16_t* values, const AttentionShape& layer_shape, float* out,
                            StreamHandle stream) {
  const AttentionShape shape = with_cache_rows(layer_shape);
  if (shape.head_dim % kWarp != 0 || shape.head_dim > kMaxHeadDim || shape.value_dim % kWarp != 0 ||
      shape.value_dim > kMaxHeadDim) {
    throw Error("UNSUPPORTED_MODEL", "GPU attention needs head widths that are multiples of 32 up to 256, not " +
                                         std::to_string(shape.head_dim) + " (keys) and " +
                                         std::to_string(shape.value_dim) + " (values)");
  }
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(shape.heads));
  attention_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(q, positions, keys, values, shape, out);
}

bool causal_attention(const float* q, int64_t n, const int32_t* positions, const uint16_t* keys, const uint16_t* values,
                      const AttentionShape& shape, void* scratch, float* out, StreamHandle stream,
                      const QuantizedRows& quantized) {
  if (tiled_attention_serves(shape)) {
    return tiled_causal_attention(q, n, positions, keys, values, shape, scratch, out, quantized, stream);
  }
  exact_causal_attention(q, n, positions, keys, values, shape, out, stream);
  return false;
}

}  // namespace bloomery::cuda
