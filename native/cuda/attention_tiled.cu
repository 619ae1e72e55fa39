// Causal attention on tensor cores (f16 mma.sync m16n8k16, f32 accumulators) for head_dim 64,
// 128 and 256, prompts and decode steps alike. A block takes a tile of packed rows of one KV head
// (packed row r of a pass is token r / group and query head kv_head * group + r % group, so the
// query heads that share a KV head read each K/V tile once) and cache positions in segments of
// kSegment. A batch of one row tile per KV head (a decode step, a few streams) gives each
// segment its own block, so a long context fills the GPU; the grid covers the whole cache and
// blocks past the row's length return at once, so one captured decode graph serves every step.
// Larger batches give each block every segment of its tile. A decode step of several sequences
// (each one row tile, over its own cache) runs in one launch, a row tile per sequence.
//
// Rounding kept from the CPU path (cpu/attention.cc) where it costs little: the query rounded
// to f16 (f16 products are exact in f32), each score the f32 product of its dot and the scale,
// and the probabilities normalized before they are rounded to f16, as the CPU rounds them. So
// the normalization comes first: attention_stats_kernel computes each row's maximum score and
// exp sum per segment and the last of a row tile's blocks folds them (fold_segment_statistics),
// attention_values_kernel recomputes the same scores (the same instructions, so the same
// floats), rounds p = exp(s - max) * (1 / sum) to f16 and multiplies by V, adding the segments' products in
// order; with a block per segment, combine_segments_kernel adds them in the same order. One
// Q.K product more than online-softmax flash attention, and no rescaled output. A decode step
// (a block per segment, one tile each) runs both in one launch, attention_decode_kernel: its
// blocks store their statistics, meet at a barrier, and reuse the scores they hold. What differs
// from the CPU is the order of float sums (the dots, the exp sum, the P.V sums), so a
// probability's f16 rounding moves only where a score lands within a few float ulps of a
// rounding boundary.
//
// Every sum a row's output is made of runs over the same positions in the same order whatever
// else is in the batch (segments start at fixed positions, tiles at multiples of kTile in them,
// and each mma row is a dot of its own), so a row's floats do not depend on the batch: a prompt
// split into other passes, a decode step and a prompt row at the same position agree exactly.
//
// Heads of 256 (the hybrid Qwens' gated attention) split their value columns over two blocks,
// each computing the same scores (the same instructions, so the same floats and statistics) and
// the products of its 128 columns: a whole head's accumulators would not fit a thread's registers.
//
// A sliding window (gpt-oss) masks the positions before each row's window as the causal mask
// masks those after it; segments before every window of a block's rows are skipped (their
// statistics stored as empty, their products as zeros: what computing them would give, so the
// floats still do not depend on the batch). Learned sinks join the fold of a row's statistics.
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>

#include "base/error.h"
#include "cuda/attention_tiles.cuh"
#include "cuda/quantize.cuh"
#include "cuda/runtime.h"

