// DeepSeek-V4's compressed attention for prompts, on tensor cores (f16 mma.sync m16n8k16, f32
// accumulators). Every query head of a token reads the same cells (one key head whose keys are
// its values: cuda/compressed_cells.cuh), so a block takes one token and 64 of its heads and reads
// each cell's row once for all of them; compressed_attention.cu's blocks of 4 heads read every row
// 16 times for V4-Flash's 64 heads (15.4 ms of a 252-token pass's 77.5 ms on an H100). Its 16
// warps walk the cells in chunks of 32, twice, as that kernel does: first each head's maximum
// score and exp sum, then the weights, normalized and rounded to f16, times the rows. Each warp
// scores a 16-head by 8-cell tile of a chunk against the whole row, and multiplies a 16-head tile's
// weights by a quarter of the row's columns. The roundings are that kernel's and the CPU's
// (queries and weights rounded to f16, the exps as libm's, the sums in double); the f32 additions
// of the scores and of the weighted sums run in the mma's order, the same whatever the batch.
#include <cuda_fp16.h>

#include "base/error.h"
#include "cuda/attention_tiles.cuh"
#include "cuda/common.cuh"
#include "cuda/compressed_cells.cuh"

namespace bloomery::cuda {

namespace {

constexpr int kHeads = 64;  // query heads a block: four mma M tiles
constexpr int kHeadTiles = kHeads / 16;
constexpr int kCells = 32;  // cells a chunk: one a lane where a warp folds a head's scores
constexpr int kWarps = 16;
constexpr int kThreads = kWarps * kWarp;
constexpr int kColumnGroups = kWarps / kHeadTiles;  // warps that share a head tile's weighted sum, by columns
constexpr int kMaxDim = 512;
constexpr int kMaxFragments = kMaxDim / kColumnGroups / 8;  // a warp's n fragments of 8 columns at most
constexpr int kPad = 8;  // halves after each shared row, so ldmatrix's eight row reads miss each other's banks
constexpr int kScoreStride = kCells + 1;
constexpr int kWeightStride = kCells + kPad;
// From this many tokens a pass takes these blocks (fewer take compressed_attention.cu's).
constexpr int64_t kMinTokens = 16;

static_assert(kCells == kWarp, "a lane folds one cell's score");
static_assert(kHeadTiles * (kCells / 8) == kWarps, "each warp scores one 16 x 8 tile of a chunk");
static_assert(kHeads % kWarps == 0, "the warps fold the heads' statistics evenly");

// Shared memory for heads of `d` columns: the statistics, then the 16-byte-aligned f16 rows.
struct Layout {
  double* sums;              // [kHeads]: each head's exp sum
  float* maxima;             // [kHeads]
  float* inverses;           // [kHeads]: 1 / the head's sum, as a float
  float* scores;             // [kHeads][kScoreStride]: the chunk's, -inf where a cell holds no row
  const uint16_t** sources;  // [kCells]: the chunk's rows, null where masked or past the last
  uint16_t* queries;         // [kHeads][d + kPad]
  uint16_t* rows;            // [kCells][d + kPad]: zeros where a cell holds no row
  uint16_t* weights;         // [kHeads][kWeightStride]
};

constexpr size_t kStatisticsBytes =
    kHeads * (sizeof(double) + 2 * sizeof(float) + kScoreStride * sizeof(float)) + kCells * sizeof(const uint16_t*);
static_assert(kStatisticsBytes % 16 == 0, "the f16 rows start 16-byte aligned");

constexpr size_t shared_bytes(int64_t d) {
  return kStatisticsBytes +
         sizeof(uint16_t) * static_cast<size_t>((kHeads + kCells) * (d + kPad) + kHeads * kWeightStride);
}

__device__ Layout layout_of(uint8_t* base, int d) {
  Layout l;
  l.sums = reinterpret_cast<double*>(base);
  l.maxima = reinterpret_cast<float*>(l.sums + kHeads);
  l.inverses = l.maxima + kHeads;
  l.scores = l.inverses + kHeads;
  l.sources = reinterpret_cast<const uint16_t**>(l.scores + kHeads * kScoreStride);
  l.queries = reinterpret_cast<uint16_t*>(base + kStatisticsBytes);
  l.rows = l.queries + kHeads * (d + kPad);
  l.weights = l.rows + kCells * (d + kPad);
  return l;
}

// Copies the rows of cells [first, first + kCells) into l.rows (cp.async), zeros for a masked
// cell or one past the last: rows never written may hold NaN bit patterns, and 0 * NaN would
// reach the output.
__device__ void load_rows(const CompressedAttention& a, const Cells& c, int first, int d, const Layout& l) {
  if (threadIdx.x < kCells) {
    const int cell = first + static_cast<int>(threadIdx.x);
    l.sources[threadIdx.x] = cell < c.count() ? cell_row(a, c, cell) : nullptr;
  }
  __syncthreads();
  const int pieces = d / 8;  // 16-byte pieces a row
  for (int i = threadIdx.x; i < kCells * pieces; i += kThreads) {
    const int r = i / pieces, column = i % pieces * 8;
    const uint16_t* source = l.sources[r];
    asm volatile(
        "cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_address(l.rows + r * (d + kPad) + column)),
        "l"(source ? source + column : a.raw), "r"(source ? 16 : 0)
        : "memory");
  }
  wait_for_tiles();
  __syncthreads();
}

// The warp's tile of the chunk's scaled scores into l.scores: heads 16 (warp % 4) .. + 16 against
// cells 8 (warp / 4) .. + 8, over the whole row, 32 columns a step.
__device__ void chunk_scores(const CompressedAttention& a, const Layout& l, int d) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, m = lane / 8;
  const int head0 = 16 * (warp % kHeadTiles), cell0 = 8 * (warp / kHeadTiles), stride = d + kPad;
  const uint16_t* a_base = l.queries + (head0 + m % 2 * 8 + lane % 8) * stride + m / 2 * 8;
  const uint16_t* b_base = l.rows + (cell0 + lane % 8) * stride + m * 8;
  float s[4] = {};
  for (int k = 0; k < d; k += 32) {
    uint32_t low[4], high[4], b[4];
    ldmatrix_x4(b, b_base + k);  // b[0], b[1]: columns k .. k + 15; b[2], b[3]: the next 16
    ldmatrix_x4(low, a_base + k);
    ldmatrix_x4(high, a_base + k + 16);
    mma(s, low, b[0], b[1]);
    mma(s, high, b[2], b[3]);
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int head = head0 + lane / 4 + 8 * (e / 2), cell = cell0 + 2 * (lane % 4) + e % 2;
    l.scores[head * kScoreStride + cell] = l.sources[cell] ? __fmul_rn(s[e], a.scale) : -INFINITY;
  }
  __syncthreads();
}

// Folds the chunk's scores into each head's maximum and exp sum (warp w takes heads 4w .. 4w + 3).
__device__ void fold_chunk(const Layout& l) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  for (int h = warp * (kHeads / kWarps); h < (warp + 1) * (kHeads / kWarps); ++h) {
    const float score = l.scores[h * kScoreStride + lane];
    float chunk_max = score;
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, offset));
    }
    const float old_max = l.maxima[h], new_max = fmaxf(old_max, chunk_max);
    double part = new_max == -INFINITY ? 0.0 : static_cast<double>(exp_as_libm(__fsub_rn(score, new_max)));
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset /= 2) part += __shfl_xor_sync(0xffffffffu, part, offset);
    if (lane == 0) {
      const double rescale = old_max == -INFINITY ? 0.0 : exp(static_cast<double>(old_max) - new_max);
      l.sums[h] = __dadd_rn(l.sums[h] * rescale, part);
      l.maxima[h] = new_max;
    }
    __syncwarp();
  }
  __syncthreads();
}

