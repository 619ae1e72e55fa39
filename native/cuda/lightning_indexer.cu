// DeepSeek's lightning indexer on the GPU (DeepSeek sparse attention: DeepSeek-V3.2, GLM-5), as
// the CPU path runs it (engine/lightning_indexer.cc, cpu/lightning_indexer.cc): the indexer's
// query heads and its one key per position rotated over their first rope dims and multiplied by
// the orthonormal Hadamard matrix (here a fast Walsh-Hadamard transform, the same product summed
// in another order), the keys layer-normed first and cached as f16 beside MLA's row; then each
// token's score of every position it sees, the sum over heads of max(q_h . k, 0) times the head's
// weight, and its top_k best-scored positions. The selection is exact on the scores (a radix
// select of the k-th largest, then the positions above it and the ties at it, in position order),
// so a token's list does not depend on the batch; the ties it keeps are the CPU's (std::partial_sort's,
// as llama.cpp's ggml_top_k): the first ones where all of them fit, else the ones its heap keeps
// (base/heap_select.h). The scores' sums run in another order than the CPU's, so near-ties may
// resolve otherwise there.
#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "base/heap_select.h"
#include "cuda/common.cuh"
#include "cuda/rope.cuh"

namespace bloomery::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxHeadDim = 128;
constexpr int kMaxQueryFloats = 8192;  // heads * head_dim a token's query holds in shared memory
constexpr int kMaxHeads = 128;
constexpr int kScoreTile = 32;          // positions per scoring block, one per lane
constexpr int kScoreGroups = 8;         // warps per scoring block, each summing every eighth head
constexpr int64_t kScoreBlocks = 1024;  // a launch's scoring blocks, unless its rows' tiles are fewer
constexpr int kSelectThreads = 1024;
// The scratch holds a row of the cache's capacity for each token one launch scores and selects
// from: as many as a pass brings (a block each, to fill the GPU), unless the rows would pass
// kScratchBudget: then as many as it holds, but never fewer than kMinSelectRows.
constexpr size_t kScratchBudget = size_t{64} << 20;
constexpr int64_t kMinSelectRows = 16;

// Rotates the staged head (head_dim floats in shared memory) over its first rope.dims (`tail`:
// its last) at `position` and multiplies it by the orthonormal Hadamard matrix of head_dim, in
// place; the warp's lanes share the work.
__device__ void rotate_head(float* x, int head_dim, const RopeShape& rope, bool tail, int32_t position) {
  float* rotated = tail ? x + head_dim - rope.dims : x;
  rotate_pairs(rope, position, rotated, [&](int j, float v) { rotated[j] = v; });
  __syncwarp();
  const int lane = threadIdx.x % kWarp;
  for (int h = 1; h < head_dim; h *= 2) {
    for (int b = lane; b < head_dim / 2; b += kWarp) {
      const int i = b / h * 2 * h + b % h, j = i + h;
      const float u = x[i], v = x[j];
      x[i] = __fadd_rn(u, v);
      x[j] = __fsub_rn(u, v);
    }
    __syncwarp();
  }
  const float scale = __fdiv_rn(1.0f, __fsqrt_rn(static_cast<float>(head_dim)));
  for (int j = lane; j < head_dim; j += kWarp) x[j] = __fmul_rn(x[j], scale);
  __syncwarp();
}

// One warp per query head: rows of heads * head_dim floats, in place.
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp)
    indexer_queries_kernel(float* q, int64_t heads_total, int heads, int head_dim, const int32_t* positions,
                           RopeShape rope, bool tail) {
  wait_for_previous_kernel();
  __shared__ float staged[kWarpsPerBlock][kMaxHeadDim];
  const int64_t head = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (head >= heads_total) return;
  const int lane = threadIdx.x % kWarp;
  float* x = staged[threadIdx.x / kWarp];
  float* row = q + head * head_dim;
  for (int j = lane; j < head_dim; j += kWarp) x[j] = row[j];
  __syncwarp();
  rotate_head(x, head_dim, rope, tail, positions[head / heads]);
  for (int j = lane; j < head_dim; j += kWarp) row[j] = x[j];
}