namespace bloomery::cuda {

namespace {

constexpr int kRowsPerWarp = 16;  // an mma's M
constexpr int kTile = 64;         // cache positions per K/V tile
constexpr int kPad = 8;           // halves after each shared row, so ldmatrix's eight row reads miss each other's banks
// Cache positions per segment: one tile, so that each block of a decode step (a block per
// segment) waits out one tile's loads and products, not several in turn.
constexpr int kSegment = kTile;
constexpr int kWideWarps = 4;  // warps (16 packed rows each) per block for more than 16 rows

struct Params {
  const float* q;
  const int32_t* positions;
  const uint16_t* keys;
  const uint16_t* values;
  int n;
  int heads;
  int group;                   // query heads per KV head
  int64_t key_row, value_row;  // the cache's row widths
  float scale;
  int window;              // a row at position p attends (p - window, p] (0: every earlier position)
  const float* sinks;      // per query head, or null
  bool block_per_segment;  // else one block for all of a row tile's segments
  // With a row tile per sequence (sequences > 0): sequence s's token rows [first[s], first[s + 1]),
  // over its cache (keys[s], values[s]); else row tiles of kRows packed rows over keys and values.
  int sequences;
  int first[kMaxKvSegments + 1];
  const uint16_t* sequence_keys[kMaxKvSegments];
  const uint16_t* sequence_values[kMaxKvSegments];
  float2* stats;       // [segment][n * heads]: each row's maximum score and its exps' sum in the segment
  float2* folded;      // [n * heads]: each row's maximum over its segments and the inverse of its exp sum
  float* partial;      // [segment][n * heads][head_dim] with a block per segment, else unused
  uint32_t* barriers;  // with a block per segment: two words per KV head and row tile (segment_barrier)
  float* out;
};

// The segments a block runs, [begin, end), the positions its tile's longest row sees, and the
// first segment any of its rows' windows reaches (0 without a window): those before it are empty.
struct Segments {
  int begin;
  int end;
  int length;
  int live;
};

__device__ __forceinline__ int segments_of(int length) { return (length + kSegment - 1) / kSegment; }

template <int D, int kWarps>
struct Shape {
  static constexpr int kRows = kWarps * kRowsPerWarp;  // packed rows per block
  static constexpr int kThreads = kWarps * kWarp;
  static constexpr int kStride = D + kPad;  // halves per shared row
  static constexpr int kSteps = D / 16;     // mma K steps over the head
  // Value columns a block multiplies and sums: a part of a wider head's, over kValueParts blocks.
  static constexpr int kValueColumns = D < 128 ? D : 128;
  static constexpr int kValueParts = D / kValueColumns;
  static constexpr int kValueStride = kValueColumns + kPad;
  static constexpr size_t kStatsShared = (kRows + kTile) * kStride * sizeof(uint16_t);
  static constexpr size_t kValuesShared = kTile * (kStride + kValueStride) * sizeof(uint16_t);
  static_assert(kRows <= kTile, "the query tile is staged in a K/V tile's shared memory");
};

// The blocks' shared memory, laid out by each kernel (sizes: Shape's kStatsShared, kValuesShared).
extern __shared__ __align__(16) uint16_t dynamic_shared[];

// A block's packed rows [first, end) and the cache they attend.
struct RowTile {
  int first;
  int end;
  const uint16_t* keys;
  const uint16_t* values;
};

template <int D, int kWarps>
__device__ RowTile row_tile(const Params& p) {
  const int t = blockIdx.x;
  if (p.sequences > 0)
    return {p.first[t] * p.group, p.first[t + 1] * p.group, p.sequence_keys[t], p.sequence_values[t]};
  const int first = t * Shape<D, kWarps>::kRows;
  return {first, min(first + Shape<D, kWarps>::kRows, p.n * p.group), p.keys, p.values};
}

// The rows this lane holds in the mma fragments (lane / 4 and lane / 4 + 8 of its warp's 16):
// their packed index, the last position each attends (-1 for padding rows past the batch) and
// the first (its window's start, else 0).
struct LaneRows {
  int row[2];
  int limit[2];
  int low[2];
};

// The first position a row whose last is `limit` attends.
__device__ __forceinline__ int window_start(const Params& p, int limit) {
  return p.window > 0 ? max(0, limit - p.window + 1) : 0;
}

__device__ __forceinline__ bool sees(const LaneRows& rows, int i, int position) {
  return position <= rows.limit[i] && position >= rows.low[i];
}

__device__ LaneRows lane_rows(const Params& p, const RowTile& tile) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  LaneRows rows;
  for (int i = 0; i < 2; ++i) {
    rows.row[i] = tile.first + warp * kRowsPerWarp + lane / 4 + 8 * i;
    rows.limit[i] = rows.row[i] < tile.end ? p.positions[rows.row[i] / p.group] : -1;
    rows.low[i] = window_start(p, rows.limit[i]);
  }
  return rows;
}

// The block's segments: those holding positions of its tile's longest row, one of them with a
// block per segment (none when the tile's rows end before it).
template <int D, int kWarps>
__device__ Segments block_segments(const Params& p, const RowTile& tile) {
  __shared__ int longest, lowest;
  if (threadIdx.x == 0) longest = 0, lowest = INT_MAX;
  __syncthreads();
  const int row = tile.first + static_cast<int>(threadIdx.x);
  if (threadIdx.x < Shape<D, kWarps>::kRows && row < tile.end) {
    const int position = p.positions[row / p.group];
    atomicMax(&longest, position + 1);
    atomicMin(&lowest, window_start(p, position));
  }
  __syncthreads();
  const int count = segments_of(longest);
  const int live = lowest / kSegment;
  if (!p.block_per_segment) return {0, count, longest, live};
  const int segment = static_cast<int>(blockIdx.z);
  return {segment, min(segment + 1, count), longest, live};
}

// The warp's query rows as mma A fragments, rounded to f16, staged through `stage`. Every
// thread's loads are issued before any is stored: a decode step's few blocks would otherwise
// wait out one memory latency per load.
template <int D, int kWarps>
__device__ void load_queries(const Params& p, int kv_head, const RowTile& tile, uint16_t* stage,
                             uint32_t (&a)[Shape<D, kWarps>::kSteps][4]) {
  using S = Shape<D, kWarps>;
  constexpr int kLoads = S::kRows * D / 4 / S::kThreads;  // float4 loads per thread
  float4 v[kLoads];
#pragma unroll
  for (int j = 0; j < kLoads; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * S::kThreads;
    const int row = tile.first + i / (D / 4), c = i % (D / 4) * 4;
    v[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (row < tile.end) {
      const int64_t token = row / p.group, head = kv_head * p.group + row % p.group;
      v[j] = *reinterpret_cast<const float4*>(p.q + (token * p.heads + head) * D + c);
    }
  }
#pragma unroll
  for (int j = 0; j < kLoads; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * S::kThreads;
    *reinterpret_cast<uint2*>(stage + i / (D / 4) * S::kStride + i % (D / 4) * 4) =
        make_uint2(pack_halves(v[j].x, v[j].y), pack_halves(v[j].z, v[j].w));
  }
  __syncthreads();
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, m = lane / 8;
  const uint16_t* base = stage + (warp * kRowsPerWarp + m % 2 * 8 + lane % 8) * S::kStride + m / 2 * 8;
#pragma unroll
  for (int k = 0; k < S::kSteps; ++k) ldmatrix_x4(a[k], base + k * 16);
  __syncthreads();
}

// Queues copies of columns [column, column + kColumns) of cache rows [first, first + kTile) into
// `tile` (rows of kStride halves; cp.async, so every piece is in flight at once), zeros from `end`
// on: rows never written may hold NaN bit patterns, and 0 * NaN would reach the output.
// wait_for_tiles() waits for this thread's copies.
template <int kColumns, int kStride, int kThreads>
__device__ void load_tile(const uint16_t* cache, int64_t kv_width, int64_t column, int first, int end, uint16_t* tile) {
  constexpr int kPieces = kColumns / 8;  // 16-byte pieces per row
  for (int i = threadIdx.x; i < kTile * kPieces; i += kThreads) {
    const int r = i / kPieces, c = i % kPieces * 8;
    const int position = first + r;
    const bool inside = position < end;
    const uint16_t* source = cache + (inside ? position * kv_width + column + c : 0);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_address(tile + r * kStride + c)),
                 "l"(source), "r"(inside ? 16 : 0)
                 : "memory");
  }
}

