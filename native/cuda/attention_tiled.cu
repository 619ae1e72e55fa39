// Causal attention on tensor cores (f16 mma.sync m16n8k16, f32 accumulators) for head_dim 64
// and 128, prompts and decode steps alike. A block takes a tile of packed rows of one KV head
// (packed row r of a pass is token r / group and query head kv_head * group + r % group, so the
// query heads that share a KV head read each K/V tile once) and one split of the cache
// positions: batches too small to fill the GPU (a decode step) split the positions over up to
// kMaxSplits blocks, and the kernels size each split from the length read on the device, so one
// captured decode graph serves every step.
//
// Rounding kept from the CPU path (cpu/attention.cc) where it costs little: the query rounded
// to f16 (f16 products are exact in f32), each score the f32 product of its dot and the scale,
// and the probabilities normalized before they are rounded to f16, as the CPU rounds them. So
// the normalization comes first: attention_stats_kernel computes each row's maximum score and
// exp sum per split, attention_values_kernel recomputes the same scores (the same instructions,
// so the same floats), combines the splits' statistics, rounds p = exp(s - max) * (1 / sum) to
// f16 and multiplies by V; with several splits, combine_splits_kernel adds their partial rows in
// split order (deterministic). One Q.K product more than online-softmax flash attention, and no
// rescaled output; what differs from the CPU is the order of float sums (the dots, the exp sum,
// the P.V sums), so a probability's f16 rounding moves only where a score lands within a few
// float ulps of a rounding boundary.
#include <cuda_fp16.h>

#include <algorithm>

#include "base/error.h"
#include "cuda/common.cuh"

namespace bloomery::cuda {

namespace {

constexpr int kRowsPerWarp = 16;  // an mma's M
constexpr int kTile = 64;         // cache positions per K/V tile
constexpr int kPad = 8;           // halves after each shared row, so ldmatrix's eight row reads miss each other's banks
constexpr int kMaxSplits = 64;
constexpr int kTargetBlocks = 256;  // about two blocks per SM of an H100 / H200 (132 SMs)
constexpr int kPromptWarps = 4;     // warps (16 packed rows each) per block for batches of more than 16 rows

struct Params {
  const float* q;
  const int32_t* positions;
  const uint16_t* keys;
  const uint16_t* values;
  int n;
  int heads;
  int group;  // query heads per KV head
  int64_t kv_width;
  float scale;
  int splits;
  float2* stats;   // [splits][n * heads]: each row's maximum score and its exps' sum in the split
  float* partial;  // [splits][n * heads][head_dim] with several splits, else unused
  float* out;
};

// One split's cache positions [begin, end): whole tiles of at least kTile positions.
struct Range {
  int begin;
  int end;
};

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p))
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p))
               : "memory");
}

// c += a b for a 16x16 f16 A, a 16x8 f16 B, f32 C.
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_halves(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

template <int D, int kWarps>
struct Shape {
  static constexpr int kRows = kWarps * kRowsPerWarp;  // packed rows per block
  static constexpr int kThreads = kWarps * kWarp;
  static constexpr int kStride = D + kPad;  // halves per shared row
  static constexpr int kSteps = D / 16;     // mma K steps over the head
  static_assert(kRows <= kTile, "the query tile is staged in a K/V tile's shared memory");
};

// The rows this lane holds in the mma fragments (lane / 4 and lane / 4 + 8 of its warp's 16):
// their packed index and the last position each attends (-1 for padding rows past the batch).
struct LaneRows {
  int row[2];
  int limit[2];
};

__device__ LaneRows lane_rows(const Params& p, int first_row) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  LaneRows rows;
  for (int i = 0; i < 2; ++i) {
    rows.row[i] = first_row + warp * kRowsPerWarp + lane / 4 + 8 * i;
    rows.limit[i] = rows.row[i] < p.n * p.group ? p.positions[rows.row[i] / p.group] : -1;
  }
  return rows;
}

// The block's split: positions the longest row of its tile sees, divided into `splits` ranges
// of whole tiles (later ranges empty when the context is short).
template <int D, int kWarps>
__device__ Range block_range(const Params& p, int first_row, int split) {
  __shared__ int longest;
  if (threadIdx.x == 0) longest = 0;
  __syncthreads();
  const int row = first_row + static_cast<int>(threadIdx.x);
  if (threadIdx.x < Shape<D, kWarps>::kRows && row < p.n * p.group) atomicMax(&longest, p.positions[row / p.group] + 1);
  __syncthreads();
  const int length = longest;
  const int share = (length + p.splits - 1) / p.splits;
  const int chunk = max(kTile, (share + kTile - 1) / kTile * kTile);
  const int begin = min(split * chunk, length);
  return {begin, min(begin + chunk, length)};
}

