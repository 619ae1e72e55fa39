// DeepSeek-V4's attention on the GPU (model::AttentionKind::kCompressed), as cpu/compressed_attention.cc
// computes it: every query head reads one key head whose keys are its values, over a token's cells,
// the raw rows of its window's positions and then the compressed rows it sees (each standing for a
// block of `ratio` positions, seen from the position that completes it; all of them, or those a
// lightning indexer selected), with the head's learned sink in the softmax. Passes of 16 tokens
// or more take compressed_attention_tiles.cu's tensor-core blocks; here a block takes Group heads
// of one token (4 where the pass still makes 512 blocks of 4, else 1: a decode step's 64 heads in
// 16 blocks of 4 left most of the card idle, 154 us a layer on an H200) and walks its
// cells in chunks twice: first each head's maximum score and exp sum (scores from f16-rounded
// queries against the f16 rows, as the CPU rounds them), then the weights, normalized and rounded
// to f16, times the rows (a token of one chunk keeps its scores from the first walk). A decode
// step's block is one token's chain of loads, so both walks keep many rows in flight: a warp
// scores kCellsInFlight cells at once, and kCellGroups groups of threads each add every
// kCellGroups-th cell's row (kUnroll rows loaded ahead), their sums added in group order at the
// end. That order is fixed by the cells alone, so a token's floats depend neither on its batch
// nor on Group; the CPU's sums run in another order (its SIMD lanes, one max before the exps), so
// the outputs agree to rounding.
#include <cmath>

#include "base/error.h"
#include "cuda/common.cuh"
#include "cuda/compressed_cells.cuh"

namespace bloomery::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;
constexpr int kChunk = 256;  // cells scored at once
constexpr int kMaxHeadDim = 512;
constexpr int kCellsInFlight = 4;  // cells a warp scores together, their rows' loads in flight at once
// The weighted sum: kCellGroups groups of threads, each taking every kCellGroups-th cell; a
// thread of a group takes kPairsPerThread f16 pairs of a row, pair p at dims 2 * t + 2 * p *
// kGroupThreads, so that each of a group's loads is one contiguous run of the row.
constexpr int kCellGroups = 4;
constexpr int kGroupThreads = kThreads / kCellGroups;
constexpr int kPairsPerThread = kMaxHeadDim / (2 * kGroupThreads);
constexpr int kUnroll = 8;  // rows of a group whose values the weighted sum loads before it adds any
// Below this many blocks of 4 heads a pass takes a head a block.
constexpr int64_t kWideGroupBlocks = 512;