// The KV head's keys, whole rows.
template <int D, int kWarps>
__device__ void load_keys(const uint16_t* cache, int64_t kv_width, int kv_head, int first, int end, uint16_t* tile) {
  using S = Shape<D, kWarps>;
  load_tile<D, S::kStride, S::kThreads>(cache, kv_width, static_cast<int64_t>(kv_head) * D, first, end, tile);
}

// The KV head's value columns of part `part` (Shape::kValueColumns of them).
template <int D, int kWarps>
__device__ void load_values(const uint16_t* cache, int64_t kv_width, int kv_head, int part, int first, int end,
                            uint16_t* tile) {
  using S = Shape<D, kWarps>;
  load_tile<S::kValueColumns, S::kValueStride, S::kThreads>(
      cache, kv_width, static_cast<int64_t>(kv_head) * D + part * S::kValueColumns, first, end, tile);
}

// The warp's scores against a K tile: s[t][e] is row lane / 4 + 8 * (e / 2), position
// 8 t + 2 (lane % 4) + e % 2 of the tile; each the f32 product of its dot and the scale.
template <int D, int kWarps>
__device__ void tile_scores(const uint32_t (&a)[Shape<D, kWarps>::kSteps][4], const uint16_t* keys, float scale,
                            float (&s)[kTile / 8][4]) {
  using S = Shape<D, kWarps>;
  const int lane = threadIdx.x % kWarp, m = lane / 8;
#pragma unroll
  for (int t = 0; t < kTile / 8; ++t) s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.0f;
#pragma unroll
  for (int t = 0; t < kTile / 8; t += 2) {
    const uint16_t* base = keys + ((t + m / 2) * 8 + lane % 8) * S::kStride + m % 2 * 8;
#pragma unroll
    for (int k = 0; k < S::kSteps; ++k) {
      uint32_t b[4];
      ldmatrix_x4(b, base + k * 16);
      mma(s[t], a[k], b[0], b[1]);
      mma(s[t + 1], a[k], b[2], b[3]);
    }
  }
#pragma unroll
  for (int t = 0; t < kTile / 8; ++t) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[t][e] = __fmul_rn(s[t][e], scale);
  }
}

__device__ __forceinline__ int score_position(int first, int t, int e) {
  return first + t * 8 + threadIdx.x % 4 * 2 + e % 2;
}

__device__ __forceinline__ int64_t row_index(const Params& p, int kv_head, int row) {
  return static_cast<int64_t>(row / p.group) * p.heads + kv_head * p.group + row % p.group;
}

// Folds a tile's scores into each of the lane's two rows' running maximum and exp sum (this
// lane's share of the sum, at scale exp(-max)), over the positions [first, end) the row sees.
__device__ __forceinline__ void fold_tile_statistics(const float (&s)[kTile / 8][4], int first, const LaneRows& rows,
                                                     float (&max)[2], double (&sum)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float tile_max = -INFINITY;
#pragma unroll
    for (int t = 0; t < kTile / 8; ++t) {
#pragma unroll
      for (int e = 2 * i; e < 2 * i + 2; ++e) {
        if (sees(rows, i, score_position(first, t, e))) tile_max = fmaxf(tile_max, s[t][e]);
      }
    }
    const float next = fmaxf(max[i], quad_max(tile_max));
    if (next == -INFINITY) continue;
    float tile_sum = 0.0f;
#pragma unroll
    for (int t = 0; t < kTile / 8; ++t) {
#pragma unroll
      for (int e = 2 * i; e < 2 * i + 2; ++e) {
        if (sees(rows, i, score_position(first, t, e))) tile_sum = __fadd_rn(tile_sum, expf(__fsub_rn(s[t][e], next)));
      }
    }
    // Explicitly rounded steps (no contraction into an FMA that one instantiation might do and
    // another not): every kernel variant gives a row the same floats.
    sum[i] =
        __dadd_rn(__dmul_rn(sum[i], static_cast<double>(expf(__fsub_rn(max[i], next)))), static_cast<double>(tile_sum));
    max[i] = next;
  }
}

// Writes the lane's rows' statistics of `segment` (the sum's quarters added across the quad).
__device__ __forceinline__ void store_statistics(const Params& p, int kv_head, const LaneRows& rows, int segment,
                                                 const float (&max)[2], double (&sum)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    sum[i] = __dadd_rn(sum[i], __shfl_xor_sync(0xffffffffu, sum[i], 1));
    sum[i] = __dadd_rn(sum[i], __shfl_xor_sync(0xffffffffu, sum[i], 2));
    if (threadIdx.x % 4 == 0 && rows.limit[i] >= segment * kSegment) {
      p.stats[segment * static_cast<int64_t>(p.n) * p.heads + row_index(p, kv_head, rows.row[i])] =
          make_float2(max[i], static_cast<float>(sum[i]));
    }
  }
}

// Each of the lane's rows' maximum over its segments and the inverse of its exp sum.
__device__ __forceinline__ void softmax_scale(const Params& p, int kv_head, const LaneRows& rows, float (&max)[2],
                                              float (&inverse)[2]) {
  const int64_t stride = static_cast<int64_t>(p.n) * p.heads;
  for (int i = 0; i < 2; ++i) {
    const bool inside = rows.limit[i] >= 0;
    const float sink = inside && p.sinks ? p.sinks[kv_head * p.group + rows.row[i] % p.group] : -INFINITY;
    fold_segment_statistics(p.stats + (inside ? row_index(p, kv_head, rows.row[i]) : 0), stride,
                            inside ? segments_of(rows.limit[i] + 1) : 0, sink, max[i], inverse[i]);
    if (!inside) max[i] = inverse[i] = 0.0f;
  }
}