// The warp's query rows as mma A fragments, rounded to f16, staged through `stage`.
template <int D, int kWarps>
__device__ void load_queries(const Params& p, int kv_head, int first_row, uint16_t* stage,
                             uint32_t (&a)[Shape<D, kWarps>::kSteps][4]) {
  using S = Shape<D, kWarps>;
  for (int i = threadIdx.x; i < S::kRows * D / 2; i += S::kThreads) {
    const int r = i / (D / 2), c = i % (D / 2) * 2;
    const int row = first_row + r;
    float2 v = make_float2(0.0f, 0.0f);
    if (row < p.n * p.group) {
      const int64_t token = row / p.group, head = kv_head * p.group + row % p.group;
      v = *reinterpret_cast<const float2*>(p.q + (token * p.heads + head) * D + c);
    }
    *reinterpret_cast<uint32_t*>(stage + r * S::kStride + c) = pack_halves(v.x, v.y);
  }
  __syncthreads();
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, m = lane / 8;
  const uint16_t* base = stage + (warp * kRowsPerWarp + m % 2 * 8 + lane % 8) * S::kStride + m / 2 * 8;
#pragma unroll
  for (int k = 0; k < S::kSteps; ++k) ldmatrix_x4(a[k], base + k * 16);
  __syncthreads();
}

// Queues copies of cache rows [first, first + kTile) of the KV head into `tile` (cp.async, so
// every piece is in flight at once), zeros from `end` on: rows never written may hold NaN bit
// patterns, and 0 * NaN would reach the output. wait_for_tiles() waits for this thread's copies.
template <int D, int kWarps>
__device__ void load_tile(const uint16_t* cache, int64_t kv_width, int kv_head, int first, int end, uint16_t* tile) {
  using S = Shape<D, kWarps>;
  constexpr int kPieces = D / 8;  // 16-byte pieces per row
  for (int i = threadIdx.x; i < kTile * kPieces; i += S::kThreads) {
    const int r = i / kPieces, c = i % kPieces * 8;
    const int position = first + r;
    const bool inside = position < end;
    const uint16_t* source = cache + (inside ? position * kv_width + kv_head * D + c : 0);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_address(tile + r * S::kStride + c)),
                 "l"(source), "r"(inside ? 16 : 0)
                 : "memory");
  }
}

__device__ __forceinline__ void wait_for_tiles() { asm volatile("cp.async.wait_all;" ::: "memory"); }

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

template <int D, int kWarps>
__global__ void __launch_bounds__(Shape<D, kWarps>::kThreads) attention_stats_kernel(Params p) {
  using S = Shape<D, kWarps>;
  __shared__ __align__(16) uint16_t tile[kTile * S::kStride];
  const int kv_head = blockIdx.y, split = blockIdx.z;
  const int first_row = blockIdx.x * S::kRows;
  const Range range = block_range<D, kWarps>(p, first_row, split);
  const LaneRows rows = lane_rows(p, first_row);
  uint32_t a[S::kSteps][4];
  if (range.begin < range.end) load_queries<D, kWarps>(p, kv_head, first_row, tile, a);

  // A row none of whose positions lie in the split keeps -inf: later splits, further from the
  // start, are outside it as well, which is where the readers of the statistics stop.
  float max[2] = {-INFINITY, -INFINITY};
  double sum[2] = {0.0, 0.0};  // this lane's share, at scale exp(-max)
  for (int first = range.begin; first < range.end; first += kTile) {
    load_tile<D, kWarps>(p.keys, p.kv_width, kv_head, first, range.end, tile);
    wait_for_tiles();
    __syncthreads();
    float s[kTile / 8][4];
    tile_scores<D, kWarps>(a, tile, p.scale, s);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int t = 0; t < kTile / 8; ++t) {
#pragma unroll
        for (int e = 2 * i; e < 2 * i + 2; ++e) {
          if (score_position(first, t, e) <= rows.limit[i]) tile_max = fmaxf(tile_max, s[t][e]);
        }
      }
      const float next = fmaxf(max[i], quad_max(tile_max));
      if (next == -INFINITY) continue;
      float tile_sum = 0.0f;
#pragma unroll
      for (int t = 0; t < kTile / 8; ++t) {
#pragma unroll
        for (int e = 2 * i; e < 2 * i + 2; ++e) {
          if (score_position(first, t, e) <= rows.limit[i]) tile_sum += expf(__fsub_rn(s[t][e], next));
        }
      }
      sum[i] = sum[i] * static_cast<double>(expf(__fsub_rn(max[i], next))) + static_cast<double>(tile_sum);
      max[i] = next;
    }
  }
  for (int i = 0; i < 2; ++i) {
    sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 1);
    sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 2);
    if (threadIdx.x % 4 == 0 && rows.limit[i] >= 0) {
      p.stats[split * static_cast<int64_t>(p.n) * p.heads + row_index(p, kv_head, rows.row[i])] =
          make_float2(max[i], static_cast<float>(sum[i]));
    }
  }
}

