// Latent attention on tensor cores (f16 mma.sync m16n8k16, f32 accumulators): multi-head latent
// attention with the up-projections absorbed, where every query head of every row attends one
// shared cache row per position, [latent (Rank), rotary key (Rope)] in f16, and the values are
// the latents. A block takes Groups groups of 16 packed rows (row r: token r / heads, head
// r % heads) and 64-position tiles of the cache, each tile loaded once for all of its groups. A
// group's four warps score a quarter of a tile's positions each against the whole key width, and
// multiply the tile's probabilities (staged in shared memory) by a quarter of the latent columns
// each, so no thread holds a row's 512 outputs. A decode step runs groups of one (a block per
// segment); a batch four, so that a token's 64 heads share the tiles their common list gathers.
//
// The rounding is the GQA kernels' (attention_tiled.cu) and the CPU's (cpu/attention.cc): queries
// and probabilities rounded to f16, the probabilities normalized before they are rounded, so the
// statistics come first: latent_stats_kernel stores each row's maximum score and exp sum per
// segment of 64 positions, latent_values_kernel recomputes the same scores, folds the statistics
// and multiplies. A decode step (a single token) gives each segment its own block and adds the
// segments' products in order in latent_combine_kernel; a batch gives each block all of its rows'
// segments and adds them in the same order, so a row's floats do not depend on the batch.
//
// Sparse (a lightning indexer's choice, DeepSeek sparse attention): each token attends only the
// positions listed for it, in their list's order: "slot" j of a row is position selected[j], and
// tiles and segments run over slots instead of positions. A block then takes Groups * 16 heads of
// one token (its rows share one list), the rows past the token's last head left empty.
#include <cuda_fp16.h>

#include "base/error.h"
#include "cuda/attention_tiles.cuh"
#include "cuda/common.cuh"