// Folds the lane's rows' segment statistics (softmax_scale) into p.folded, once for the values
// launch: its blocks would otherwise each fold every segment of their rows.
__device__ __forceinline__ void store_folded(const Params& p, int kv_head, const LaneRows& rows) {
  float max[2], inverse[2];
  softmax_scale(p, kv_head, rows, max, inverse);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (threadIdx.x % 4 == 0 && rows.limit[i] >= 0)
      p.folded[row_index(p, kv_head, rows.row[i])] = make_float2(max[i], inverse[i]);
  }
}

// The lane's rows' folded statistics, as store_folded left them.
__device__ __forceinline__ void load_folded(const Params& p, int kv_head, const LaneRows& rows, float (&max)[2],
                                            float (&inverse)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float2 f = rows.limit[i] >= 0 ? p.folded[row_index(p, kv_head, rows.row[i])] : make_float2(0.0f, 0.0f);
    max[i] = f.x;
    inverse[i] = f.y;
  }
}

// Whether this block is the last of `count` (a KV head's segments in one launch) to get here,
// each after its statistics are stored; the last leaves the count at zero for the next launch.
// No block waits: the last only sees every other's statistics.
__device__ bool last_segment_block(uint32_t* arrived, int count) {
  __shared__ bool last;
  __threadfence();  // this thread's statistics, before the block arrives
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(arrived, 1u) == static_cast<uint32_t>(count) - 1;
    if (last) atomicExch(arrived, 0u);
  }
  __syncthreads();
  __threadfence();
  return last;
}

// o += P V for a tile: the probabilities p = exp(s - max) * inverse rounded to f16 as A
// fragments (the C layout of score tiles 2j and 2j + 1 is the A layout of positions
// [16 j, 16 j + 16)), V (the block's value columns) from the shared tile `values`.
template <int D, int kWarps>
__device__ __forceinline__ void add_tile_values(const float (&s)[kTile / 8][4], int first, const LaneRows& rows,
                                                const float (&max)[2], const float (&inverse)[2],
                                                const uint16_t* values,
                                                float (&o)[Shape<D, kWarps>::kValueColumns / 8][4]) {
  using S = Shape<D, kWarps>;
  const int lane = threadIdx.x % kWarp, m = lane / 8;
  uint32_t probs[kTile / 16][4];
#pragma unroll
  for (int t = 0; t < kTile / 8; ++t) {
    float pr[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = e / 2;
      pr[e] =
          sees(rows, i, score_position(first, t, e)) ? __fmul_rn(expf(__fsub_rn(s[t][e], max[i])), inverse[i]) : 0.0f;
    }
    probs[t / 2][t % 2 * 2] = pack_halves(pr[0], pr[1]);
    probs[t / 2][t % 2 * 2 + 1] = pack_halves(pr[2], pr[3]);
  }
  const uint16_t* base = values + (m % 2 * 8 + lane % 8) * S::kValueStride + m / 2 * 8;
#pragma unroll
  for (int j = 0; j < kTile / 16; ++j) {
#pragma unroll
    for (int d = 0; d < S::kValueColumns / 8; d += 2) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, base + j * 16 * S::kValueStride + d * 8);
      mma(o[d], probs[j], b[0], b[1]);
      mma(o[d + 1], probs[j], b[2], b[3]);
    }
  }
}

// Writes the lane's rows of `total`, value columns [column, column + W), to `dest` (rows of D
// floats, indexed as row_index).
template <int D, int W>
__device__ __forceinline__ void store_rows(const Params& p, int kv_head, const LaneRows& rows,
                                           const float (&total)[W / 8][4], int column, float* dest) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (rows.limit[i] < 0) continue;
    float* row = dest + row_index(p, kv_head, rows.row[i]) * D + column + threadIdx.x % 4 * 2;
#pragma unroll
    for (int d = 0; d < W / 8; ++d) {
      *reinterpret_cast<float2*>(row + d * 8) = make_float2(total[d][2 * i], total[d][2 * i + 1]);
    }
  }
}

template <int D, int kWarps>
__global__ void __launch_bounds__(Shape<D, kWarps>::kThreads) attention_stats_kernel(Params p) {
  using S = Shape<D, kWarps>;
  uint16_t* const tile = dynamic_shared;
  uint16_t* const stage = tile + kTile * S::kStride;
  wait_for_previous_kernel();
  const int kv_head = blockIdx.y;
  const RowTile rows_tile = row_tile<D, kWarps>(p);
  const Segments segments = block_segments<D, kWarps>(p, rows_tile);
  if (segments.begin >= segments.end) return;
  const int end = min(segments.end * kSegment, segments.length);
  const int live = min(max(segments.begin, segments.live), segments.end);
  // Each K tile is queued while the one before is folded (the first while the queries load).
  if (live < segments.end)
    load_keys<D, kWarps>(rows_tile.keys, p.key_row, kv_head, live * kSegment, segments.length, tile);
  const LaneRows rows = lane_rows(p, rows_tile);
  uint32_t a[S::kSteps][4];
  load_queries<D, kWarps>(p, kv_head, rows_tile, stage, a);

  for (int segment = segments.begin; segment < live; ++segment) {
    float max[2] = {-INFINITY, -INFINITY};
    double sum[2] = {0.0, 0.0};
    store_statistics(p, kv_head, rows, segment, max, sum);
  }
  for (int segment = live; segment < segments.end; ++segment) {
    float max[2] = {-INFINITY, -INFINITY};
    double sum[2] = {0.0, 0.0};
    for (int first = segment * kSegment; first < min((segment + 1) * kSegment, end); first += kTile) {
      wait_for_tiles();
      __syncthreads();
      float s[kTile / 8][4];
      tile_scores<D, kWarps>(a, tile, p.scale, s);
      __syncthreads();
      if (first + kTile < end)
        load_keys<D, kWarps>(rows_tile.keys, p.key_row, kv_head, first + kTile, segments.length, tile);
      fold_tile_statistics(s, first, rows, max, sum);
    }
    store_statistics(p, kv_head, rows, segment, max, sum);
  }
  // The last block of the row tile's (all of them, with a block for all its segments) folds them.
  if (p.block_per_segment) {
    if (!last_segment_block(p.barriers + 2 * (blockIdx.x * gridDim.y + kv_head), segments_of(segments.length))) return;
  } else {
    __threadfence();
    __syncthreads();
  }
  store_folded(p, kv_head, rows);
}