template <int D, int kWarps>
__global__ void __launch_bounds__(Shape<D, kWarps>::kThreads) attention_values_kernel(Params p) {
  using S = Shape<D, kWarps>;
  __shared__ __align__(16) uint16_t keys[kTile * S::kStride];
  __shared__ __align__(16) uint16_t values[kTile * S::kStride];
  const int kv_head = blockIdx.y, split = blockIdx.z;
  const int first_row = blockIdx.x * S::kRows;
  const int lane = threadIdx.x % kWarp, m = lane / 8;
  const Range range = block_range<D, kWarps>(p, first_row, split);
  if (range.begin == range.end) return;  // a split past the context: its rows' statistics say so
  const LaneRows rows = lane_rows(p, first_row);
  uint32_t a[S::kSteps][4];
  load_queries<D, kWarps>(p, kv_head, first_row, keys, a);

  // The row's maximum over all splits and the inverse of its exp sum, as the CPU's softmax
  // has them (its sum in double, the inverse rounded to float).
  float max[2] = {0.0f, 0.0f}, inverse[2] = {0.0f, 0.0f};
  const int64_t stride = static_cast<int64_t>(p.n) * p.heads;
  for (int i = 0; i < 2; ++i) {
    if (rows.limit[i] < 0) continue;
    const float2* stats = p.stats + row_index(p, kv_head, rows.row[i]);
    float row_max = -INFINITY;
    for (int s = 0; s < p.splits && stats[s * stride].x != -INFINITY; ++s)
      row_max = fmaxf(row_max, stats[s * stride].x);
    double row_sum = 0.0;
    for (int s = 0; s < p.splits && stats[s * stride].x != -INFINITY; ++s) {
      const float2 st = stats[s * stride];
      row_sum += static_cast<double>(st.y) * static_cast<double>(expf(__fsub_rn(st.x, row_max)));
    }
    max[i] = row_max;
    inverse[i] = static_cast<float>(1.0 / row_sum);
  }

  float o[D / 8][4] = {};
  for (int first = range.begin; first < range.end; first += kTile) {
    load_tile<D, kWarps>(p.keys, p.kv_width, kv_head, first, range.end, keys);
    load_tile<D, kWarps>(p.values, p.kv_width, kv_head, first, range.end, values);
    wait_for_tiles();
    __syncthreads();
    float s[kTile / 8][4];
    tile_scores<D, kWarps>(a, keys, p.scale, s);
    // The probabilities as A fragments: the C layout of score tiles 2j and 2j + 1 is the A
    // layout of positions [16 j, 16 j + 16).
    uint32_t probs[kTile / 16][4];
#pragma unroll
    for (int t = 0; t < kTile / 8; ++t) {
      float pr[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e / 2;
        pr[e] = score_position(first, t, e) <= rows.limit[i] ? __fmul_rn(expf(__fsub_rn(s[t][e], max[i])), inverse[i])
                                                             : 0.0f;
      }
      probs[t / 2][t % 2 * 2] = pack_halves(pr[0], pr[1]);
      probs[t / 2][t % 2 * 2 + 1] = pack_halves(pr[2], pr[3]);
    }
    const uint16_t* base = values + (m % 2 * 8 + lane % 8) * S::kStride + m / 2 * 8;
#pragma unroll
    for (int j = 0; j < kTile / 16; ++j) {
#pragma unroll
      for (int d = 0; d < D / 8; d += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, base + j * 16 * S::kStride + d * 8);
        mma(o[d], probs[j], b[0], b[1]);
        mma(o[d + 1], probs[j], b[2], b[3]);
      }
    }
    __syncthreads();
  }

  float* dest = p.splits == 1 ? p.out : p.partial + split * static_cast<int64_t>(p.n) * p.heads * D;
  for (int i = 0; i < 2; ++i) {
    if (rows.limit[i] < 0) continue;
    float* row = dest + row_index(p, kv_head, rows.row[i]) * D + lane % 4 * 2;
#pragma unroll
    for (int d = 0; d < D / 8; ++d) *reinterpret_cast<float2*>(row + d * 8) = make_float2(o[d][2 * i], o[d][2 * i + 1]);
  }
}