namespace bloomery::cuda {

namespace {

constexpr int kRows = 16;  // packed rows per group: one mma M
constexpr int kTile = 64;  // cache positions per tile and per segment
constexpr int kWarps = 4;  // a group's, each scoring kTile / kWarps positions, multiplying Rank / kWarps columns
constexpr int kGroupThreads = kWarps * kWarp;
constexpr int kBatchGroups = 4;  // a batch's groups per block (a decode step's: one)
constexpr int kPad = 8;          // halves after each shared row, so ldmatrix's eight row reads miss each other's banks
constexpr int kProbStride = kTile + kPad;

struct Params {
  const float* q_latent;  // [rows][rank]
  const float* q_rope;    // [rows][rope]
  const int32_t* positions;
  const uint16_t* cache;  // [positions][key_row]: [latent, rope] first
  int key_row;            // halves from one position's row to the next
  int n;
  int heads;
  // Sparse: each token's top_k positions (token t's at selected[t * top_k]); null: every position.
  const int32_t* selected;
  int top_k;
  float scale;
  bool block_per_segment;
  float2* stats;   // [segment][rows]: each row's maximum score and its exps' sum in the segment
  float* partial;  // [segment][rows][rank] with a block per segment
  float* out;      // [rows][rank]
};

template <int Rank, int Rope>
struct Shape {
  static constexpr int kKey = Rank + Rope;
  static constexpr int kStride = kKey + kPad;     // halves per shared query or cache row
  static constexpr int kSteps = kKey / 16;        // mma K steps over a key
  static constexpr int kColumns = Rank / kWarps;  // latent columns each warp multiplies
  static_assert(kKey % 16 == 0 && kColumns % 16 == 0, "whole mma tiles");
  static constexpr size_t shared_bytes(int groups) {
    return (groups * kRows + kTile) * kStride * sizeof(uint16_t) + groups * kRows * kProbStride * sizeof(uint16_t) +
           groups * kWarps * kRows * (sizeof(float) + sizeof(double));
  }
};

// Within a block of groups: the calling thread's group, and its warp within the group.
__device__ __forceinline__ int group_of_thread() { return static_cast<int>(threadIdx.x) / kGroupThreads; }
__device__ __forceinline__ int warp_in_group() { return static_cast<int>(threadIdx.x) % kGroupThreads / kWarp; }

// A group's view of the block's shared memory: its own queries, probabilities and reductions,
// and the tile all groups share.
struct SharedLayout {
  uint16_t* queries;
  uint16_t* tile;
  uint16_t* probs;
  float* warp_max;   // [warp][row]
  double* warp_sum;  // [warp][row]
};

template <int Rank, int Rope, int Groups>
__device__ SharedLayout shared_layout(uint8_t* base) {
  using S = Shape<Rank, Rope>;
  const int group = group_of_thread();
  double* warp_sums = reinterpret_cast<double*>(base);
  float* warp_maxes = reinterpret_cast<float*>(warp_sums + Groups * kWarps * kRows);
  uint16_t* queries = reinterpret_cast<uint16_t*>(warp_maxes + Groups * kWarps * kRows);
  SharedLayout l;
  l.warp_sum = warp_sums + group * kWarps * kRows;
  l.warp_max = warp_maxes + group * kWarps * kRows;
  l.queries = queries + group * kRows * S::kStride;
  l.tile = queries + Groups * kRows * S::kStride;
  l.probs = l.tile + kTile * S::kStride + group * kRows * kProbStride;
  return l;
}

__device__ __forceinline__ int segments_of(int length) { return (length + kTile - 1) / kTile; }

// The slots a token at `position` attends: the positions it sees, or at most top_k of them.
__device__ __forceinline__ int slots_at(const Params& p, int position) {
  return p.selected ? min(position + 1, p.top_k) : position + 1;
}

// Blocks per token of a sparse launch: groups * 16 of its heads each.
__host__ __device__ __forceinline__ int head_blocks(int heads, int groups) {
  return (heads + groups * kRows - 1) / (groups * kRows);
}

// Packed rows [first, end): the block's (first the block's, `Groups * 16` of the batch's, or with
// a sparse choice that many of one token's heads, end at its last head) or its group's (first
// the group's); `slots`: that token's list, or null.
struct RowSpan {
  int first, end;
  const int32_t* slots;
};

template <int Groups>
__device__ RowSpan block_span(const Params& p) {
  const int block = static_cast<int>(blockIdx.x);
  if (!p.selected) return {block * Groups * kRows, p.n * p.heads, nullptr};
  const int token = block / head_blocks(p.heads, Groups);
  const int first = token * p.heads + block % head_blocks(p.heads, Groups) * Groups * kRows;
  return {first, (token + 1) * p.heads, p.selected + static_cast<int64_t>(token) * p.top_k};
}

__device__ RowSpan group_span(const RowSpan& block) {
  return {block.first + group_of_thread() * kRows, block.end, block.slots};
}

// The last slot each of the group's rows attends (-1 for an empty row), for this thread's two
// mma rows; the slots the block's longest row sees; and the segments the block runs,
// [begin, end): with a block per segment, its own one (none where its rows end before it).
struct BlockRows {
  int limit[2];
  int length;
  int begin, end;
};

template <int Groups>
__device__ BlockRows block_rows(const Params& p, const RowSpan& block, const RowSpan& group) {
  __shared__ int longest;
  if (threadIdx.x == 0) longest = 0;
  __syncthreads();
  if (threadIdx.x < Groups * kRows && block.first + static_cast<int>(threadIdx.x) < block.end) {
    atomicMax(&longest, slots_at(p, p.positions[(block.first + threadIdx.x) / p.heads]));
  }
  __syncthreads();
  BlockRows b;
  for (int i = 0; i < 2; ++i) {
    const int row = group.first + static_cast<int>(threadIdx.x % kWarp) / 4 + 8 * i;
    b.limit[i] = row < group.end ? slots_at(p, p.positions[row / p.heads]) - 1 : -1;
  }
  b.length = longest;
  const int count = segments_of(longest);
  b.begin = p.block_per_segment ? static_cast<int>(blockIdx.z) : 0;
  b.end = p.block_per_segment ? min(b.begin + 1, count) : count;
  return b;
}

// The group's queries, rounded to f16, into its shared rows of [latent, rope].
template <int Rank, int Rope>
__device__ void stage_queries(const Params& p, const RowSpan& span, uint16_t* queries) {
  using S = Shape<Rank, Rope>;
  for (int i = threadIdx.x % kGroupThreads; i < kRows * S::kKey / 2; i += kGroupThreads) {
    const int r = i / (S::kKey / 2), c = i % (S::kKey / 2) * 2;
    const int row = span.first + r;
    float2 v = make_float2(0.0f, 0.0f);
    if (row < span.end) {
      v = c < Rank ? *reinterpret_cast<const float2*>(p.q_latent + static_cast<int64_t>(row) * Rank + c)
                   : *reinterpret_cast<const float2*>(p.q_rope + static_cast<int64_t>(row) * Rope + c - Rank);
    }
    *reinterpret_cast<uint32_t*>(queries + r * S::kStride + c) = pack_halves(v.x, v.y);
  }
}

// Copies the cache rows of slots [first, first + kTile) into `tile` (cp.async), zeros from slot
// `end` on: rows never written may hold NaN bit patterns, and 0 * NaN would reach the output.
// All of the block's threads take part.
template <int Rank, int Rope>
__device__ void load_tile(const Params& p, const RowSpan& span, int first, int end, uint16_t* tile) {
  using S = Shape<Rank, Rope>;
  constexpr int kPieces = S::kKey / 8;  // 16-byte pieces per row
  for (int i = threadIdx.x; i < kTile * kPieces; i += blockDim.x) {
    const int r = i / kPieces, c = i % kPieces * 8;
    const bool inside = first + r < end;
    const int position = inside ? (span.slots ? span.slots[first + r] : first + r) : 0;
    const uint16_t* source = p.cache + (inside ? static_cast<int64_t>(position) * p.key_row + c : 0);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_address(tile + r * S::kStride + c)),
                 "l"(source), "r"(inside ? 16 : 0)
                 : "memory");
  }
  wait_for_tiles();
  __syncthreads();
}