// Batches of more than one row tile (a block for all of a tile's segments), and decode steps whose
// blocks do not all fit the GPU at once (a block per segment, each leaving its partial product):
// other decode steps run attention_decode_kernel instead.
template <int D, int kWarps>
__global__ void __launch_bounds__(Shape<D, kWarps>::kThreads) attention_values_kernel(Params p) {
  using S = Shape<D, kWarps>;
  uint16_t* const keys = dynamic_shared;
  uint16_t* const values = keys + kTile * S::kStride;
  wait_for_previous_kernel();
  const int kv_head = blockIdx.y / S::kValueParts, part = blockIdx.y % S::kValueParts;
  const RowTile tile = row_tile<D, kWarps>(p);
  const Segments segments = block_segments<D, kWarps>(p, tile);
  if (segments.begin >= segments.end) return;
  const int end = min(segments.end * kSegment, segments.length);
  // Segments before `live` would add zeros.
  const int live = min(max(segments.begin, segments.live), segments.end);
  // The first V tile loads while the queries are staged through `keys`, the first K tile while
  // the folded statistics are read; each later tile while the one before is multiplied.
  if (live < segments.end)
    load_values<D, kWarps>(tile.values, p.value_row, kv_head, part, live * kSegment, segments.length, values);
  const LaneRows rows = lane_rows(p, tile);
  uint32_t a[S::kSteps][4];
  load_queries<D, kWarps>(p, kv_head, tile, keys, a);
  if (live < segments.end) load_keys<D, kWarps>(tile.keys, p.key_row, kv_head, live * kSegment, segments.length, keys);
  float max[2], inverse[2];
  load_folded(p, kv_head, rows, max, inverse);

  constexpr int W = S::kValueColumns;
  float total[W / 8][4] = {};  // the segments' products, added in segment order
  for (int segment = live; segment < segments.end; ++segment) {
    float o[W / 8][4] = {};
    for (int first = segment * kSegment; first < min((segment + 1) * kSegment, end); first += kTile) {
      wait_for_tiles();
      __syncthreads();
      float s[kTile / 8][4];
      tile_scores<D, kWarps>(a, keys, p.scale, s);
      __syncthreads();
      const bool more = first + kTile < end;
      if (more) load_keys<D, kWarps>(tile.keys, p.key_row, kv_head, first + kTile, segments.length, keys);
      add_tile_values<D, kWarps>(s, first, rows, max, inverse, values, o);
      __syncthreads();
      if (more) load_values<D, kWarps>(tile.values, p.value_row, kv_head, part, first + kTile, segments.length, values);
    }
#pragma unroll
    for (int d = 0; d < W / 8; ++d) {
#pragma unroll
      for (int e = 0; e < 4; ++e) total[d][e] = __fadd_rn(total[d][e], o[d][e]);
    }
  }
  // A block per segment leaves its segment's product (from zero, as above) for combine_segments.
  const int64_t stride = static_cast<int64_t>(p.n) * p.heads;
  store_rows<D, W>(p, kv_head, rows, total, part * W,
                   p.block_per_segment ? p.partial + segments.begin * stride * D : p.out);
}

// Returns once `count` blocks (a KV head's segments in one launch) have called it, each after
// its statistics are stored: the last to arrive resets the count and moves the generation on;
// the others wait for the generation to move. Every block of the launch is running by the time
// any waits here (launch() takes this kernel only for grids whose waiting blocks fit the GPU at
// once, fused_decode_fits, and wait_for_previous_kernel starts no later kernel before all of them
// run), so none waits for a block that cannot start.
__device__ void segment_barrier(uint32_t* barrier, int count) {
  __threadfence();  // this thread's statistics, before the block arrives
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t* arrived = barrier;
    volatile uint32_t* generation = barrier + 1;
    const uint32_t seen = *generation;
    __threadfence();  // the generation read before the arrival counts
    if (atomicAdd(arrived, 1u) == static_cast<uint32_t>(count) - 1) {
      atomicExch(arrived, 0u);
      __threadfence();
      atomicAdd(const_cast<uint32_t*>(generation), 1u);
    } else {
      while (*generation == seen) __nanosleep(32);
    }
    __threadfence();
  }
  __syncthreads();
}