// Each output the sum of its row's partial outputs, in split order, over the splits holding
// some of the row's positions (the first ones: see attention_stats_kernel).
__global__ void combine_splits_kernel(const float2* stats, const float* partial, int splits, int64_t rows, int head_dim,
                                      float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * head_dim) return;
  const int64_t row = i / head_dim;
  float sum = 0.0f;
  for (int s = 0; s < splits && stats[s * rows + row].x != -INFINITY; ++s) sum += partial[s * rows * head_dim + i];
  out[i] = sum;
}

// How a batch of n rows is cut: warps per block, row tiles, and splits of the positions.
struct Plan {
  int warps;
  int row_tiles;
  int splits;
};

Plan plan_for(int64_t n, const AttentionShape& shape) {
  const int64_t rows = n * (shape.heads / shape.kv_heads);
  const int warps = rows <= kRowsPerWarp ? 1 : kPromptWarps;
  const int64_t row_tiles = (rows + warps * kRowsPerWarp - 1) / (warps * kRowsPerWarp);
  const int64_t blocks = row_tiles * shape.kv_heads;
  const int64_t splits = blocks >= kTargetBlocks / 2 ? 1 : std::min<int64_t>(kMaxSplits, kTargetBlocks / blocks);
  return {warps, static_cast<int>(row_tiles), static_cast<int>(std::max<int64_t>(1, splits))};
}

size_t stats_bytes(int64_t n, const AttentionShape& shape, const Plan& plan) {
  return (static_cast<size_t>(plan.splits) * n * shape.heads * sizeof(float2) + 255) / 256 * 256;
}

size_t partial_bytes(int64_t n, const AttentionShape& shape, const Plan& plan) {
  return plan.splits == 1 ? 0 : static_cast<size_t>(plan.splits) * n * shape.heads * shape.head_dim * sizeof(float);
}

template <int D, int kWarps>
void launch(const Params& p, const Plan& plan, int64_t kv_heads, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(plan.row_tiles), static_cast<unsigned>(kv_heads),
                  static_cast<unsigned>(plan.splits));
  attention_stats_kernel<D, kWarps><<<grid, Shape<D, kWarps>::kThreads, 0, stream>>>(p);
  attention_values_kernel<D, kWarps><<<grid, Shape<D, kWarps>::kThreads, 0, stream>>>(p);
}

}  // namespace

bool tiled_attention_supports(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

size_t attention_scratch_bytes(const AttentionShape& shape, int64_t max_rows) {
  size_t bytes = 0;
  if (!tiled_attention_supports(shape.head_dim)) return bytes;
  for (int64_t n = 1; n <= max_rows; ++n) {
    const Plan plan = plan_for(n, shape);
    bytes = std::max(bytes, stats_bytes(n, shape, plan) + partial_bytes(n, shape, plan));
  }
  return bytes;
}

void tiled_causal_attention(const float* q, int64_t n, const int32_t* positions, const uint16_t* keys,
                            const uint16_t* values, const AttentionShape& shape, void* scratch, float* out,
                            StreamHandle stream) {
  if (!tiled_attention_supports(shape.head_dim)) {
    throw Error("UNSUPPORTED_MODEL",
                "tiled GPU attention needs head_dim 64 or 128, not " + std::to_string(shape.head_dim));
  }
  const Plan plan = plan_for(n, shape);
  Params p;
  p.q = q;
  p.positions = positions;
  p.keys = keys;
  p.values = values;
  p.n = static_cast<int>(n);
  p.heads = static_cast<int>(shape.heads);
  p.group = static_cast<int>(shape.heads / shape.kv_heads);
  p.kv_width = shape.kv_heads * shape.head_dim;
  p.scale = shape.scale;
  p.splits = plan.splits;
  p.stats = static_cast<float2*>(scratch);
  p.partial = reinterpret_cast<float*>(static_cast<uint8_t*>(scratch) + stats_bytes(n, shape, plan));
  p.out = out;
  const auto s = static_cast<cudaStream_t>(stream);
  const bool wide = plan.warps == kPromptWarps;
  if (shape.head_dim == 64) {
    wide ? launch<64, kPromptWarps>(p, plan, shape.kv_heads, s) : launch<64, 1>(p, plan, shape.kv_heads, s);
  } else {
    wide ? launch<128, kPromptWarps>(p, plan, shape.kv_heads, s) : launch<128, 1>(p, plan, shape.kv_heads, s);
  }
  if (plan.splits > 1) {
    constexpr int kCombineThreads = 256;
    const int64_t rows = n * shape.heads;
    combine_splits_kernel<<<ceil_div(rows * shape.head_dim, kCombineThreads), kCombineThreads, 0, s>>>(
        p.stats, p.partial, plan.splits, rows, static_cast<int>(shape.head_dim), out);
  }
}

}  // namespace bloomery::cuda