// The warp's scores: s[t][e] is row lane / 4 + 8 (e / 2) against position
// 16 warp + 8 t + 2 (lane % 4) + e % 2 of the tile, each the f32 product of its dot and the scale.
template <int Rank, int Rope>
__device__ void tile_scores(const SharedLayout& sh, float scale, float (&s)[2][4]) {
  using S = Shape<Rank, Rope>;
  const int lane = threadIdx.x % kWarp, warp = warp_in_group(), m = lane / 8;
  const uint16_t* a_base = sh.queries + (m % 2 * 8 + lane % 8) * S::kStride + m / 2 * 8;
  const uint16_t* b_base = sh.tile + (warp * 16 + m / 2 * 8 + lane % 8) * S::kStride + m % 2 * 8;
  s[0][0] = s[0][1] = s[0][2] = s[0][3] = s[1][0] = s[1][1] = s[1][2] = s[1][3] = 0.0f;
#pragma unroll 4
  for (int k = 0; k < S::kSteps; ++k) {
    uint32_t a[4], b[4];
    ldmatrix_x4(a, a_base + k * 16);
    ldmatrix_x4(b, b_base + k * 16);
    mma(s[0], a, b[0], b[1]);
    mma(s[1], a, b[2], b[3]);
  }
#pragma unroll
  for (int t = 0; t < 2; ++t) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[t][e] = __fmul_rn(s[t][e], scale);
  }
}

__device__ __forceinline__ int score_position(int first, int t, int e) {
  return first + warp_in_group() * 16 + t * 8 + threadIdx.x % 4 * 2 + e % 2;
}

// A segment's statistics of the block's rows: the maximum score and the exps' sum over the
// positions each row sees, reduced over the quad and then over the warps in warp order.
__device__ void segment_statistics(const SharedLayout& sh, const float (&s)[2][4], int first, const BlockRows& rows,
                                   float (&max)[2], double (&sum)[2]) {
  const int warp = warp_in_group(), lane = threadIdx.x % kWarp;
  for (int i = 0; i < 2; ++i) {
    float m = -INFINITY;
    for (int t = 0; t < 2; ++t) {
      for (int e = 2 * i; e < 2 * i + 2; ++e) {
        if (score_position(first, t, e) <= rows.limit[i]) m = fmaxf(m, s[t][e]);
      }
    }
    m = quad_max(m);
    if (lane % 4 == 0) sh.warp_max[warp * kRows + lane / 4 + 8 * i] = m;
  }
  __syncthreads();
  for (int i = 0; i < 2; ++i) {
    const int row = lane / 4 + 8 * i;
    max[i] = -INFINITY;
    for (int w = 0; w < kWarps; ++w) max[i] = fmaxf(max[i], sh.warp_max[w * kRows + row]);
    float part = 0.0f;
    if (max[i] != -INFINITY) {
      for (int t = 0; t < 2; ++t) {
        for (int e = 2 * i; e < 2 * i + 2; ++e) {
          if (score_position(first, t, e) <= rows.limit[i]) part = __fadd_rn(part, expf(__fsub_rn(s[t][e], max[i])));
        }
      }
    }
    double quad = static_cast<double>(part);
    quad = __dadd_rn(quad, __shfl_xor_sync(0xffffffffu, quad, 1));
    quad = __dadd_rn(quad, __shfl_xor_sync(0xffffffffu, quad, 2));
    if (lane % 4 == 0) sh.warp_sum[warp * kRows + row] = quad;
  }
  __syncthreads();
  for (int i = 0; i < 2; ++i) {
    sum[i] = 0.0;
    for (int w = 0; w < kWarps; ++w) sum[i] = __dadd_rn(sum[i], sh.warp_sum[w * kRows + lane / 4 + 8 * i]);
  }
  __syncthreads();
}