// One warp per key: layer-normed as cpu::layer_norm rounds it (sums in double; each product
// rounded before the bias is added), rotated, and stored as f16 at its cache row's key_offset.
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp)
    store_keys_kernel(const float* k, int64_t n, int head_dim, const float* norm, const float* bias, float eps,
                      const int32_t* positions, RopeShape rope, bool tail, KvSegments cache, int64_t key_row,
                      int64_t key_offset) {
  wait_for_previous_kernel();
  __shared__ float staged[kWarpsPerBlock][kMaxHeadDim];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (row >= n) return;
  const int lane = threadIdx.x % kWarp;
  float* x = staged[threadIdx.x / kWarp];
  const float* in = k + row * head_dim;
  double sum = 0.0;
  for (int j = lane; j < head_dim; j += kWarp) sum = __dadd_rn(sum, static_cast<double>(in[j]));
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  const float mean = __fdiv_rn(static_cast<float>(sum), static_cast<float>(head_dim));
  double squares = 0.0;
  for (int j = lane; j < head_dim; j += kWarp) {
    const float centered = __fsub_rn(in[j], mean);
    squares = __dadd_rn(squares, static_cast<double>(__fmul_rn(centered, centered)));
  }
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) squares += __shfl_xor_sync(0xffffffffu, squares, offset);
  const float scale =
      __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(static_cast<float>(squares / static_cast<double>(head_dim)), eps)));
  for (int j = lane; j < head_dim; j += kWarp) {
    const float scaled = __fmul_rn(__fsub_rn(in[j], mean), scale);
    x[j] = __fadd_rn(static_cast<float>(static_cast<double>(scaled) * norm[j]), bias[j]);
  }
  __syncwarp();
  rotate_head(x, head_dim, rope, tail, positions[row]);
  int s = 0;
  while (row >= cache.first_row[s + 1]) ++s;
  uint16_t* slot = cache.keys[s] + static_cast<int64_t>(positions[row]) * key_row + key_offset;
  for (int j = lane; j < head_dim; j += kWarp) slot[j] = __half_as_ushort(__float2half(x[j]));
}

struct ScoreParams {
  const float* q;        // [row][heads * head_dim], the group's first row first
  const float* weights;  // [row][heads]
  float weight_scale;
  const int32_t* positions;  // the group's
  const uint16_t* keys;      // the first position's key
  int64_t key_row;
  int heads, top_k, ratio;  // the head width is the kernel's HeadDim
  int64_t cache_positions;
  float* scores;  // [row][cache_positions]
};

// A block scores tiles of kScoreTile positions of one token, its row's queries staged once:
// tiles blockIdx.x, blockIdx.x + gridDim.x, ... up to the positions the token sees, so that the
// grid (fixed for a decode step's graph) costs no more than those positions. Lane p takes
// position p of a tile, its key held in registers, and warp g the heads g, g + 8, ...; the
// warps' sums are added in warp order.
template <int HeadDim>
__global__ void __launch_bounds__(kScoreGroups* kWarp) indexer_scores_kernel(ScoreParams p) {
  constexpr int kPairs = HeadDim / 2, kKeyStride = kPairs + 1;
  extern __shared__ __align__(16) uint8_t shared[];
  wait_for_previous_kernel();
  const int row = static_cast<int>(blockIdx.y);
  const int seen = (p.positions[row] + 1) / p.ratio;
  // A token that sees at most top_k attends them all.
  if (seen <= p.top_k || static_cast<int>(blockIdx.x) * kScoreTile >= seen) return;
  const int width = p.heads * HeadDim;
  float* q = reinterpret_cast<float*>(shared);
  float* weights = q + width;
  uint32_t* keys = reinterpret_cast<uint32_t*>(weights + p.heads);
  float* partial = reinterpret_cast<float*>(keys + kScoreTile * kKeyStride);
  const float* q_row = p.q + static_cast<int64_t>(row) * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x) q[i] = q_row[i];
  for (int h = threadIdx.x; h < p.heads; h += blockDim.x) {
    weights[h] = __fmul_rn(p.weights[static_cast<int64_t>(row) * p.heads + h], p.weight_scale);
  }
  const int lane = threadIdx.x % kWarp, group = threadIdx.x / kWarp;
  for (int first = static_cast<int>(blockIdx.x) * kScoreTile; first < seen;
       first += static_cast<int>(gridDim.x) * kScoreTile) {
    for (int i = threadIdx.x; i < kScoreTile * kPairs; i += blockDim.x) {
      const int t = i / kPairs, c = i % kPairs, position = first + t;
      keys[t * kKeyStride + c] =
          position < seen ? *reinterpret_cast<const uint32_t*>(p.keys + position * p.key_row + 2 * c) : 0u;
    }
    __syncthreads();
    __half2 key[kPairs];
#pragma unroll
    for (int c = 0; c < kPairs; ++c) key[c] = *reinterpret_cast<const __half2*>(keys + lane * kKeyStride + c);
    // Two of the warp's heads at a time (two independent chains of products), added in head order.
    float sum = 0.0f;
    for (int h = group; h < p.heads; h += 2 * kScoreGroups) {
      const bool second = h + kScoreGroups < p.heads;
      const float4* qa = reinterpret_cast<const float4*>(q + h * HeadDim);
      const float4* qb = reinterpret_cast<const float4*>(q + (second ? h + kScoreGroups : h) * HeadDim);
      float a = 0.0f, b = 0.0f;
#pragma unroll
      for (int c = 0; c < kPairs; c += 2) {
        const float2 k0 = __half22float2(key[c]), k1 = __half22float2(key[c + 1]);
        const float4 va = qa[c / 2], vb = qb[c / 2];
        a = __fmaf_rn(va.x, k0.x, a);
        b = __fmaf_rn(vb.x, k0.x, b);
        a = __fmaf_rn(va.y, k0.y, a);
        b = __fmaf_rn(vb.y, k0.y, b);
        a = __fmaf_rn(va.z, k1.x, a);
        b = __fmaf_rn(vb.z, k1.x, b);
        a = __fmaf_rn(va.w, k1.y, a);
        b = __fmaf_rn(vb.w, k1.y, b);
      }
      sum = __fmaf_rn(fmaxf(a, 0.0f), weights[h], sum);
      if (second) sum = __fmaf_rn(fmaxf(b, 0.0f), weights[h + kScoreGroups], sum);
    }
    partial[group * kWarp + lane] = sum;
    __syncthreads();
    if (group == 0 && first + lane < seen) {
      float score = 0.0f;
      for (int g = 0; g < kScoreGroups; ++g) score = __fadd_rn(score, partial[g * kWarp + lane]);
      p.scores[row * p.cache_positions + first + lane] = score;
    }
    __syncthreads();  // the next tile's keys and sums overwrite these
  }
}