// A decode step (a block per segment, one tile each) in one launch: the block's scores give its
// segment's statistics as attention_stats_kernel's do; once every segment's are stored
// (segment_barrier), the block folds them and multiplies its probabilities by V as
// attention_values_kernel does, from the scores it still holds. The same floats as the two
// launches, without the second launch or the second pass over K.
template <int D, int kWarps>
__global__ void __launch_bounds__(Shape<D, kWarps>::kThreads) attention_decode_kernel(Params p) {
  using S = Shape<D, kWarps>;
  static_assert(kSegment == kTile, "a block's segment is one tile");
  uint16_t* const keys = dynamic_shared;
  uint16_t* const values = keys + kTile * S::kStride;
  wait_for_previous_kernel();
  const int kv_head = blockIdx.y / S::kValueParts, part = blockIdx.y % S::kValueParts;
  const RowTile tile = row_tile<D, kWarps>(p);
  const Segments segments = block_segments<D, kWarps>(p, tile);
  if (segments.begin >= segments.end) return;
  const int first = segments.begin * kSegment;
  // A segment before every row's window: empty statistics and a zero product, nothing loaded.
  const bool live = segments.begin >= segments.live;
  // V loads while the queries are staged through `keys`, K once they are.
  if (live) load_values<D, kWarps>(tile.values, p.value_row, kv_head, part, first, segments.length, values);
  const LaneRows rows = lane_rows(p, tile);
  uint32_t a[S::kSteps][4];
  load_queries<D, kWarps>(p, kv_head, tile, keys, a);
  if (live) load_keys<D, kWarps>(tile.keys, p.key_row, kv_head, first, segments.length, keys);
  wait_for_tiles();
  __syncthreads();
  float s[kTile / 8][4];
  tile_scores<D, kWarps>(a, keys, p.scale, s);
  {
    float max[2] = {-INFINITY, -INFINITY};
    double sum[2] = {0.0, 0.0};
    if (live) fold_tile_statistics(s, first, rows, max, sum);
    store_statistics(p, kv_head, rows, segments.begin, max, sum);
  }
  // Each value part's blocks meet at a barrier of their own (they store the same statistics).
  segment_barrier(p.barriers + 2 * (blockIdx.x * gridDim.y + blockIdx.y), segments_of(segments.length));
  constexpr int W = S::kValueColumns;
  float o[W / 8][4] = {};
  if (live) {
    float max[2], inverse[2];
    softmax_scale(p, kv_head, rows, max, inverse);
    add_tile_values<D, kWarps>(s, first, rows, max, inverse, values, o);
  }
  float total[W / 8][4];
#pragma unroll
  for (int d = 0; d < W / 8; ++d) {
#pragma unroll
    for (int e = 0; e < 4; ++e) total[d][e] = __fadd_rn(0.0f, o[d][e]);
  }
  const int64_t stride = static_cast<int64_t>(p.n) * p.heads;
  store_rows<D, W>(p, kv_head, rows, total, part * W, p.partial + segments.begin * stride * D);
}

// Each output the sum of its row's segment products (sum_segments).
__global__ void combine_segments_kernel(const float* partial, const int32_t* positions, int64_t rows, int heads,
                                        int head_dim, float* out) {
  wait_for_previous_kernel();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * head_dim) return;
  out[i] = sum_segments(partial, rows * head_dim, segments_of(positions[i / head_dim / heads] + 1), i);
}

// The same, a block of kQuantizeValuesPerWarp threads per as many consecutive outputs of a token's
// row (`width` of them, a multiple of that), a thread per output; its first warp then quantizes
// them into the row's `blocks` (quantize.cuh, as quantize_activations would): the product that
// reads a decode step's attention then neither waits for a quantize launch nor quantizes the row
// in each of its blocks.
__global__ void __launch_bounds__(kQuantizeValuesPerWarp)
    combine_and_quantize_kernel(const float* partial, const int32_t* positions, int64_t rows, int heads, int head_dim,
                                int width, ActivationFormat format, float* out, ActivationBlock* blocks) {
  __shared__ __align__(16) float sums[kQuantizeValuesPerWarp];
  wait_for_previous_kernel();
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kQuantizeValuesPerWarp;
  const int64_t i = first + threadIdx.x;
  sums[threadIdx.x] = sum_segments(partial, rows * head_dim, segments_of(positions[i / head_dim / heads] + 1), i);
  __syncthreads();
  if (threadIdx.x >= kWarp) return;
  const float4 lo = reinterpret_cast<const float4*>(sums)[2 * threadIdx.x];
  const float4 hi = reinterpret_cast<const float4*>(sums)[2 * threadIdx.x + 1];
  const float v[kQuantizeValuesPerLane] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  float4* mine = reinterpret_cast<float4*>(out + first + threadIdx.x * kQuantizeValuesPerLane);
  mine[0] = lo;
  mine[1] = hi;
  quantize_warp(v, format, static_cast<int>(first % width), width, blocks + first / width * (width / 32));
}

// How a batch of n rows is cut: warps per block, row tiles, and whether each segment of the
// cache gets its own block (one row tile per KV head: a decode step or a few rows).
struct Plan {
  int warps;
  int row_tiles;
  bool block_per_segment;
};

Plan plan_for(int64_t n, const AttentionShape& shape) {
  const int64_t rows = n * (shape.heads / shape.kv_heads);
  const int warps = rows <= kRowsPerWarp ? 1 : kWideWarps;
  const int64_t row_tiles = (rows + warps * kRowsPerWarp - 1) / (warps * kRowsPerWarp);
  return {warps, static_cast<int>(row_tiles), row_tiles == 1};
}

int64_t cache_segments(const AttentionShape& shape) { return (shape.cache_positions + kSegment - 1) / kSegment; }

// Blocks per KV head and row tile that split the value columns (Shape::kValueParts).
int64_t value_parts(const AttentionShape& shape) { return shape.head_dim == 256 ? Shape<256, 1>::kValueParts : 1; }