template <int Rank, int Rope, int Groups>
__global__ void __launch_bounds__(Groups* kGroupThreads) latent_stats_kernel(Params p) {
  extern __shared__ __align__(16) uint8_t shared[];
  const SharedLayout sh = shared_layout<Rank, Rope, Groups>(shared);
  wait_for_previous_kernel();
  const RowSpan block = block_span<Groups>(p), span = group_span(block);
  const BlockRows rows = block_rows<Groups>(p, block, span);
  if (rows.begin >= rows.end) return;
  stage_queries<Rank, Rope>(p, span, sh.queries);
  const int64_t stride = static_cast<int64_t>(p.n) * p.heads;
  for (int segment = rows.begin; segment < rows.end; ++segment) {
    const int first = segment * kTile;
    load_tile<Rank, Rope>(p, span, first, rows.length, sh.tile);
    float s[2][4];
    tile_scores<Rank, Rope>(sh, p.scale, s);
    float max[2];
    double sum[2];
    segment_statistics(sh, s, first, rows, max, sum);
    const int lane = threadIdx.x % kWarp;
    if (warp_in_group() == 0 && lane % 4 == 0) {
      for (int i = 0; i < 2; ++i) {
        const int row = span.first + lane / 4 + 8 * i;
        if (rows.limit[i] >= first) p.stats[segment * stride + row] = make_float2(max[i], static_cast<float>(sum[i]));
      }
    }
  }
}

// Each of the thread's rows' maximum over its segments and the inverse of its exp sum.
__device__ void softmax_scale(const Params& p, int first_row, const BlockRows& rows, float (&max)[2],
                              float (&inverse)[2]) {
  const int64_t stride = static_cast<int64_t>(p.n) * p.heads;
  for (int i = 0; i < 2; ++i) {
    const bool inside = rows.limit[i] >= 0;
    const float2* stats = p.stats + first_row + static_cast<int>(threadIdx.x % kWarp) / 4 + 8 * i;
    fold_segment_statistics(stats, stride, inside ? segments_of(rows.limit[i] + 1) : 0, -INFINITY, max[i], inverse[i]);
    if (!inside) max[i] = inverse[i] = 0.0f;
  }
}

// o += P V over a tile: the warp's probabilities p = exp(s - max) * inverse rounded to f16 go to
// shared memory; then each warp multiplies all 16 rows' probabilities by its columns of the
// latents (the tile's first Rank halves of each row).
template <int Rank, int Rope>
__device__ void add_tile_values(const SharedLayout& sh, const float (&s)[2][4], int first, const BlockRows& rows,
                                const float (&max)[2], const float (&inverse)[2],
                                float (&o)[Shape<Rank, Rope>::kColumns / 8][4]) {
  using S = Shape<Rank, Rope>;
  const int lane = threadIdx.x % kWarp, warp = warp_in_group(), m = lane / 8;
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    float pr[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = e / 2;
      pr[e] =
          score_position(first, t, e) <= rows.limit[i] ? __fmul_rn(expf(__fsub_rn(s[t][e], max[i])), inverse[i]) : 0.0f;
    }
    const int column = warp * 16 + t * 8 + lane % 4 * 2;
    *reinterpret_cast<uint32_t*>(sh.probs + (lane / 4) * kProbStride + column) = pack_halves(pr[0], pr[1]);
    *reinterpret_cast<uint32_t*>(sh.probs + (lane / 4 + 8) * kProbStride + column) = pack_halves(pr[2], pr[3]);
  }
  __syncthreads();
  const uint16_t* a_base = sh.probs + (m % 2 * 8 + lane % 8) * kProbStride + m / 2 * 8;
  const uint16_t* b_base = sh.tile + (m % 2 * 8 + lane % 8) * S::kStride + warp * S::kColumns + m / 2 * 8;