// Scores as unsigned integers of the same order (larger float, larger integer).
__device__ __forceinline__ uint32_t ordered_bits(float score) {
  const uint32_t u = __float_as_uint(score);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
// The score whose ordered_bits are `bits`.
__device__ __forceinline__ float score_of_ordered_bits(uint32_t bits) {
  return __uint_as_float((bits & 0x80000000u) ? (bits ^ 0x80000000u) : ~bits);
}

// The exclusive prefix sum of v over the block's threads (kSelectThreads), in thread order.
__device__ int exclusive_sum(int v, int* warp_totals) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  int inclusive = v;
#pragma unroll
  for (int offset = 1; offset < kWarp; offset *= 2) {
    const int other = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  if (lane == kWarp - 1) warp_totals[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int total = warp_totals[lane];
#pragma unroll
    for (int offset = 1; offset < kWarp; offset *= 2) {
      const int other = __shfl_up_sync(0xffffffffu, total, offset);
      if (lane >= offset) total += other;
    }
    warp_totals[lane] = total;  // inclusive over the warps
  }
  __syncthreads();
  const int before = (warp > 0 ? warp_totals[warp - 1] : 0) + inclusive - v;
  __syncthreads();
  return before;
}

// The heap's slot s packed in one word at words[s + 1], the score's bits high: a sift step reads
// both children of a hole (2 h + 1 and 2 h + 2, at an even word) in one 16-byte load and moves one
// word, where the PositionHeap's arrays take four loads and two stores. The words overlay the
// PositionHeap's arrays (pack_heap and unpack_heap move the slots through registers), with two
// more: the unused first, and the one past the last child a pair load may read.
struct PackedHeap {
  uint64_t* words;
  int k;
};
constexpr int kSlotsPerThread = static_cast<int>((kIndexerMaxTopK + kSelectThreads - 1) / kSelectThreads);

__device__ __forceinline__ uint64_t pack_slot(int32_t position, float score) {
  return (static_cast<uint64_t>(__float_as_uint(score)) << 32) | static_cast<uint32_t>(position);
}
__device__ __forceinline__ float slot_score(uint64_t word) {
  return __uint_as_float(static_cast<uint32_t>(word >> 32));
}

__device__ __forceinline__ void pack_heap(const PositionHeap& heap, const PackedHeap& packed) {
  uint64_t held[kSlotsPerThread];
#pragma unroll
  for (int i = 0; i < kSlotsPerThread; ++i) {
    const int s = static_cast<int>(threadIdx.x) + i * kSelectThreads;
    if (s < packed.k) held[i] = pack_slot(heap.positions[s], heap.scores[s]);
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kSlotsPerThread; ++i) {
    const int s = static_cast<int>(threadIdx.x) + i * kSelectThreads;
    if (s < packed.k) packed.words[s + 1] = held[i];
  }
  __syncthreads();
}

__device__ __forceinline__ void unpack_heap(const PackedHeap& packed, const PositionHeap& heap) {
  uint64_t held[kSlotsPerThread];
#pragma unroll
  for (int i = 0; i < kSlotsPerThread; ++i) {
    const int s = static_cast<int>(threadIdx.x) + i * kSelectThreads;
    if (s < packed.k) held[i] = packed.words[s + 1];
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kSlotsPerThread; ++i) {
    const int s = static_cast<int>(threadIdx.x) + i * kSelectThreads;
    if (s < packed.k) {
      heap.positions[s] = static_cast<int32_t>(static_cast<uint32_t>(held[i]));
      heap.scores[s] = slot_score(held[i]);
    }
  }
  __syncthreads();
}

// One level of base/heap_select.h's sift_level on the packed heap, by the same comparisons, for the lane's
// entry at `hole` (-1: none): the next hole, or -1 where the entry is placed or there is none. Every lane
// loads, its hole's children or (where it has no hole or a leaf's) the unused first word and the root,
// and only a lane with an entry stores, so that a step is one straight sequence the warp's other work
// interleaves with.
__device__ __forceinline__ int packed_sift_level(const PackedHeap& h, int hole, uint64_t entry) {
  const int left = 2 * hole + 1;
  const bool has_children = hole >= 0 && left < h.k;
  const ulonglong2 children = *reinterpret_cast<const ulonglong2*>(h.words + (has_children ? left + 1 : 0));
  const bool right = left + 1 < h.k && !(slot_score(children.y) > slot_score(children.x));
  const uint64_t child = right ? children.y : children.x;
  const bool moves = has_children && !(slot_score(child) > slot_score(entry));
  if (hole >= 0) h.words[hole + 1] = moves ? child : entry;
  return moves ? (right ? left + 1 : left) : -1;
}

// The positions warp 0 offers, a window of 32 at a time, their scores loaded kWindowsAhead windows
// before they are offered (a run of windows with nothing to offer then waits on no load); the window
// being offered keeps, of its positions, those that may still enter.
constexpr int kWindowsAhead = 4;
struct OfferedWindows {
  const float* row_scores;
  int reached;  // the first position not offered
  int first;    // the window's first position
  float score;  // the lane's position's score
  float ahead[kWindowsAhead];
  unsigned candidates;  // the window's positions not yet offered that score above the heap's top

  __device__ float load(int position) const { return position < reached ? row_scores[position] : 0.0f; }
  // The next position scoring above `top` (the top only rises, so a position at or under it never
  // enters) into *position and *entering_score, moving to later windows as this one runs out; false
  // where no position before `reached` does.
  __device__ bool next_entry(float top, int* position, float* entering_score) {
    const unsigned all = 0xffffffffu;
    const int lane = static_cast<int>(threadIdx.x);
    candidates &= __ballot_sync(all, score > top);
    while (candidates == 0 && first + kWarp < reached) {
      first += kWarp;
      score = ahead[0];
#pragma unroll
      for (int i = 0; i + 1 < kWindowsAhead; ++i) ahead[i] = ahead[i + 1];
      ahead[kWindowsAhead - 1] = load(first + kWindowsAhead * kWarp + lane);
      candidates = __ballot_sync(all, first + lane < reached && score > top);
    }
    if (candidates == 0) return false;
    const int j = __ffs(candidates) - 1;
    candidates &= candidates - 1;
    *position = first + j;
    *entering_score = __shfl_sync(all, score, j);
    return true;
  }
};

// Warp 0 offers the positions from top_k up to `reached` (where the heap's top comes to hold the tie
// score: tie_reaches_top) in order, each that scores above the heap's top at its turn. The entries
// sift down as a pipeline (base/heap_select.h's sift_level), a level a step: entry i keeps lane
// i % 32 from the top to its slot, and starts two steps after the one before it, so that no two read
// or write the same slots. The next entry is chosen during the second of those steps, from the top
// the one before left at the root in the first (no entry is at the root then), so that choosing it
// and the sifts run side by side.
__device__ void offer_until_tied(const float* row_scores, int reached, const PackedHeap& heap) {
  const unsigned all = 0xffffffffu;
  const int lane = static_cast<int>(threadIdx.x);
  int hole = -1;       // this lane's entry: where it sifts (-1: none)
  uint64_t entry = 0;  // and what it carries
  int starter = 0;     // the lane the next entry starts in
  OfferedWindows windows{row_scores, reached, heap.k, 0.0f, {}, 0u};
  windows.score = windows.load(heap.k + lane);
#pragma unroll
  for (int i = 0; i < kWindowsAhead; ++i) windows.ahead[i] = windows.load(heap.k + (i + 1) * kWarp + lane);
  windows.candidates = __ballot_sync(all, heap.k + lane < reached);
  int position = 0;
  float score = 0.0f;
  bool starting = windows.next_entry(slot_score(heap.words[1]), &position, &score);
  while (true) {
    if (starting) {
      if (lane == starter) {
        hole = 0;
        entry = pack_slot(position, score);
      }
      starter = (starter + 1) % kWarp;
    }
    hole = packed_sift_level(heap, hole, entry);
    __syncwarp();
    const float top = slot_score(heap.words[1]);
    hole = packed_sift_level(heap, hole, entry);
    starting = windows.next_entry(top, &position, &score);
    __syncwarp();
    if (!starting && __ballot_sync(all, hole >= 0) == 0) break;
  }
}

// The tie path of indexer_top_k_kernel: std::partial_sort's choice (base/heap_select.h), its heap
// in shared memory, then that choice in position order. The parents are sifted a level at a time,
// and warp 0 offers the later positions (offer_until_tied) until the heap's top holds the tie
// score; from there the tied positions leave in the tied region's preorder, so the block counts
// the region's subtrees from the bottom level up and ranks them from the top down, and keeps the
// ones ranked at or past the count of the remaining positions above the tie. The heap's scores hold those counts and
// ranks in turn, and the row's scores (not needed after that) the chosen positions' marks.
__device__ void select_tied(float* row_scores, int seen, float tie, int reached, const PositionHeap& heap, int32_t* out,
                            int* warp_totals) {
  const int top_k = static_cast<int>(heap.k);
  for (int i = threadIdx.x; i < top_k; i += kSelectThreads) {
    heap.positions[i] = i;
    heap.scores[i] = row_scores[i];
  }
  __syncthreads();
  for (int level = heap_parent_levels(top_k); level >= 0; --level) {
    const int64_t last = heap_level_last(level, top_k);
    for (int64_t parent = heap_level_first(level) + threadIdx.x; parent <= last; parent += kSelectThreads) {
      sift_parent(heap, parent);
    }
    __syncthreads();
  }
  const PackedHeap packed{reinterpret_cast<uint64_t*>(heap.positions), top_k};
  pack_heap(heap, packed);
  if (threadIdx.x < kWarp) offer_until_tied(row_scores, reached, packed);
  __syncthreads();
  unpack_heap(packed, heap);
  const auto count_of = [&](int slot) { return slot < top_k ? __float_as_int(heap.scores[slot]) : 0; };
  for (int level = heap_slot_levels(top_k); level >= 0; --level) {
    const int64_t last = heap_slot_last(level, top_k);
    for (int64_t slot = heap_level_first(level) + threadIdx.x; slot <= last; slot += kSelectThreads) {
      // The top holds the tie score, so it ranks first: its rank replaces its count, which nothing reads.
      const int s = static_cast<int>(slot);
      const int count = tied_subtree_count(heap.scores[s] == tie, count_of(2 * s + 1), count_of(2 * s + 2));
      heap.scores[s] = __int_as_float(s == 0 ? 0 : count);
    }
    __syncthreads();
  }
  for (int level = 0; level <= heap_parent_levels(top_k); ++level) {
    const int64_t last = heap_level_last(level, top_k);
    for (int64_t parent = heap_level_first(level) + threadIdx.x; parent <= last; parent += kSelectThreads) {
      const int s = static_cast<int>(parent);
      const int rank = __float_as_int(heap.scores[s]);
      const ChildRanks r =
          rank < 0 ? ChildRanks{-1, -1} : tied_child_ranks(rank, count_of(2 * s + 1), count_of(2 * s + 2));
      heap.scores[2 * s + 1] = __int_as_float(r.left);
      if (2 * s + 2 < top_k) heap.scores[2 * s + 2] = __int_as_float(r.right);
    }
    __syncthreads();
  }
  int* chosen = reinterpret_cast<int*>(row_scores);
  int entries = 0;  // the positions from `reached` on above the tie: each takes the region's next in preorder
  for (int base = 0; base < seen; base += kSelectThreads) {
    const int i = base + static_cast<int>(threadIdx.x);
    const bool above = i < seen && row_scores[i] > tie;
    if (i < seen) chosen[i] = above;
    entries += __syncthreads_count(above && i >= reached);
  }
  for (int s = threadIdx.x; s < top_k; s += kSelectThreads) {
    if (__float_as_int(heap.scores[s]) >= entries) chosen[heap.positions[s]] = 1;
  }
  __syncthreads();
  const int chunk = (seen + kSelectThreads - 1) / kSelectThreads;
  const int begin = min(seen, static_cast<int>(threadIdx.x) * chunk), end = min(seen, begin + chunk);
  int count = 0;
  for (int i = begin; i < end; ++i) count += chosen[i];
  int at = exclusive_sum(count, warp_totals);
  for (int i = begin; i < end; ++i) {
    if (chosen[i] != 0) out[at++] = i;
  }
}

// base/heap_select.h's tie_reaches_top on the block: the first position past the first top_k
// positions' count under the tie of later positions scoring at or above it (top_k where none
// scores under it).
__device__ int tie_reaches_top(const float* row_scores, int seen, int top_k, float tie, int* warp_totals,
                               int* found_shared) {
  int below = 0;
  for (int base = 0; base < top_k; base += kSelectThreads) {
    const int i = base + static_cast<int>(threadIdx.x);
    below += __syncthreads_count(i < top_k && row_scores[i] < tie);
  }
  if (below == 0) return top_k;
  if (threadIdx.x == 0) *found_shared = seen;
  int counted = 0;
  for (int base = top_k; base < seen && counted < below; base += kSelectThreads) {
    const int i = base + static_cast<int>(threadIdx.x);
    const bool entering = i < seen && row_scores[i] >= tie;
    const int before = exclusive_sum(entering, warp_totals);
    if (entering && counted + before + 1 == below) *found_shared = i + 1;
    counted += __syncthreads_count(entering);
  }
  __syncthreads();
  return *found_shared;
}

// Whether std::partial_sort's heap takes a tied position out: whether a position from `reached`
// (tie_reaches_top's) on scores above the tie. Where none does, it keeps the tied positions before
// `reached`, which are the first `needed` ties in position order: the choice the block makes
// where the ties fit, so that no heap is built.
__device__ bool takes_out_a_tie(const float* row_scores, int seen, float tie, int reached) {
  int entering = 0;
  for (int base = reached; base < seen; base += kSelectThreads) {
    const int i = base + static_cast<int>(threadIdx.x);
    entering += __syncthreads_count(i < seen && row_scores[i] > tie);
  }
  return entering > 0;
}

// A block per token: its top_k best-scored positions in position order (those above the k-th
// largest score, then as many of the positions equal to it as fill k: all of them where they fit,
// else the ones std::partial_sort keeps, as the CPU path chooses); a token that sees at most top_k
// positions attends them all, -1 after them.
__global__ void __launch_bounds__(kSelectThreads)
    indexer_top_k_kernel(float* scores, const int32_t* positions, int top_k, int ratio, int64_t cache_positions,
                         int32_t* selected) {
  wait_for_previous_kernel();
  __shared__ int histogram[256];
  __shared__ uint32_t prefix_shared;
  __shared__ int needed_shared;
  __shared__ int tied_shared;
  __shared__ int next_shared;
  __shared__ int warp_totals[kWarp];
  const int row = static_cast<int>(blockIdx.x), seen = (positions[row] + 1) / ratio;
  int32_t* out = selected + static_cast<int64_t>(row) * top_k;
  if (seen <= top_k) {
    for (int i = threadIdx.x; i < top_k; i += kSelectThreads) out[i] = i < seen ? i : -1;
    return;
  }
  float* row_scores = scores + row * cache_positions;
  uint32_t prefix = 0, mask = 0;
  int needed = top_k;  // of the positions matching the prefix, how many the selection still takes
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kSelectThreads) histogram[i] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < seen; i += kSelectThreads) {
      const uint32_t u = ordered_bits(row_scores[i]);
      if ((u & mask) == prefix) atomicAdd(&histogram[(u >> shift) & 255u], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int above = 0, digit = 255;
      while (above + histogram[digit] < needed) above += histogram[digit--];
      prefix_shared = prefix | (static_cast<uint32_t>(digit) << shift);
      needed_shared = needed - above;
      tied_shared = histogram[digit];  // after the last digit: the positions equal to the k-th score
    }
    __syncthreads();
    prefix = prefix_shared;
    needed = needed_shared;
    mask |= 255u << shift;
    __syncthreads();
  }
  // `prefix` is the k-th largest score's bits; `needed` of the positions equal to it are taken.
  if (tied_shared > needed) {
    // More positions tie at the k-th score than fit (scores of exactly 0, every head's dot
    // negative: on the tiny fixtures, and on the synthetic full-size models for the rows whose
    // queries point away from every key): which of them the CPU keeps depends on
    // std::partial_sort's heap, so the block follows it where the heap takes a tied position out.
    const float tie = score_of_ordered_bits(prefix);
    const int reached = tie_reaches_top(row_scores, seen, top_k, tie, warp_totals, &next_shared);
    if (takes_out_a_tie(row_scores, seen, tie, reached)) {
      extern __shared__ __align__(16) uint8_t heap_shared[];
      const PositionHeap heap{reinterpret_cast<int32_t*>(heap_shared),
                              reinterpret_cast<float*>(heap_shared + top_k * sizeof(int32_t)), top_k};
      select_tied(row_scores, seen, tie, reached, heap, out, warp_totals);
      return;
    }
  }
  const int chunk = (seen + kSelectThreads - 1) / kSelectThreads;
  const int begin = min(seen, static_cast<int>(threadIdx.x) * chunk), end = min(seen, begin + chunk);
  int above = 0, ties = 0;
  for (int i = begin; i < end; ++i) {
    const uint32_t u = ordered_bits(row_scores[i]);
    above += u > prefix;
    ties += u == prefix;
  }
  const int ties_before = exclusive_sum(ties, warp_totals);
  const int taken_ties = max(0, min(ties, needed - ties_before));
  int at = exclusive_sum(above + taken_ties, warp_totals);
  int tie = ties_before;
  for (int i = begin; i < end; ++i) {
    const uint32_t u = ordered_bits(row_scores[i]);
    if (u > prefix) {
      out[at++] = i;
    } else if (u == prefix) {
      if (tie < needed) out[at++] = i;
      ++tie;
    }
  }
}