// The scaled scores of the group's heads against cells [first, first + kChunk) into scores[h][cell]
// (-inf where masked or past the last): a warp per kCellsInFlight cells, each cell's dot summed in
// the same order whatever cells share its warp.
template <int Group>
__device__ void chunk_scores(const CompressedAttention& a, const Cells& c, const float* queries, int heads, int first,
                             float (*scores)[kChunk]) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, d = static_cast<int>(a.head_dim);
  const int last = min(kChunk, c.count() - first);
  for (int base = warp * kCellsInFlight; base < kChunk; base += kWarps * kCellsInFlight) {
    const uint16_t* rows[kCellsInFlight];
    float dots[kCellsInFlight][Group] = {};
#pragma unroll
    for (int u = 0; u < kCellsInFlight; ++u) rows[u] = base + u < last ? cell_row(a, c, first + base + u) : nullptr;
    if (base < last) {
      for (int j = 2 * lane; j < d; j += 2 * kWarp) {
        float2 k[kCellsInFlight];
#pragma unroll
        for (int u = 0; u < kCellsInFlight; ++u) {
          k[u] = rows[u] ? __half22float2(*reinterpret_cast<const __half2*>(rows[u] + j)) : make_float2(0.0f, 0.0f);
        }
#pragma unroll
        for (int u = 0; u < kCellsInFlight; ++u) {
#pragma unroll
          for (int h = 0; h < Group; ++h) {
            dots[u][h] = __fmaf_rn(queries[h * kMaxHeadDim + j], k[u].x, dots[u][h]);
            dots[u][h] = __fmaf_rn(queries[h * kMaxHeadDim + j + 1], k[u].y, dots[u][h]);
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kCellsInFlight; ++u) {
#pragma unroll
      for (int h = 0; h < Group; ++h) {
        float v = dots[u][h];
#pragma unroll
        for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
        if (lane == 0) scores[h][base + u] = rows[u] && h < heads ? __fmul_rn(v, a.scale) : -INFINITY;
      }
    }
  }
  __syncthreads();
}

template <int Group>
__global__ void __launch_bounds__(kThreads) compressed_attention_kernel(CompressedAttention a) {
  wait_for_previous_kernel();
  __shared__ float queries[Group * kMaxHeadDim];
  __shared__ float scores[Group][kChunk];
  __shared__ float maxima[Group];
  __shared__ double sums[Group];
  const int token = static_cast<int>(blockIdx.x), first_head = static_cast<int>(blockIdx.y) * Group;
  const int heads = min(Group, static_cast<int>(a.heads) - first_head), d = static_cast<int>(a.head_dim);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const Cells c = cells_of(a, token);
  // The group's queries, rounded to f16 as the CPU rounds them for the dot.
  for (int i = threadIdx.x; i < Group * kMaxHeadDim; i += kThreads) {
    const int h = i / kMaxHeadDim, j = i % kMaxHeadDim;
    queries[i] = h < heads && j < d
                     ? __half2float(__float2half(a.q[(static_cast<int64_t>(token) * a.heads + first_head + h) * d + j]))
                     : 0.0f;
  }
  if (threadIdx.x < Group) {
    maxima[threadIdx.x] = -INFINITY;
    sums[threadIdx.x] = 0.0;
  }
  __syncthreads();
  // Each head's maximum and exp sum over the cells, chunk by chunk (warp h keeps head h's).
  for (int first = 0; first < c.count(); first += kChunk) {
    chunk_scores<Group>(a, c, queries, heads, first, scores);
    if (warp < Group) {
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
  if (threadIdx.x < Group && a.sinks && static_cast<int>(threadIdx.x) < heads) {
    const float sink = a.sinks[first_head + threadIdx.x], old_max = maxima[threadIdx.x];
    const float new_max = fmaxf(old_max, sink);
    const double rescale = old_max == -INFINITY ? 0.0 : exp(static_cast<double>(old_max) - new_max);
    sums[threadIdx.x] = sums[threadIdx.x] * rescale + static_cast<double>(exp_as_libm(__fsub_rn(sink, new_max)));
    maxima[threadIdx.x] = new_max;
  }
  __syncthreads();
  // The weights, normalized and rounded to f16, times the rows: group g adds cells g, g + kCellGroups, ...
  const int cell_group = static_cast<int>(threadIdx.x) / kGroupThreads,
            t = static_cast<int>(threadIdx.x) % kGroupThreads;
  float out[Group][2 * kPairsPerThread] = {};
  for (int first = 0; first < c.count(); first += kChunk) {
    // One chunk's scores are still in `scores` from the first walk.
    if (c.count() > kChunk) chunk_scores<Group>(a, c, queries, heads, first, scores);
    for (int i = threadIdx.x; i < Group * kChunk; i += kThreads) {
      const int h = i / kChunk, cell = i % kChunk;
      const float inverse = static_cast<float>(1.0 / sums[h]);
      const float s = scores[h][cell];
      scores[h][cell] =
          s == -INFINITY ? 0.0f : __half2float(__float2half(__fmul_rn(exp_as_libm(__fsub_rn(s, maxima[h])), inverse)));
    }
    __syncthreads();
    const int last = min(kChunk, c.count() - first);
    for (int local = cell_group; local < last; local += kCellGroups * kUnroll) {
      // kUnroll rows' values in flight at once, then added in the cells' order.
      float2 v[kUnroll][kPairsPerThread];
      bool present[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int cell = local + u * kCellGroups;
        const uint16_t* row = cell < last ? cell_row(a, c, first + cell) : nullptr;
        present[u] = row != nullptr;
#pragma unroll
        for (int k = 0; k < kPairsPerThread; ++k) {
          const int j = 2 * (t + k * kGroupThreads);
          v[u][k] = row && j < d ? __half22float2(*reinterpret_cast<const __half2*>(row + j)) : make_float2(0.0f, 0.0f);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (!present[u]) continue;
#pragma unroll
        for (int h = 0; h < Group; ++h) {
          const float w = scores[h][local + u * kCellGroups];
#pragma unroll
          for (int k = 0; k < kPairsPerThread; ++k) {
            out[h][2 * k] = __fmaf_rn(w, v[u][k].x, out[h][2 * k]);
            out[h][2 * k + 1] = __fmaf_rn(w, v[u][k].y, out[h][2 * k + 1]);
          }
        }
      }
    }
    __syncthreads();
  }
  // The groups' sums, added in group order by the first group, which writes them.
  __shared__ float partial[kCellGroups - 1][Group][kMaxHeadDim];
  if (cell_group > 0) {
#pragma unroll
    for (int h = 0; h < Group; ++h) {
#pragma unroll
      for (int k = 0; k < kPairsPerThread; ++k) {
        const int j = 2 * (t + k * kGroupThreads);
        partial[cell_group - 1][h][j] = out[h][2 * k];
        partial[cell_group - 1][h][j + 1] = out[h][2 * k + 1];
      }
    }
  }
  __syncthreads();
  if (cell_group > 0) return;
  for (int h = 0; h < heads; ++h) {
#pragma unroll
    for (int k = 0; k < kPairsPerThread; ++k) {
      const int j = 2 * (t + k * kGroupThreads);
      if (j >= d) continue;
      float x = out[h][2 * k], y = out[h][2 * k + 1];
#pragma unroll
      for (int g = 0; g < kCellGroups - 1; ++g) {
        x = __fadd_rn(x, partial[g][h][j]);
        y = __fadd_rn(y, partial[g][h][j + 1]);
      }
      float* o = a.out + (static_cast<int64_t>(token) * a.heads + first_head + h) * d + j;
      o[0] = x;
      o[1] = y;
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
  if (compressed_tiles_serve(a)) {
    compressed_attention_tiles(a, stream);
    return;
  }
  const bool wide = a.n * ceil_div(a.heads, 4) >= kWideGroupBlocks;
  const int group = wide ? 4 : 1;
  const dim3 grid(static_cast<unsigned>(a.n), static_cast<unsigned>(ceil_div(a.heads, group)));
  launch_early(wide ? compressed_attention_kernel<4> : compressed_attention_kernel<1>, grid, dim3(kThreads), 0,
               static_cast<cudaStream_t>(stream), a);
}

}  // namespace bloomery::cuda