#pragma unroll
  for (int j = 0; j < kTile / 16; ++j) {
    uint32_t a[4];
    ldmatrix_x4(a, a_base + j * 16);
#pragma unroll
    for (int d = 0; d < S::kColumns / 8; d += 2) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, b_base + j * 16 * S::kStride + d * 8);
      mma(o[d], a, b[0], b[1]);
      mma(o[d + 1], a, b[2], b[3]);
    }
  }
  __syncthreads();
}

template <int Rank, int Rope, int Groups>
__global__ void __launch_bounds__(Groups* kGroupThreads) latent_values_kernel(Params p) {
  using S = Shape<Rank, Rope>;
  extern __shared__ __align__(16) uint8_t shared[];
  const SharedLayout sh = shared_layout<Rank, Rope, Groups>(shared);
  wait_for_previous_kernel();
  const RowSpan block = block_span<Groups>(p), span = group_span(block);
  const BlockRows rows = block_rows<Groups>(p, block, span);
  if (rows.begin >= rows.end) return;
  stage_queries<Rank, Rope>(p, span, sh.queries);
  float max[2], inverse[2];
  softmax_scale(p, span.first, rows, max, inverse);
  float total[S::kColumns / 8][4] = {};  // the segments' products, added in segment order
  for (int segment = rows.begin; segment < rows.end; ++segment) {
    const int first = segment * kTile;
    load_tile<Rank, Rope>(p, span, first, rows.length, sh.tile);
    float s[2][4];
    tile_scores<Rank, Rope>(sh, p.scale, s);
    float o[S::kColumns / 8][4] = {};
    add_tile_values<Rank, Rope>(sh, s, first, rows, max, inverse, o);
#pragma unroll
    for (int d = 0; d < S::kColumns / 8; ++d) {
#pragma unroll
      for (int e = 0; e < 4; ++e) total[d][e] = __fadd_rn(total[d][e], o[d][e]);
    }
  }
  const int64_t rows_total = static_cast<int64_t>(p.n) * p.heads;
  float* dest = p.block_per_segment ? p.partial + rows.begin * rows_total * Rank : p.out;
  const int lane = threadIdx.x % kWarp, warp = warp_in_group();
  for (int i = 0; i < 2; ++i) {
    if (rows.limit[i] < 0) continue;
    float* row =
        dest + (span.first + lane / 4 + 8 * i) * static_cast<int64_t>(Rank) + warp * S::kColumns + lane % 4 * 2;
#pragma unroll
    for (int d = 0; d < S::kColumns / 8; ++d) {
      *reinterpret_cast<float2*>(row + d * 8) = make_float2(total[d][2 * i], total[d][2 * i + 1]);
    }
  }
}

// Each output the sum of its row's segment products (sum_segments).
__global__ void latent_combine_kernel(Params p, int rank) {
  wait_for_previous_kernel();
  const int64_t rows = static_cast<int64_t>(p.n) * p.heads;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * rank) return;
  p.out[i] = sum_segments(p.partial, rows * rank, segments_of(slots_at(p, p.positions[i / rank / p.heads])), i);
}

int64_t cache_segments(int64_t cache_positions) { return (cache_positions + kTile - 1) / kTile; }

// The segments a decode step's grid covers: of the cache, or of a sparse choice's slots.
int64_t step_segments(const Params& p, int64_t cache_positions) {
  return cache_segments(p.selected ? std::min<int64_t>(cache_positions, p.top_k) : cache_positions);
}

size_t stats_bytes(int64_t rows, int64_t cache_positions) {
  return (static_cast<size_t>(cache_segments(cache_positions) * rows) * sizeof(float2) + 255) / 256 * 256;
}

template <int Rank, int Rope, int Groups>
void allow_shared_memory() {
  for (const void* kernel : {reinterpret_cast<const void*>(latent_stats_kernel<Rank, Rope, Groups>),
                             reinterpret_cast<const void*>(latent_values_kernel<Rank, Rope, Groups>)}) {
    cuda::allow_shared_memory(kernel, Shape<Rank, Rope>::shared_bytes(Groups), "latent attention's shared memory");
  }
}

template <int Rank, int Rope>
void allow_shared_memory() {
  allow_shared_memory<Rank, Rope, 1>();
  allow_shared_memory<Rank, Rope, kBatchGroups>();
}