size_t score_shared_bytes(const IndexerShape& shape) {
  return static_cast<size_t>(shape.heads * shape.head_dim + shape.heads) * sizeof(float) +
         static_cast<size_t>(kScoreTile * (shape.head_dim / 2 + 1)) * sizeof(uint32_t) +
         static_cast<size_t>(kScoreGroups * kWarp) * sizeof(float);
}

void check_shape(const IndexerShape& shape) {
  if (!indexer_supports(shape.heads, shape.head_dim, shape.top_k) || shape.top_k < 1 || shape.ratio < 1 ||
      shape.rope.dims > shape.head_dim || shape.rope.dims % 2 != 0) {
    throw Error("UNSUPPORTED_MODEL", "the GPU's lightning indexer serves heads of 64 or 128 (at most 128 heads and " +
                                         std::to_string(kMaxQueryFloats) + " query floats a token, choosing at most " +
                                         std::to_string(kIndexerMaxTopK) +
                                         ") rotating an even count of their dims, not " + std::to_string(shape.heads) +
                                         " heads of " + std::to_string(shape.head_dim) + " choosing " +
                                         std::to_string(shape.top_k) + " rotating " + std::to_string(shape.rope.dims));
  }
}

}  // namespace

bool indexer_supports(int64_t heads, int64_t head_dim, int64_t top_k) {
  return (head_dim == 64 || head_dim == 128) && heads >= 1 && heads <= kMaxHeads &&
         heads * head_dim <= kMaxQueryFloats && top_k <= kIndexerMaxTopK;
}

