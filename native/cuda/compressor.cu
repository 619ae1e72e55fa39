// DeepSeek-V4's compressors on the GPU, as engine/compressed_attention.cc runs them on the CPU: each
// position's values and scores (the scores biased by the position's place in its block) go to a
// ring of the last block's positions (the last two blocks' where blocks overlap), and each block a
// pass completes becomes one compressed row: per element, a softmax over the block's positions
// (for overlapping blocks also the block before: its positions weigh the first half of their
// values, the block's own the second) of the scores weighting the values; then RMS-normed,
// rotated over its last rope dims at the block's first position, for the indexer's keys
// multiplied by the Hadamard matrix, and stored as f16. A launch takes one sequence's rows; which
// blocks complete is read from the rows' positions on the device, so a decode step's launch is
// the same at every position (a CUDA graph replays it).
#include <cmath>

#include "base/error.h"
#include "cuda/common.cuh"
#include "cuda/rope.cuh"

namespace bloomery::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxDim = 1024;
constexpr int kMaxEntries = 256;  // positions a compressed row weighs: 2 * ratio with overlap, else ratio

struct Geometry {
  int ratio, dim, width, slots, entries;
  bool overlap;
};

__host__ __device__ Geometry geometry_of(const CompressorShape& s) {
  Geometry g;
  g.ratio = static_cast<int>(s.ratio);
  g.dim = static_cast<int>(s.dim);
  g.overlap = s.overlap;
  g.width = (g.overlap ? 2 : 1) * g.dim;
  g.slots = (g.overlap ? 2 : 1) * g.ratio;
  g.entries = g.slots;
  return g;
}

__device__ float table_entry(const DeviceMatrix& table, int64_t row, int64_t column) {
  const uint8_t* at = table.data + row * table.row_bytes;
  if (table.type == kTypeF16) return __half2float(reinterpret_cast<const __half*>(at)[column]);
  return reinterpret_cast<const float*>(at)[column];
}

// scores[i] += the bias table's row for row i's place in its block.
__global__ void position_bias_kernel(float* scores, int64_t n, const int32_t* positions, DeviceMatrix table, int ratio,
                                     int64_t width) {
  wait_for_previous_kernel();
  const int64_t at = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (at >= n * width) return;
  const int64_t i = at / width;
  scores[at] = __fadd_rn(scores[at], table_entry(table, positions[i] % ratio, at % width));
}

// Block k: the k-th block this launch's rows complete (none past the last), into its compressed row.
__global__ void __launch_bounds__(kThreads)
    compress_kernel(const float* values, const float* scores, int64_t n, const int32_t* positions, CompressorShape s,
                    const float* norm, const float* ring, uint16_t* compressed) {
  wait_for_previous_kernel();
  __shared__ float row[kMaxDim];
  __shared__ double partial[kThreads / kWarp];
  const Geometry g = geometry_of(s);
  const int first = positions[0], end = positions[0] + static_cast<int>(n);
  // Blocks completed by positions [first, end): those b with first <= (b + 1) ratio - 1 < end.
  const int block = first / g.ratio + static_cast<int>(blockIdx.x);
  if ((block + 1) * g.ratio - 1 >= end) return;
  // The value and biased score of element `at` of `position`'s row: from this launch's rows, or
  // from the ring where the position came in an earlier pass.
  const auto entry = [&](int position, int at, float* score) {
    if (position >= first) {
      const int64_t r = static_cast<int64_t>(position - first) * g.width + at;
      *score = scores[r];
      return values[r];
    }
    const float* slot = ring + static_cast<int64_t>(position % g.slots) * 2 * g.width;
    *score = slot[g.width + at];
    return slot[at];
  };
  for (int j = threadIdx.x; j < g.dim; j += kThreads) {
    float max = -INFINITY;
    float weights[kMaxEntries];
    float vals[kMaxEntries];
    for (int e = 0; e < g.entries; ++e) {
      const bool earlier = g.overlap && e < g.ratio;
      const int position = earlier ? (block - 1) * g.ratio + e : block * g.ratio + (e - (g.overlap ? g.ratio : 0));
      if (position < 0) {  // the first block has no block before it: a zero value and -inf score
        vals[e] = 0.0f;
        weights[e] = -INFINITY;
        continue;
      }
      vals[e] = entry(position, j + (g.overlap && !earlier ? g.dim : 0), &weights[e]);
      max = fmaxf(max, weights[e]);
    }
    double sum = 0.0;
    for (int e = 0; e < g.entries; ++e) {
      weights[e] = exp_as_libm(__fsub_rn(weights[e], max));
      sum = __dadd_rn(sum, static_cast<double>(weights[e]));
    }
    const auto inverse = static_cast<float>(1.0 / sum);
    double weighted = 0.0;
    for (int e = 0; e < g.entries; ++e) {
      weighted = __dadd_rn(weighted, static_cast<double>(__fmul_rn(vals[e], __fmul_rn(weights[e], inverse))));
    }
    row[j] = static_cast<float>(weighted);
  }
  __syncthreads();
  // The RMS norm: float squares summed in double, as cpu::rms_norm.
  double squares = 0.0;
  for (int j = threadIdx.x; j < g.dim; j += kThreads) {
    squares = __dadd_rn(squares, static_cast<double>(__fmul_rn(row[j], row[j])));
  }
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) squares += __shfl_xor_sync(0xffffffffu, squares, offset);
  if (threadIdx.x % kWarp == 0) partial[threadIdx.x / kWarp] = squares;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < kThreads / kWarp; ++w) total = __dadd_rn(total, partial[w]);
  const auto mean = static_cast<float>(total / static_cast<double>(g.dim));
  const float scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, s.eps)));
  __syncthreads();
  for (int j = threadIdx.x; j < g.dim; j += kThreads) row[j] = __fmul_rn(__fmul_rn(row[j], scale), norm[j]);
  __syncthreads();
  if (threadIdx.x < kWarp) {
    float* tail = row + g.dim - s.rope.dims;
    rotate_pairs(s.rope, block * g.ratio, tail, [&](int k, float v) { tail[k] = v; });
    __syncwarp();
    if (s.hadamard) {
      for (int h = 1; h < g.dim; h *= 2) {
        for (int b = threadIdx.x; b < g.dim / 2; b += kWarp) {
          const int i = b / h * 2 * h + b % h, k = i + h;
          const float u = row[i], v = row[k];
          row[i] = __fadd_rn(u, v);
          row[k] = __fsub_rn(u, v);
        }
        __syncwarp();
      }
      const float unit = __fdiv_rn(1.0f, __fsqrt_rn(static_cast<float>(g.dim)));
      for (int j = threadIdx.x; j < g.dim; j += kWarp) row[j] = __fmul_rn(row[j], unit);
    }
  }
  __syncthreads();
  uint16_t* out = compressed + static_cast<int64_t>(block) * s.row_stride + s.offset;
  for (int j = threadIdx.x; j < g.dim; j += kThreads) out[j] = __half_as_ushort(__float2half(row[j]));
}

