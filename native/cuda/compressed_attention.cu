// DeepSeek-V4's attention on the GPU (model::AttentionKind::kCompressed), as cpu/compressed_attention.cc
// computes it: every query head reads one key head whose keys are its values, over a token's cells,
// the raw rows of its window's positions and then the compressed rows it sees (each standing for a
// block of `ratio` positions, seen from the position that completes it; all of them, or those a
// lightning indexer selected), with the head's learned sink in the softmax. A block takes kGroup
// heads of one token and walks its cells in chunks twice: first each head's maximum score and exp
// sum (scores from f16-rounded queries against the f16 rows, as the CPU rounds them), then the
// weights, normalized and rounded to f16, times the rows. Cells are added in order, so a token's
// floats do not depend on its batch; the CPU's sums run in another order (its SIMD lanes, one max
// before the exps), so the outputs agree to rounding.
#include <cmath>

#include "base/error.h"
#include "cuda/common.cuh"

namespace bloomery::cuda {

namespace {

constexpr int kGroup = 4;  // heads a block serves
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;
constexpr int kChunk = 256;  // cells scored at once
constexpr int kMaxHeadDim = 512;
constexpr int kDimsPerThread = kMaxHeadDim / kThreads;

// A token's cells: raw rows of positions [raw_first, position], then compressed rows.
struct Cells {
  int position, raw_first, raw, compressed;  // raw and compressed: counts of cells (compressed may be masked)
  int seen;                                  // compressed rows the token sees
  const int32_t* chosen;                     // the indexer's list, or null
  __device__ int count() const { return raw + compressed; }
};

__device__ Cells cells_of(const CompressedAttention& a, int token) {
  Cells c;
  c.position = a.positions[token];
  c.raw_first = a.window > 0 ? max(0, c.position - static_cast<int>(a.window) + 1) : 0;
  c.raw = c.position + 1 - c.raw_first;
  c.seen = a.ratio > 0 ? (c.position + 1) / static_cast<int>(a.ratio) : 0;
  c.chosen = a.selected ? a.selected + static_cast<int64_t>(token) * a.top_k : nullptr;
  c.compressed = a.ratio == 0 ? 0 : (c.chosen ? static_cast<int>(a.top_k) : c.seen);
  return c;
}

// Cell `cell`'s row, or null where it is masked (a selection entry past what the token sees).
__device__ const uint16_t* cell_row(const CompressedAttention& a, const Cells& c, int cell) {
  if (cell < c.raw) return a.raw + static_cast<int64_t>(c.raw_first + cell) * a.raw_row;
  const int k = cell - c.raw;
  const int block = c.chosen ? c.chosen[k] : k;
  if (block < 0 || block >= c.seen) return nullptr;
  return a.compressed + static_cast<int64_t>(block) * a.compressed_stride;
}

// The scaled scores of the group's heads against cells [first, first + kChunk) into scores[h][cell]
// (-inf where masked or past the last): a warp per cell.
__device__ void chunk_scores(const CompressedAttention& a, const Cells& c, const float* queries, int heads, int first,
                             float (*scores)[kChunk]) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, d = static_cast<int>(a.head_dim);
  for (int local = warp; local < kChunk; local += kWarps) {
    const int cell = first + local;
    const uint16_t* row = cell < c.count() ? cell_row(a, c, cell) : nullptr;
    float dots[kGroup] = {};
    if (row) {
      for (int j = 2 * lane; j < d; j += 2 * kWarp) {
        const float2 k = __half22float2(*reinterpret_cast<const __half2*>(row + j));
#pragma unroll
        for (int h = 0; h < kGroup; ++h) {
          dots[h] = __fmaf_rn(queries[h * kMaxHeadDim + j], k.x, dots[h]);
          dots[h] = __fmaf_rn(queries[h * kMaxHeadDim + j + 1], k.y, dots[h]);
        }
      }
    }
#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
      float v = dots[h];
#pragma unroll
      for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
      if (lane == 0) scores[h][local] = row && h < heads ? __fmul_rn(v, a.scale) : -INFINITY;
    }
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads) compressed_attention_kernel(CompressedAttention a) {
  wait_for_previous_kernel();
  __shared__ float queries[kGroup * kMaxHeadDim];
  __shared__ float scores[kGroup][kChunk];
  __shared__ float maxima[kGroup];
  __shared__ double sums[kGroup];
  const int token = static_cast<int>(blockIdx.x), first_head = static_cast<int>(blockIdx.y) * kGroup;
  const int heads = min(kGroup, static_cast<int>(a.heads) - first_head), d = static_cast<int>(a.head_dim);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const Cells c = cells_of(a, token);
  // The group's queries, rounded to f16 as the CPU rounds them for the dot.
  for (int i = threadIdx.x; i < kGroup * kMaxHeadDim; i += kThreads) {
    const int h = i / kMaxHeadDim, j = i % kMaxHeadDim;
    queries[i] = h < heads && j < d
                     ? __half2float(__float2half(a.q[(static_cast<int64_t>(token) * a.heads + first_head + h) * d + j]))
                     : 0.0f;
  }
  if (threadIdx.x < kGroup) {
    maxima[threadIdx.x] = -INFINITY;
    sums[threadIdx.x] = 0.0;
  }
  __syncthreads();
  // Each head's maximum and exp sum over the cells, chunk by chunk (warp h keeps head h's).
  for (int first = 0; first < c.count(); first += kChunk) {
    chunk_scores(a, c, queries, heads, first, scores);
    if (warp < kGroup) {
      float chunk_max = -INFINITY;
      for (int i = lane; i < kChunk; i += kWarp) chunk_max = fmaxf(chunk_max, scores[warp][i]);
#pragma unroll
      for (int offset = kWarp / 2; offset > 0; offset /= 2) {
        chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, offset));
      }
      const float old_max = maxima[warp], new_max = fmaxf(old_max, chunk_max);
      double part = 0.0;
      if (new_max != -INFINITY) {
        for (int i = lane; i < kChunk; i += kWarp) {
          part = __dadd_rn(part, static_cast<double>(exp_as_libm(__fsub_rn(scores[warp][i], new_max))));
        }
      }
#pragma unroll
      for (int offset = kWarp / 2; offset > 0; offset /= 2) part += __shfl_xor_sync(0xffffffffu, part, offset);
      if (lane == 0) {
        const double rescale = old_max == -INFINITY ? 0.0 : exp(static_cast<double>(old_max) - new_max);
        sums[warp] = __dadd_rn(sums[warp] * rescale, part);
        maxima[warp] = new_max;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x < kGroup && a.sinks && static_cast<int>(threadIdx.x) < heads) {
    const float sink = a.sinks[first_head + threadIdx.x], old_max = maxima[threadIdx.x];
    const float new_max = fmaxf(old_max, sink);
    const double rescale = old_max == -INFINITY ? 0.0 : exp(static_cast<double>(old_max) - new_max);
    sums[threadIdx.x] = sums[threadIdx.x] * rescale + static_cast<double>(exp_as_libm(__fsub_rn(sink, new_max)));
    maxima[threadIdx.x] = new_max;
  }
  __syncthreads();
  // The weights, normalized and rounded to f16, times the rows: thread t takes dims t, t + 256.
  float out[kGroup][kDimsPerThread] = {};
  for (int first = 0; first < c.count(); first += kChunk) {
    chunk_scores(a, c, queries, heads, first, scores);
    for (int i = threadIdx.x; i < kGroup * kChunk; i += kThreads) {
      const int h = i / kChunk, cell = i % kChunk;
      const float inverse = static_cast<float>(1.0 / sums[h]);
      const float s = scores[h][cell];
      scores[h][cell] =
          s == -INFINITY ? 0.0f : __half2float(__float2half(__fmul_rn(exp_as_libm(__fsub_rn(s, maxima[h])), inverse)));
    }
    __syncthreads();
    const int last = min(kChunk, c.count() - first);
    for (int local = 0; local < last; ++local) {
      const uint16_t* row = cell_row(a, c, first + local);
      if (!row) continue;
#pragma unroll
      for (int k = 0; k < kDimsPerThread; ++k) {
        const int j = static_cast<int>(threadIdx.x) + k * kThreads;
        if (j >= d) break;
        const float v = __half2float(__ushort_as_half(row[j]));
#pragma unroll
        for (int h = 0; h < kGroup; ++h) out[h][k] = __fmaf_rn(scores[h][local], v, out[h][k]);
      }
    }
    __syncthreads();
  }
  for (int h = 0; h < heads; ++h) {
#pragma unroll
    for (int k = 0; k < kDimsPerThread; ++k) {
      const int j = static_cast<int>(threadIdx.x) + k * kThreads;
      if (j < d) a.out[(static_cast<int64_t>(token) * a.heads + first_head + h) * d + j] = out[h][k];
    }
  }
}

}  // namespace

bool compressed_attention_supports(int64_t head_dim) {
  return head_dim >= 64 && head_dim <= kMaxHeadDim && head_dim % 64 == 0;
}

void compressed_attention(const CompressedAttention& a, StreamHandle stream) {
  if (!compressed_attention_supports(a.head_dim) || a.raw_row % 2 != 0 || a.compressed_stride % 2 != 0 ||
      (a.selected && a.top_k < 1)) {
    throw Error("UNSUPPORTED_MODEL",
                "the GPU's compressed attention serves heads of 64 to " + std::to_string(kMaxHeadDim) +
                    " (a multiple of 64) over rows of even widths, not " + std::to_string(a.head_dim));
  }
  if (a.n == 0) return;
  const dim3 grid(static_cast<unsigned>(a.n), static_cast<unsigned>(ceil_div(a.heads, kGroup)));
  launch_early(compressed_attention_kernel, grid, dim3(kThreads), 0, static_cast<cudaStream_t>(stream), a);
}

}  // namespace bloomery::cuda