void indexer_queries(float* q, int64_t n, const IndexerShape& shape, const int32_t* positions, StreamHandle stream) {
  check_shape(shape);
  const int64_t total = n * shape.heads;
  if (total == 0) return;
  launch_early(indexer_queries_kernel, dim3(ceil_div(total, kWarpsPerBlock)), dim3(kWarpsPerBlock * kWarp), 0,
               static_cast<cudaStream_t>(stream), q, total, static_cast<int>(shape.heads),
               static_cast<int>(shape.head_dim), positions, shape.rope, shape.rope_tail);
}

void store_indexer_keys(const float* k, int64_t n, const IndexerShape& shape, const float* norm, const float* bias,
                        float eps, const int32_t* positions, const KvSegments& cache, int64_t key_row,
                        int64_t key_offset, StreamHandle stream) {
  check_shape(shape);
  if (cache.count < 1 || cache.count > kMaxKvSegments || cache.first_row[0] != 0 || cache.first_row[cache.count] != n ||
      key_offset + shape.head_dim > key_row) {
    throw Error("INVALID_ARGUMENT", "store_indexer_keys' cache segments must cover its " + std::to_string(n) +
                                        " rows in at most " + std::to_string(kMaxKvSegments) +
                                        " segments, and its key fit the cache's row");
  }
  launch_early(store_keys_kernel, dim3(ceil_div(n, kWarpsPerBlock)), dim3(kWarpsPerBlock * kWarp), 0,
               static_cast<cudaStream_t>(stream), k, n, static_cast<int>(shape.head_dim), norm, bias, eps, positions,
               shape.rope, shape.rope_tail, cache, key_row, key_offset);
}