template <int Rank, int Rope, int Groups>
void launch(const Params& p, int64_t cache_positions, cudaStream_t stream) {
  const size_t shared = Shape<Rank, Rope>::shared_bytes(Groups);
  const int64_t rows = static_cast<int64_t>(p.n) * p.heads, block_rows = Groups * kRows;
  const int64_t blocks =
      p.selected ? static_cast<int64_t>(p.n) * head_blocks(p.heads, Groups) : (rows + block_rows - 1) / block_rows;
  const dim3 grid(static_cast<unsigned>(blocks), 1,
                  static_cast<unsigned>(p.block_per_segment ? step_segments(p, cache_positions) : 1));
  launch_early(latent_stats_kernel<Rank, Rope, Groups>, grid, dim3(Groups * kGroupThreads), shared, stream, p);
  launch_early(latent_values_kernel<Rank, Rope, Groups>, grid, dim3(Groups * kGroupThreads), shared, stream, p);
}

template <int Rank, int Rope>
void launch(const Params& p, int64_t cache_positions, cudaStream_t stream) {
  if (p.block_per_segment) {
    launch<Rank, Rope, 1>(p, cache_positions, stream);
  } else {
    launch<Rank, Rope, kBatchGroups>(p, cache_positions, stream);
  }
}

}  // namespace

bool latent_attention_supports(int64_t rank, int64_t rope) {
  return (rank == 512 && rope == 64) || (rank == 128 && rope == 32);
}

void prepare_latent_attention(int64_t rank, int64_t rope) {
  if (rank == 512 && rope == 64) allow_shared_memory<512, 64>();
  if (rank == 128 && rope == 32) allow_shared_memory<128, 32>();
}

size_t latent_attention_scratch_bytes(int64_t heads, int64_t rank, int64_t cache_positions, int64_t max_rows) {
  // A decode step's block per segment needs the partial products; a batch only the statistics.
  const size_t decode = stats_bytes(heads, cache_positions) +
                        static_cast<size_t>(cache_segments(cache_positions) * heads * rank) * sizeof(float);
  return std::max(decode, stats_bytes(max_rows * heads, cache_positions));
}

void latent_attention(const LatentAttention& a, void* scratch, StreamHandle stream) {
  if (!latent_attention_supports(a.rank, a.rope)) {
    throw Error("UNSUPPORTED_MODEL",
                "GPU latent attention serves kv_lora_rank 512 with 64 rotary dims (and the tests' "
                "128 with 32), not " +
                    std::to_string(a.rank) + " with " + std::to_string(a.rope));
  }
  const int64_t key_row = a.key_row > 0 ? a.key_row : a.rank + a.rope;
  if (key_row < a.rank + a.rope || key_row % 8 != 0 || (a.selected && a.top_k < 1)) {
    throw Error("INVALID_ARGUMENT",
                "latent attention reads cache rows of a multiple of 8 halves holding the latent and "
                "rotary key, and a sparse choice of at least one position (rows of " +
                    std::to_string(key_row) + ", top_k " + std::to_string(a.top_k) + ")");
  }
  Params p;
  p.q_latent = a.q_latent;
  p.q_rope = a.q_rope;
  p.positions = a.positions;
  p.cache = a.cache;
  p.key_row = static_cast<int>(key_row);
  p.n = static_cast<int>(a.n);
  p.selected = a.selected;
  p.top_k = static_cast<int>(a.top_k);
  p.heads = static_cast<int>(a.heads);
  p.scale = a.scale;
  p.block_per_segment = a.n == 1;
  p.stats = static_cast<float2*>(scratch);
  p.partial = reinterpret_cast<float*>(static_cast<uint8_t*>(scratch) + stats_bytes(a.n * a.heads, a.cache_positions));
  p.out = a.out;
  const auto s = static_cast<cudaStream_t>(stream);
  if (a.rank == 512) {
    launch<512, 64>(p, a.cache_positions, s);
  } else {
    launch<128, 32>(p, a.cache_positions, s);
  }
  if (!p.block_per_segment) return;
  constexpr int kCombineThreads = 256;
  const int64_t rows = a.n * a.heads;
  launch_early(latent_combine_kernel, dim3(ceil_div(rows * a.rank, kCombineThreads)), dim3(kCombineThreads), 0, s, p,
               static_cast<int>(a.rank));
}

}  // namespace bloomery::cuda