// The chunk's weights, exp(score - max) / sum rounded to f16, into l.weights.
__device__ void chunk_weights(const Layout& l) {
  for (int i = threadIdx.x; i < kHeads * kCells; i += kThreads) {
    const int h = i / kCells, cell = i % kCells;
    const float s = l.scores[h * kScoreStride + cell];
    const float w = s == -INFINITY ? 0.0f : __fmul_rn(exp_as_libm(__fsub_rn(s, l.maxima[h])), l.inverses[h]);
    l.weights[h * kWeightStride + cell] = __half_as_ushort(__float2half(w));
  }
  __syncthreads();
}

// acc[f][e] += the chunk's weights times its rows: head 16 (warp % 4) + lane / 4 + 8 (e / 2),
// column (warp / 4) d / 4 + 8 f + 2 (lane % 4) + e % 2.
__device__ void add_weighted_rows(const Layout& l, int d, float (&acc)[kMaxFragments][4]) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, m = lane / 8;
  const int head0 = 16 * (warp % kHeadTiles), columns = d / kColumnGroups, column0 = (warp / kHeadTiles) * columns;
  const int stride = d + kPad;
#pragma unroll
  for (int k = 0; k < kCells; k += 16) {
    uint32_t a[4];
    ldmatrix_x4(a, l.weights + (head0 + m % 2 * 8 + lane % 8) * kWeightStride + k + m / 2 * 8);
#pragma unroll
    for (int f = 0; f < kMaxFragments; f += 2) {
      if (8 * f >= columns) break;
      uint32_t b[4];
      ldmatrix_x4_trans(b, l.rows + (k + m % 2 * 8 + lane % 8) * stride + column0 + (f + m / 2) * 8);
      mma(acc[f], a, b[0], b[1]);
      mma(acc[f + 1], a, b[2], b[3]);
    }
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads, 1) compressed_tiles_kernel(CompressedAttention a) {
  extern __shared__ __align__(16) uint8_t shared[];
  const int d = static_cast<int>(a.head_dim);
  const Layout l = layout_of(shared, d);
  const int token = static_cast<int>(blockIdx.x), first_head = static_cast<int>(blockIdx.y) * kHeads;
  const int heads = static_cast<int>(a.heads), stride = d + kPad;
  wait_for_previous_kernel();
  const Cells c = cells_of(a, token);
  // The block's queries rounded to f16, as the CPU rounds them for the dot (zeros past the last head).
  for (int i = threadIdx.x; i < kHeads * d / 2; i += kThreads) {
    const int h = i / (d / 2), j = i % (d / 2) * 2;
    float2 v = make_float2(0.0f, 0.0f);
    if (first_head + h < heads) {
      v = *reinterpret_cast<const float2*>(a.q + (static_cast<int64_t>(token) * heads + first_head + h) * d + j);
    }
    *reinterpret_cast<uint32_t*>(l.queries + h * stride + j) = pack_halves(v.x, v.y);
  }
  if (threadIdx.x < kHeads) {
    l.maxima[threadIdx.x] = -INFINITY;
    l.sums[threadIdx.x] = 0.0;
  }
  __syncthreads();
  for (int first = 0; first < c.count(); first += kCells) {
    load_rows(a, c, first, d, l);
    chunk_scores(a, l, d);
    fold_chunk(l);
  }
  if (threadIdx.x < kHeads) {
    const int h = static_cast<int>(threadIdx.x);
    if (a.sinks && first_head + h < heads) {
      const float sink = a.sinks[first_head + h], old_max = l.maxima[h];
      const float new_max = fmaxf(old_max, sink);
      const double rescale = old_max == -INFINITY ? 0.0 : exp(static_cast<double>(old_max) - new_max);
      l.sums[h] = l.sums[h] * rescale + static_cast<double>(exp_as_libm(__fsub_rn(sink, new_max)));
      l.maxima[h] = new_max;
    }
    l.inverses[h] = static_cast<float>(1.0 / l.sums[h]);
  }
  __syncthreads();
  float acc[kMaxFragments][4] = {};
  for (int first = 0; first < c.count(); first += kCells) {
    // A token of one chunk keeps its rows and scores from the first walk.
    if (c.count() > kCells) {
      load_rows(a, c, first, d, l);
      chunk_scores(a, l, d);
    }
    chunk_weights(l);
    add_weighted_rows(l, d, acc);
  }
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int columns = d / kColumnGroups, column0 = (warp / kHeadTiles) * columns;
#pragma unroll
  for (int f = 0; f < kMaxFragments; ++f) {
    if (8 * f >= columns) break;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int head = first_head + 16 * (warp % kHeadTiles) + lane / 4 + 8 * half;
      if (head >= heads) continue;
      const int column = column0 + 8 * f + 2 * (lane % 4);
      *reinterpret_cast<float2*>(a.out + (static_cast<int64_t>(token) * heads + head) * d + column) =
          make_float2(acc[f][2 * half], acc[f][2 * half + 1]);
    }
  }
}

}  // namespace

bool compressed_tiles_serve(const CompressedAttention& a) {
  return a.n >= kMinTokens && a.head_dim % 64 == 0 && a.head_dim <= kMaxDim && a.raw_row % 8 == 0 &&
         (a.ratio == 0 || a.compressed_stride % 8 == 0);
}

void prepare_compressed_attention() {
  allow_shared_memory(reinterpret_cast<const void*>(compressed_tiles_kernel), shared_bytes(kMaxDim),
                      "compressed attention's shared memory");
}

void compressed_attention_tiles(const CompressedAttention& a, StreamHandle stream) {
  const dim3 grid(static_cast<unsigned>(a.n), ceil_div(a.heads, kHeads));
  launch_early(compressed_tiles_kernel, grid, dim3(kThreads), shared_bytes(a.head_dim),
               static_cast<cudaStream_t>(stream), a);
}

}  // namespace bloomery::cuda