size_t indexer_scratch_bytes(int64_t cache_positions, int64_t max_rows) {
  const size_t row_bytes = static_cast<size_t>(std::max<int64_t>(cache_positions, 1)) * sizeof(float);
  const int64_t within_budget = static_cast<int64_t>(kScratchBudget / row_bytes);
  return static_cast<size_t>(std::min(max_rows, std::max(within_budget, kMinSelectRows))) * row_bytes;
}

void indexer_select(const IndexerSelect& s, const IndexerShape& shape, void* scratch, size_t scratch_bytes,
                    StreamHandle stream) {
  check_shape(shape);
  if (s.key_row % 2 != 0) {
    throw Error("INVALID_ARGUMENT", "the indexer reads keys in pairs of halves: rows of " + std::to_string(s.key_row));
  }
  const int64_t launch_rows =
      static_cast<int64_t>(scratch_bytes / (static_cast<size_t>(s.cache_positions) * sizeof(float)));
  if (s.n > 0 && launch_rows < 1) {
    throw Error("INVALID_ARGUMENT", "indexer_select's scratch of " + std::to_string(scratch_bytes) +
                                        " bytes holds no row of " + std::to_string(s.cache_positions) + " scores");
  }
  const auto raw = static_cast<cudaStream_t>(stream);
  float* scores = static_cast<float*>(scratch);
  const int64_t width = shape.heads * shape.head_dim;
  for (int64_t first = 0; first < s.n; first += launch_rows) {
    const int64_t rows = std::min(launch_rows, s.n - first);
    ScoreParams p;
    p.q = s.q + first * width;
    p.weights = s.weights + first * shape.heads;
    p.weight_scale = s.weight_scale;
    p.positions = s.positions + first;
    p.keys = s.keys;
    p.key_row = s.key_row;
    p.heads = static_cast<int>(shape.heads);
    p.top_k = static_cast<int>(shape.top_k);
    p.ratio = static_cast<int>(shape.ratio);
    p.cache_positions = s.cache_positions;
    p.scores = scores;
    // Enough blocks to fill the GPU, never more than the cache's tiles: each loops over its tiles.
    const int64_t tiles = ceil_div(s.cache_positions, kScoreTile);
    const int64_t blocks_per_row = std::min(tiles, std::max<int64_t>(1, ceil_div(kScoreBlocks, rows)));
    const dim3 grid(static_cast<unsigned>(blocks_per_row), static_cast<unsigned>(rows));
    const size_t shared = score_shared_bytes(shape);
    if (shape.head_dim == 64) {
      launch_early(indexer_scores_kernel<64>, grid, dim3(kScoreGroups * kWarp), shared, raw, p);
    } else {
      launch_early(indexer_scores_kernel<128>, grid, dim3(kScoreGroups * kWarp), shared, raw, p);
    }
    launch_early(indexer_top_k_kernel, dim3(static_cast<unsigned>(rows)), dim3(kSelectThreads),
                 static_cast<size_t>(shape.top_k + 2) * sizeof(uint64_t), raw, scores, s.positions + first,
                 static_cast<int>(shape.top_k), static_cast<int>(shape.ratio), s.cache_positions,
                 s.selected + first * shape.top_k);
  }
}

}  // namespace bloomery::cuda