// The decode launch's barriers (segment_barrier: two words per KV head and row tile, a tile per
// sequence at most; the statistics launch counts its blocks in the first, last_segment_block) lead
// the scratch, at the same place for every batch, so that words another
// batch's statistics overwrote never serve as a barrier: they start zeroed (as a DeviceBuffer
// does) and each barrier leaves them so.
size_t barrier_bytes(const AttentionShape& shape) {
  return (static_cast<size_t>(2 * shape.kv_heads * value_parts(shape) * kMaxKvSegments) * sizeof(uint32_t) + 255) /
         256 * 256;
}

// The segments' statistics, then each row's folded ones.
size_t stats_bytes(int64_t n, const AttentionShape& shape) {
  return (static_cast<size_t>(cache_segments(shape) + 1) * n * shape.heads * sizeof(float2) + 255) / 256 * 256;
}

size_t partial_bytes(int64_t n, const AttentionShape& shape, bool block_per_segment) {
  if (!block_per_segment) return 0;
  return static_cast<size_t>(cache_segments(shape)) * n * shape.heads * shape.head_dim * sizeof(float);
}

// Whether every block of `grid` can be resident at once, with room to spare, on the current
// device: attention_decode_kernel's blocks wait for each other at segment_barrier, so a grid
// larger than that (a long cache: a block per segment of every KV head and sequence) would wait
// forever for blocks that cannot start. Half the device's capacity, as other kernels' blocks
// (the previous launch's tail, another stream's) may hold the rest.
template <int D, int kWarps>
bool fused_decode_fits(const dim3& grid) {
  struct Capacity {
    int device = -1;
    int64_t blocks = 0;
  };
  static thread_local Capacity capacity;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) device = -1;
  if (device < 0 || capacity.device != device) {
    int per_sm = 0, sms = 0;
    const bool known = device >= 0 &&
                       cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, attention_decode_kernel<D, kWarps>,
                                                                     Shape<D, kWarps>::kThreads,
                                                                     Shape<D, kWarps>::kValuesShared) == cudaSuccess &&
                       cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess;
    // Unknown: the two launches, which never wait for another block (the same floats).
    if (!known) {
      cudaGetLastError();
      return false;
    }
    capacity = {device, static_cast<int64_t>(per_sm) * sms};
  }
  return static_cast<int64_t>(grid.x) * grid.y * grid.z * 2 <= capacity.blocks;
}

// `grid`: row tiles, KV heads, segments; the value products' launches have each KV head's
// value parts along y.
template <int D, int kWarps>
void launch(const Params& p, const dim3& grid, bool block_per_segment, cudaStream_t stream) {
  using S = Shape<D, kWarps>;
  const dim3 parts(grid.x, grid.y * S::kValueParts, grid.z);
  if (block_per_segment && fused_decode_fits<D, kWarps>(parts)) {
    launch_early(attention_decode_kernel<D, kWarps>, parts, dim3(S::kThreads), S::kValuesShared, stream, p);
    return;
  }
  launch_early(attention_stats_kernel<D, kWarps>, grid, dim3(S::kThreads), S::kStatsShared, stream, p);
  launch_early(attention_values_kernel<D, kWarps>, parts, dim3(S::kThreads), S::kValuesShared, stream, p);
}

// Shared memory past the default 48 KiB, for the kernels that take it.
template <int D, int kWarps>
void allow_shared_memory() {
  using S = Shape<D, kWarps>;
  cuda::allow_shared_memory(reinterpret_cast<const void*>(attention_stats_kernel<D, kWarps>), S::kStatsShared,
                            "tiled attention's shared memory");
  for (const void* kernel : {reinterpret_cast<const void*>(attention_values_kernel<D, kWarps>),
                             reinterpret_cast<const void*>(attention_decode_kernel<D, kWarps>)}) {
    cuda::allow_shared_memory(kernel, S::kValuesShared, "tiled attention's shared memory");
  }
}

// Params for n rows (every scratch region sized for them), whatever the row tiles.
Params params_for(const float* q, int64_t n, const int32_t* positions, const AttentionShape& shape, void* scratch,
                  bool block_per_segment, float* out) {
  Params p{};
  p.q = q;
  p.positions = positions;
  p.n = static_cast<int>(n);
  p.heads = static_cast<int>(shape.heads);
  p.group = static_cast<int>(shape.heads / shape.kv_heads);
  const AttentionShape rows = with_cache_rows(shape);
  p.key_row = rows.key_row;
  p.value_row = rows.value_row;
  p.scale = shape.scale;
  p.window = static_cast<int>(shape.window);
  p.sinks = shape.sinks;
  p.block_per_segment = block_per_segment;
  p.barriers = static_cast<uint32_t*>(scratch);
  uint8_t* const statistics = static_cast<uint8_t*>(scratch) + barrier_bytes(shape);
  p.stats = reinterpret_cast<float2*>(statistics);
  p.folded = p.stats + cache_segments(shape) * n * shape.heads;
  p.partial = reinterpret_cast<float*>(statistics + stats_bytes(n, shape));
  p.out = out;
  return p;
}

void check_tiled(const AttentionShape& shape) {
  if (!tiled_attention_serves(shape)) {
    throw Error("UNSUPPORTED_MODEL", "tiled GPU attention needs key and value heads both 64, 128 or 256 wide, not " +
                                         std::to_string(shape.head_dim) + " and " +
                                         std::to_string(with_cache_rows(shape).value_dim));
  }
  if (shape.cache_positions < 1) throw Error("INVALID_ARGUMENT", "tiled GPU attention needs the KV cache's size");
}

