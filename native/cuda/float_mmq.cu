// Float weights (F16, BF16: gpt-oss's attention) against prompt batches, on the f16/bf16 tensor
// cores: a block takes a tile of 64 weight rows and 64 activation rows; step by step along the
// columns (64 at a time) it copies the weights to shared memory and the activations rounded to
// the weight type (as the float matvec and the CPU path round them), and each warp multiplies a
// 32 x 32 part with mma.sync m16n8k16 (exact products, f32 sums). The products are the matvec's;
// only the order of the f32 additions differs, and a row's sums run in one order whatever else
// is in the batch.
// Matrices of at most 64 rows (DeepSeek-V4's hyper-connection mixes: 24 rows of 16,384 columns)
// would make one block per 64 tokens walk every column: 4 blocks for a pass of 252 tokens, 0.5 ms
// a product on an H100. They take narrow blocks instead: 8 tokens each, whose 16 warps each sum a
// sixteenth of the columns straight from memory, then add their sums in warp order.
#include "base/error.h"
#include "cuda/attention_tiles.cuh"
#include "cuda/common.cuh"

namespace bloomery::cuda {

namespace {

constexpr int kTileRows = 64;                // weight rows per block
constexpr int kTileTokens = kMmqTileTokens;  // activation rows per block
constexpr int kStep = 64;                    // columns per step
constexpr int kStride = kStep + 8;           // halves per shared row, padded so ldmatrix's rows miss each other's banks
constexpr int kThreads = 128;                // four warps, 2 x 2 over the tile
constexpr int kWarpRows = 32, kWarpTokens = 32;
constexpr int kRowFragments = kWarpRows / 16, kTokenFragments = kWarpTokens / 8;

static_assert(kTileTokens == 2 * kWarpTokens && kTileRows == 2 * kWarpRows, "2 x 2 warps cover the tile");

// c += a b for a 16x16 A and a 16x8 B of the weight type (f16: attention_tiles.cuh's mma), f32 C.
template <uint32_t Type>
__device__ __forceinline__ void mma_of(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (Type == kTypeF16) {
    mma(c, a, b0, b1);
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two activations rounded to the weight type, packed as an mma operand.
template <uint32_t Type>
__device__ __forceinline__ uint32_t pack_operands(float lo, float hi) {
  if constexpr (Type == kTypeF16) {
    return pack_halves(lo, hi);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

template <uint32_t Type>
__global__ void __launch_bounds__(kThreads) float_mmq_kernel(const uint8_t* w, size_t row_bytes, int rows, int cols,
                                                             const float* x, int n, float* y, bool accumulate) {
  __shared__ __align__(16) uint16_t weights[kTileRows * kStride];
  __shared__ __align__(16) uint16_t activations[kTileTokens * kStride];
  const int first_row = blockIdx.x * kTileRows, first_token = blockIdx.y * kTileTokens;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, m = lane / 8;
  const int row0 = (warp / 2) * kWarpRows, token0 = (warp % 2) * kWarpTokens;
  float acc[kRowFragments][kTokenFragments][4] = {};
  wait_for_previous_kernel();  // the activations are the kernel before's output
  for (int k0 = 0; k0 < cols; k0 += kStep) {
    // Rows and tokens past the matrix's and the batch's repeat the last; their sums are dropped.
    for (int i = threadIdx.x; i < kTileRows * (kStep / 8); i += kThreads) {
      const int r = i / (kStep / 8), c = i % (kStep / 8) * 8;
      const int row = min(first_row + r, rows - 1);
      *reinterpret_cast<uint4*>(weights + r * kStride + c) =
          *reinterpret_cast<const uint4*>(w + static_cast<size_t>(row) * row_bytes + (k0 + c) * sizeof(uint16_t));
    }
    for (int i = threadIdx.x; i < kTileTokens * (kStep / 4); i += kThreads) {
      const int t = i / (kStep / 4), c = i % (kStep / 4) * 4;
      const int token = min(first_token + t, n - 1);
      const float4 v = *reinterpret_cast<const float4*>(x + static_cast<int64_t>(token) * cols + k0 + c);
      *reinterpret_cast<uint2*>(activations + t * kStride + c) =
          make_uint2(pack_operands<Type>(v.x, v.y), pack_operands<Type>(v.z, v.w));
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kStep; k += 16) {
      uint32_t a[kRowFragments][4];
#pragma unroll
      for (int f = 0; f < kRowFragments; ++f) {
        ldmatrix_x4(a[f], weights + (row0 + 16 * f + m % 2 * 8 + lane % 8) * kStride + m / 2 * 8 + k);
      }
#pragma unroll
      for (int t = 0; t < kTokenFragments; t += 2) {
        uint32_t b[4];
        ldmatrix_x4(b, activations + (token0 + (t + m / 2) * 8 + lane % 8) * kStride + m % 2 * 8 + k);
#pragma unroll
        for (int f = 0; f < kRowFragments; ++f) {
          mma_of<Type>(acc[f][t], a[f], b[0], b[1]);
          mma_of<Type>(acc[f][t + 1], a[f], b[2], b[3]);
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int f = 0; f < kRowFragments; ++f) {
#pragma unroll
    for (int t = 0; t < kTokenFragments; ++t) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = first_row + row0 + 16 * f + lane / 4 + 8 * (e / 2);
        const int token = first_token + token0 + 8 * t + 2 * (lane % 4) + e % 2;
        if (row >= rows || token >= n) continue;
        float* out = y + static_cast<int64_t>(token) * rows + row;
        *out = accumulate ? *out + acc[f][t][e] : acc[f][t][e];
      }
    }
  }
}

constexpr int kNarrowWarps = 16;
constexpr int kNarrowThreads = kNarrowWarps * kWarp;
constexpr int kNarrowTokens = 8;  // one mma's n
constexpr int kNarrowUnroll = 4;  // k16 steps whose loads are in flight together

// The a operand of m16n8k16 (16 weight rows x 16 columns from column k) read from the matrix:
// rows past the matrix's repeat its last, their sums dropped.
__device__ __forceinline__ void load_rows(const uint8_t* w, size_t row_bytes, int rows, int row0, int k, int lane,
                                          uint32_t (&a)[4]) {
  const int r = lane / 4, c = k + 2 * (lane % 4);
  const uint8_t* top = w + static_cast<size_t>(min(row0 + r, rows - 1)) * row_bytes;
  const uint8_t* bottom = w + static_cast<size_t>(min(row0 + r + 8, rows - 1)) * row_bytes;
  a[0] = __ldg(reinterpret_cast<const uint32_t*>(top + c * sizeof(uint16_t)));
  a[1] = __ldg(reinterpret_cast<const uint32_t*>(bottom + c * sizeof(uint16_t)));
  a[2] = __ldg(reinterpret_cast<const uint32_t*>(top + (c + 8) * sizeof(uint16_t)));
  a[3] = __ldg(reinterpret_cast<const uint32_t*>(bottom + (c + 8) * sizeof(uint16_t)));
}

// RowFragments x 16 weight rows (at most 64) against 8 tokens a block. Warp v sums the columns of
// its sixteenth of the matrix's k16 steps (a split that depends on the columns only, so a token's
// sums are the same in any batch); the block then adds the warps' sums in warp order.
template <uint32_t Type, int RowFragments>
__global__ void __launch_bounds__(kNarrowThreads)
    float_mmq_narrow_kernel(const uint8_t* w, size_t row_bytes, int rows, int cols, const float* x, int n, float* y,
                            bool accumulate) {
  __shared__ float sums[kNarrowWarps][RowFragments * 4][kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int first_token = blockIdx.x * kNarrowTokens;
  const int steps = cols / 16, begin = warp * steps / kNarrowWarps, end = (warp + 1) * steps / kNarrowWarps;
  // This lane's token in the b operand (tokens past the batch repeat the last; their sums are dropped).
  const float* xt = x + static_cast<int64_t>(min(first_token + lane / 4, n - 1)) * cols + 2 * (lane % 4);
  float acc[RowFragments][4] = {};
  wait_for_previous_kernel();  // the activations are the kernel before's output
  int s = begin;
  for (; s + kNarrowUnroll <= end; s += kNarrowUnroll) {
    uint32_t a[kNarrowUnroll][RowFragments][4];
    float2 lo[kNarrowUnroll], hi[kNarrowUnroll];
#pragma unroll
    for (int u = 0; u < kNarrowUnroll; ++u) {
      const int k = (s + u) * 16;
      lo[u] = *reinterpret_cast<const float2*>(xt + k);
      hi[u] = *reinterpret_cast<const float2*>(xt + k + 8);
#pragma unroll
      for (int f = 0; f < RowFragments; ++f) load_rows(w, row_bytes, rows, 16 * f, k, lane, a[u][f]);
    }
#pragma unroll
    for (int u = 0; u < kNarrowUnroll; ++u) {
      const uint32_t b0 = pack_operands<Type>(lo[u].x, lo[u].y), b1 = pack_operands<Type>(hi[u].x, hi[u].y);
#pragma unroll
      for (int f = 0; f < RowFragments; ++f) mma_of<Type>(acc[f], a[u][f], b0, b1);
    }
  }
  for (; s < end; ++s) {
    const int k = s * 16;
    const float2 lo = *reinterpret_cast<const float2*>(xt + k), hi = *reinterpret_cast<const float2*>(xt + k + 8);
    const uint32_t b0 = pack_operands<Type>(lo.x, lo.y), b1 = pack_operands<Type>(hi.x, hi.y);
#pragma unroll
    for (int f = 0; f < RowFragments; ++f) {
      uint32_t a[4];
      load_rows(w, row_bytes, rows, 16 * f, k, lane, a);
      mma_of<Type>(acc[f], a, b0, b1);
    }
  }
#pragma unroll
  for (int f = 0; f < RowFragments; ++f) {
#pragma unroll
    for (int e = 0; e < 4; ++e) sums[warp][f * 4 + e][lane] = acc[f][e];
  }
  __syncthreads();
  // Thread i adds up element i / 32 of lane i % 32's fragments.
  if (threadIdx.x >= RowFragments * 4 * kWarp) return;
  const int element = threadIdx.x / kWarp, owner = threadIdx.x % kWarp;
  const int f = element / 4, e = element % 4;
  float sum = 0.0f;
  for (int v = 0; v < kNarrowWarps; ++v) sum += sums[v][element][owner];
  const int row = 16 * f + owner / 4 + 8 * (e / 2);
  const int token = first_token + 2 * (owner % 4) + e % 2;
  if (row >= rows || token >= n) return;
  float* out = y + static_cast<int64_t>(token) * rows + row;
  *out = accumulate ? *out + sum : sum;
}

template <uint32_t Type>
void launch_narrow(const DeviceMatrix& w, const float* x, int64_t n, float* y, bool accumulate, cudaStream_t stream) {
  const auto kernel = w.rows <= 32 ? float_mmq_narrow_kernel<Type, 2> : float_mmq_narrow_kernel<Type, 4>;
  launch_early(kernel, dim3(ceil_div(n, kNarrowTokens)), dim3(kNarrowThreads), 0, stream, w.data, w.row_bytes,
               static_cast<int>(w.rows), static_cast<int>(w.cols), x, static_cast<int>(n), y, accumulate);
}

}  // namespace

bool float_mmq_serves(const DeviceMatrix& w) {
  return (w.type == kTypeF16 || w.type == kTypeBF16) && w.cols % kStep == 0 &&
         w.row_bytes == static_cast<size_t>(w.cols) * sizeof(uint16_t);
}

void float_mmq(const DeviceMatrix& w, const float* x, int64_t n, float* y, bool accumulate, StreamHandle stream) {
  if (!float_mmq_serves(w)) {
    throw Error("INVALID_ARGUMENT", "the float tiles take F16 or BF16 rows of a multiple of " + std::to_string(kStep) +
                                        " columns, not type " + std::to_string(w.type) + " of " +
                                        std::to_string(w.cols));
  }
  if (n == 0) return;
  if (w.rows <= kTileRows) {
    const auto cuda_stream = static_cast<cudaStream_t>(stream);
    w.type == kTypeF16 ? launch_narrow<kTypeF16>(w, x, n, y, accumulate, cuda_stream)
                       : launch_narrow<kTypeBF16>(w, x, n, y, accumulate, cuda_stream);
    return;
  }
  const dim3 grid(ceil_div(w.rows, kTileRows), ceil_div(n, kTileTokens));
  const auto kernel = w.type == kTypeF16 ? float_mmq_kernel<kTypeF16> : float_mmq_kernel<kTypeBF16>;
  launch_early(kernel, grid, dim3(kThreads), 0, static_cast<cudaStream_t>(stream), w.data, w.row_bytes,
               static_cast<int>(w.rows), static_cast<int>(w.cols), x, static_cast<int>(n), y, accumulate);
}

}  // namespace bloomery::cuda