// The launch's last `slots` rows into the ring (after compress_kernel has read it).
__global__ void ring_kernel(const float* values, const float* scores, int64_t n, const int32_t* positions,
                            CompressorShape s, float* ring) {
  wait_for_previous_kernel();
  const Geometry g = geometry_of(s);
  const int64_t at = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (at >= n * g.width) return;
  const int64_t i = at / g.width, column = at % g.width;
  if (i < n - g.slots) return;
  float* slot = ring + static_cast<int64_t>(positions[i] % g.slots) * 2 * g.width;
  slot[column] = values[at];
  slot[g.width + column] = scores[at];
}

}  // namespace

bool compressor_supports(const CompressorShape& s) {
  const Geometry g = geometry_of(s);
  const bool power_of_two = (s.dim & (s.dim - 1)) == 0;
  return s.ratio >= 1 && g.entries <= kMaxEntries && s.dim >= 1 && s.dim <= kMaxDim && s.rope.dims <= s.dim &&
         s.rope.dims % 2 == 0 && (!s.hadamard || power_of_two) && s.offset + s.dim <= s.row_stride;
}

void add_position_bias(float* scores, int64_t n, const int32_t* positions, const DeviceMatrix& table, int64_t ratio,
                       int64_t width, StreamHandle stream) {
  if (table.type != kTypeF16 && table.type != kTypeF32) {
    throw Error("UNSUPPORTED_QUANT", "a compressor's position bias must be F16 or F32 on the GPU");
  }
  if (n == 0) return;
  launch_early(position_bias_kernel, dim3(ceil_div(n * width, kThreads)), dim3(kThreads), 0,
               static_cast<cudaStream_t>(stream), scores, n, positions, table, static_cast<int>(ratio), width);
}

void compress_rows(const float* values, const float* scores, int64_t n, const int32_t* positions,
                   const CompressorShape& shape, const float* norm, float* ring, uint16_t* compressed,
                   StreamHandle stream) {
  if (!compressor_supports(shape)) {
    throw Error("UNSUPPORTED_MODEL", "the GPU's compressor serves rows of at most " + std::to_string(kMaxDim) +
                                         " floats weighing at most " + std::to_string(kMaxEntries) +
                                         " positions, not a ratio of " + std::to_string(shape.ratio) + " and rows of " +
                                         std::to_string(shape.dim));
  }
  if (n == 0) return;
  const Geometry g = geometry_of(shape);
  const auto raw = static_cast<cudaStream_t>(stream);
  // At most n / ratio + 1 blocks complete in n rows, wherever they start.
  launch_early(compress_kernel, dim3(static_cast<unsigned>(n / g.ratio + 1)), dim3(kThreads), 0, raw, values, scores, n,
               positions, shape, norm, static_cast<const float*>(ring), compressed);
  launch_early(ring_kernel, dim3(ceil_div(n * g.width, kThreads)), dim3(kThreads), 0, raw, values, scores, n, positions,
               shape, ring);
}

}  // namespace bloomery::cuda