void launch_rows(const Params& p, const dim3& grid, bool wide, const AttentionShape& shape, cudaStream_t s) {
  if (shape.head_dim == 64) {
    wide ? launch<64, kWideWarps>(p, grid, p.block_per_segment, s) : launch<64, 1>(p, grid, p.block_per_segment, s);
  } else if (shape.head_dim == 128) {
    wide ? launch<128, kWideWarps>(p, grid, p.block_per_segment, s) : launch<128, 1>(p, grid, p.block_per_segment, s);
  } else {
    wide ? launch<256, kWideWarps>(p, grid, p.block_per_segment, s) : launch<256, 1>(p, grid, p.block_per_segment, s);
  }
}

// Adds up a block-per-segment launch's partial outputs of n rows into `out`, quantized too
// where it can: returns whether it was.
bool combine_segments(const Params& p, int64_t n, const AttentionShape& shape, const QuantizedRows& quantized,
                      cudaStream_t s) {
  constexpr int kCombineThreads = 256;
  const int64_t rows = n * shape.heads;
  const int64_t width = shape.heads * shape.head_dim;
  if (quantized.blocks && width % kQuantizeValuesPerWarp == 0) {
    launch_early(combine_and_quantize_kernel, dim3(rows * shape.head_dim / kQuantizeValuesPerWarp),
                 dim3(kQuantizeValuesPerWarp), 0, s, p.partial, p.positions, rows, p.heads,
                 static_cast<int>(shape.head_dim), static_cast<int>(width), activation_format(quantized.type), p.out,
                 quantized.blocks);
    return true;
  }
  launch_early(combine_segments_kernel, dim3(ceil_div(rows * shape.head_dim, kCombineThreads)), dim3(kCombineThreads),
               0, s, p.partial, p.positions, rows, p.heads, static_cast<int>(shape.head_dim), p.out);
  return false;
}

}  // namespace

bool tiled_attention_serves(const AttentionShape& shape) {
  return (shape.head_dim == 64 || shape.head_dim == 128 || shape.head_dim == 256) &&
         with_cache_rows(shape).value_dim == shape.head_dim;
}

void prepare_tiled_attention(int64_t head_dim) {
  if (head_dim != 256) return;
  allow_shared_memory<256, 1>();
  allow_shared_memory<256, kWideWarps>();
}

size_t attention_scratch_bytes(const AttentionShape& shape, int64_t max_rows) {
  size_t bytes = 0;
  if (!tiled_attention_serves(shape)) return bytes;
  for (int64_t n = 1; n <= max_rows; ++n) {
    bytes = std::max(bytes, stats_bytes(n, shape) + partial_bytes(n, shape, plan_for(n, shape).block_per_segment));
  }
  const int64_t batched = std::min<int64_t>(max_rows, kMaxBatchedDecodeRows);
  bytes = std::max(bytes, stats_bytes(batched, shape) + partial_bytes(batched, shape, true));
  return barrier_bytes(shape) + bytes;
}

bool tiled_causal_attention(const float* q, int64_t n, const int32_t* positions, const uint16_t* keys,
                            const uint16_t* values, const AttentionShape& shape, void* scratch, float* out,
                            const QuantizedRows& quantized, StreamHandle stream) {
  check_tiled(shape);
  const Plan plan = plan_for(n, shape);
  Params p = params_for(q, n, positions, shape, scratch, plan.block_per_segment, out);
  p.keys = keys;
  p.values = values;
  const auto s = static_cast<cudaStream_t>(stream);
  const dim3 grid(static_cast<unsigned>(plan.row_tiles), static_cast<unsigned>(shape.kv_heads),
                  static_cast<unsigned>(plan.block_per_segment ? cache_segments(shape) : 1));
  launch_rows(p, grid, plan.warps == kWideWarps, shape, s);
  return plan.block_per_segment && combine_segments(p, n, shape, quantized, s);
}

bool batched_attention_serves(const AttentionShape& shape, const KvSegments& sequences) {
  if (!tiled_attention_serves(shape)) return false;
  if (sequences.count < 1 || sequences.count > kMaxKvSegments) return false;
  if (sequences.first_row[sequences.count] - sequences.first_row[0] > kMaxBatchedDecodeRows) return false;
  const int64_t group = shape.heads / shape.kv_heads;
  for (int i = 0; i < sequences.count; ++i) {
    const int64_t rows = sequences.first_row[i + 1] - sequences.first_row[i];
    if (rows < 1 || rows * group > kRowsPerWarp) return false;
  }
  return true;
}

bool batched_causal_attention(const float* q, const int32_t* positions, const KvSegments& sequences,
                              const AttentionShape& shape, void* scratch, float* out, const QuantizedRows& quantized,
                              StreamHandle stream) {
  check_tiled(shape);
  if (!batched_attention_serves(shape, sequences)) {
    throw Error("INVALID_ARGUMENT", "a batched decode attention takes 1 to " + std::to_string(kMaxKvSegments) +
                                        " sequences of one row tile each, " + std::to_string(kMaxBatchedDecodeRows) +
                                        " rows at most");
  }
  const int64_t n = sequences.first_row[sequences.count] - sequences.first_row[0];
  Params p = params_for(q, n, positions, shape, scratch, true, out);
  p.sequences = sequences.count;
  for (int i = 0; i <= sequences.count; ++i) p.first[i] = sequences.first_row[i] - sequences.first_row[0];
  for (int i = 0; i < sequences.count; ++i) {
    p.sequence_keys[i] = sequences.keys[i];
    p.sequence_values[i] = sequences.values[i];
  }
  const auto s = static_cast<cudaStream_t>(stream);
  const dim3 grid(static_cast<unsigned>(sequences.count), static_cast<unsigned>(shape.kv_heads),
                  static_cast<unsigned>(cache_segments(shape)));
  launch_rows(p, grid, false, shape, s);
  return combine_segments(p, n, shape, quantized, s);
}

}  // namespace bloomery::cuda
