// Quantized matrix-matrix products for prompt batches, on the integer tensor cores: a block
// takes a tile of 64 weight rows and 64 activation rows; step by step along the columns (128
// values at a time) it decodes the weights to int8 codes and their scales in shared memory,
// copies the activations' codes beside them, and each warp multiplies a 32 x 32 part with
// mma.sync (int8 x int8 -> int32 per block of 32 values, or of 16 where a type scales per
// 16), then adds each block's integer sum times its weight and activation scales in f32.
// The integer sums are those of the matvec kernels (same codes, same blocks); only the order
// of the f32 additions differs. Every type with integer dots has a decoder: the K-quants
// with layouts that a step reads in wide loads have their own, the others go through the
// matvec's 16-weight units (cuda/unit_decode.cuh). The same kernel serves dense matrices (tiles of consecutive
// rows) and expert stacks (tiles of the rows routed to one expert, from moe.cu's grouping).
#include <cstddef>

#include "base/error.h"
#include "cuda/unit_decode.cuh"

namespace bloomery::cuda {

namespace {

constexpr int kTileRows = 64;                // weight rows per block
constexpr int kTileTokens = kMmqTileTokens;  // activation rows per block
constexpr int kStep = 128;                   // values per step along the columns
constexpr int kStepBlocks = kStep / 32;      // blocks of 32 per step
constexpr int kStepInts = kStep / 4;         // int8 codes packed four to an int
constexpr int kStride = kStepInts + 4;       // ints per row in shared memory, padded against bank conflicts
constexpr int kPieces = 4;                   // decode units per row and step
constexpr int kThreads = 128;                // four warps, 2 x 2 over the tile
constexpr int kWarpRows = 32, kWarpTokens = 32;
constexpr int kRowFragments = kWarpRows / 16, kTokenFragments = kWarpTokens / 8;

static_assert(kTileTokens == 2 * kWarpTokens && kTileRows == 2 * kWarpRows, "2 x 2 warps cover the tile");

// One step of a weight tile: 128 int8 codes per row, worth scale * code - min, with a scale
// and, for types with mins, a min per group of 32 or 16 codes (per 32, four of each are used).
struct alignas(16) WeightTile {
  int codes[kTileRows][kStride];
  float scales[kTileRows][2 * kStepBlocks];
  float mins[kTileRows][2 * kStepBlocks];
};

// One step of an activation tile: the codes and the scale of each block of 32 and, for the
// mins, its scaled code sum (d times the sum of its codes) and that of each of its halves.
struct alignas(16) ActivationTile {
  int codes[kTileTokens][kStride];
  float d[kTileTokens][kStepBlocks];
  float sums[kTileTokens][kStepBlocks];
  float half_sums[kTileTokens][2 * kStepBlocks];
};

__device__ __forceinline__ void store4(int* to, int a, int b, int c, int d) {
  *reinterpret_cast<int4*>(to) = make_int4(a, b, c, d);
}

// An integer sum of int8 products (|i| < 2^22) as a float, exactly: through the bits of
// 1.5 * 2^23 + i, since int-to-float conversions issue at a fraction of the rate of float adds.
__device__ __forceinline__ float exact_float(int i) { return __int_as_float(0x4B400000 + i) - 12582912.0f; }

// A weight type's decoder: `piece` (0..3) of step `step` of a row writes its share of the
// row's 32 code ints (block b of 32 values at ints 8b..8b+7), scales and mins. kGroup says how
// many codes share a scale and a min (scales[q] covers codes 16q.. for 16, 32q.. for 32).
//
// This one serves every type through its units: piece p takes block 4 step + p, units
// 8 step + 2p and 8 step + 2p + 1. Types of 32-weight blocks have a scale per 32; the others
// are taken per 16, the finest any of them scales by. Past the row's `blocks` (a width not a
// multiple of 128), zeros.
template <uint32_t Type>
struct Decoder {
  static constexpr int kGroup = has_blocks_of_32(Type) ? 32 : 16;
  static constexpr bool kMins = has_block_offsets(Type) || has_code_mins(Type);
  __device__ static void piece(const uint8_t* row, int step, int p, int blocks, int* codes, float* scales,
                               float* mins) {
    const int block = kStepBlocks * step + p;
    Unit first{}, second{};
    if (block < blocks) {
      first = decode_unit<Type>(row, 2 * block);
      second = decode_unit<Type>(row, 2 * block + 1);
    }
    store4(codes + 8 * p, first.q[0], first.q[1], first.q[2], first.q[3]);
    store4(codes + 8 * p + 4, second.q[0], second.q[1], second.q[2], second.q[3]);
    if constexpr (kGroup == 32) {
      scales[p] = first.scale;
      if constexpr (kMins) mins[p] = first.min;
    } else {
      scales[2 * p] = first.scale;
      scales[2 * p + 1] = second.scale;
      if constexpr (kMins) {
        mins[2 * p] = first.min;
        mins[2 * p + 1] = second.min;
      }
    }
  }
};

template <>
struct Decoder<kTypeQ4_K> {
  static constexpr int kGroup = 32;
  static constexpr bool kMins = true;
  // Sub-blocks 4h..4h+3 of super-block step / 2 (h = step % 2): qs bytes 64h + 32i .. hold
  // sub-block 2i in their low nibbles and 2i + 1 in their high ones. Piece p takes the 16
  // bytes 64h + 16p, and the scale and min of sub-block 4h + p.
  __device__ static void piece(const uint8_t* row, int step, int p, int, int* codes, float* scales, float* mins) {
    const uint8_t* b = row + (step / 2) * sizeof(BlockQ4_K);
    const int h = step % 2;
    const int4 raw = *reinterpret_cast<const int4*>(b + offsetof(BlockQ4_K, qs) + 64 * h + 16 * p);
    const int low = 8 * (2 * (p / 2)) + 4 * (p % 2);
    store4(codes + low, raw.x & 0x0f0f0f0f, raw.y & 0x0f0f0f0f, raw.z & 0x0f0f0f0f, raw.w & 0x0f0f0f0f);
    store4(codes + low + 8, (raw.x >> 4) & 0x0f0f0f0f, (raw.y >> 4) & 0x0f0f0f0f, (raw.z >> 4) & 0x0f0f0f0f,
           (raw.w >> 4) & 0x0f0f0f0f);
    const uint8_t* s = b + offsetof(BlockQ4_K, scales);
    const int j = 4 * h + p;
    scales[p] = half_at(b + offsetof(BlockQ4_K, d)) * static_cast<float>(k4_scale(s, j));
    mins[p] = half_at(b + offsetof(BlockQ4_K, dmin)) * static_cast<float>(k4_min(s, j));
  }
};

template <>
struct Decoder<kTypeQ6_K> {
  static constexpr int kGroup = 16;
  static constexpr bool kMins = false;
  // Half h = step % 2 of super-block step / 2: element 128h + 32t + l has its low four bits
  // in ql[64h + 32 (t & 1) + l] (high nibble for t >= 2), its high two in qh[32h + l] at 2t,
  // and the scale scales[8h + 2t + l / 16]. Piece p takes l = 8p .. 8p + 7 of all four t,
  // and the scales 2p, 2p + 1 of the half.
  __device__ static void piece(const uint8_t* row, int step, int p, int, int* codes, float* scales, float*) {
    const uint8_t* b = row + (step / 2) * sizeof(BlockQ6_K);
    const int h = step % 2;
    const uint8_t* ql = b + offsetof(BlockQ6_K, ql) + 64 * h + 8 * p;
    const uint8_t* qh = b + offsetof(BlockQ6_K, qh) + 32 * h + 8 * p;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int low_half = load_int_aligned2(ql + 4 * i);
      const int high_half = load_int_aligned2(ql + 32 + 4 * i);
      const int high_bits = load_int_aligned2(qh + 4 * i);
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const int low = ((t & 1 ? high_half : low_half) >> (4 * (t >> 1))) & 0x0f0f0f0f;
        const int high = ((high_bits >> (2 * t)) & 0x03030303) << 4;
        codes[8 * t + 2 * p + i] = static_cast<int>(__vsub4(static_cast<unsigned>(low | high), 0x20202020u));
      }
    }
    const float d = half_at(b + offsetof(BlockQ6_K, d));
    const auto* s = reinterpret_cast<const int8_t*>(b + offsetof(BlockQ6_K, scales)) + 8 * h;
    scales[2 * p] = d * static_cast<float>(s[2 * p]);
    scales[2 * p + 1] = d * static_cast<float>(s[2 * p + 1]);
  }
};

template <>
struct Decoder<kTypeQ5_K> {
  static constexpr int kGroup = 32;
  static constexpr bool kMins = true;
  // Q4_K's layout (above) with a fifth bit: that of weight l of sub-block j is bit j of qh[l].
  // Piece p's 16 bytes of qs hold weights l = 16 (p % 2) .. of sub-block 4h + 2 (p / 2) in their
  // low nibbles and of the next in their high ones; their fifth bits are qh[16 (p % 2) ..].
  __device__ static void piece(const uint8_t* row, int step, int p, int, int* codes, float* scales, float* mins) {
    const uint8_t* b = row + (step / 2) * sizeof(BlockQ5_K);
    const int h = step % 2;
    const int4 raw = *reinterpret_cast<const int4*>(b + offsetof(BlockQ5_K, qs) + 64 * h + 16 * p);
    const int4 high = *reinterpret_cast<const int4*>(b + offsetof(BlockQ5_K, qh) + 16 * (p % 2));
    const int j = 4 * h + 2 * (p / 2);
    const auto fifth = [](int bits, int sub_block) { return ((bits >> sub_block) & 0x01010101) << 4; };
    const int low = 8 * (2 * (p / 2)) + 4 * (p % 2);
    store4(codes + low, (raw.x & 0x0f0f0f0f) | fifth(high.x, j), (raw.y & 0x0f0f0f0f) | fifth(high.y, j),
           (raw.z & 0x0f0f0f0f) | fifth(high.z, j), (raw.w & 0x0f0f0f0f) | fifth(high.w, j));
    store4(codes + low + 8, ((raw.x >> 4) & 0x0f0f0f0f) | fifth(high.x, j + 1),
           ((raw.y >> 4) & 0x0f0f0f0f) | fifth(high.y, j + 1), ((raw.z >> 4) & 0x0f0f0f0f) | fifth(high.z, j + 1),
           ((raw.w >> 4) & 0x0f0f0f0f) | fifth(high.w, j + 1));
    const uint8_t* s = b + offsetof(BlockQ5_K, scales);
    scales[p] = half_at(b + offsetof(BlockQ5_K, d)) * static_cast<float>(k4_scale(s, 4 * h + p));
    mins[p] = half_at(b + offsetof(BlockQ5_K, dmin)) * static_cast<float>(k4_min(s, 4 * h + p));
  }
};

template <>
struct Decoder<kTypeQ3_K> {
  static constexpr int kGroup = 16;
  static constexpr bool kMins = false;
  // Half h = step % 2 of super-block step / 2: element 128h + 32t + l has its two low bits at 2t
  // in qs[32h + l] and its third (set: no -4) at 4h + t in hmask[l], and the scale of sub-block
  // 8h + 2t + l / 16. Piece p takes l = 8p .. 8p + 7 of all four t, and the scales 2p, 2p + 1
  // of the half (the codes are the matvec's, cuda/matvec.cu).
  __device__ static void piece(const uint8_t* row, int step, int p, int, int* codes, float* scales, float*) {
    const uint8_t* b = row + (step / 2) * sizeof(BlockQ3_K);
    const int h = step % 2;
    const uint8_t* qs = b + offsetof(BlockQ3_K, qs) + 32 * h + 8 * p;
    const uint8_t* hmask = b + offsetof(BlockQ3_K, hmask) + 8 * p;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int low_bits = load_int_aligned2(qs + 4 * i);
      const int high_bits = load_int_aligned2(hmask + 4 * i);
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const int low = (low_bits >> (2 * t)) & 0x03030303;
        const int high = ((high_bits >> (4 * h + t)) & 0x01010101) << 2;
        codes[8 * t + 2 * p + i] = static_cast<int>(__vsub4(static_cast<unsigned>(low | high), 0x04040404u));
      }
    }
    const float d = half_at(b + offsetof(BlockQ3_K, d));
    const uint8_t* s = b + offsetof(BlockQ3_K, scales);
    scales[2 * p] = d * static_cast<float>(q3k_scale(s, 8 * h + 2 * p));
    scales[2 * p + 1] = d * static_cast<float>(q3k_scale(s, 8 * h + 2 * p + 1));
  }
};

// D += A B for a 16 x 32 int8 A (rows g, g + 8 of ints tig and 4 + tig: a[0..3] as PTX
// orders them) and a 32 x 8 B (ints tig, 4 + tig of column g); g = lane / 4, tig = lane % 4.
__device__ __forceinline__ void mma_k32(int (&d)[4], const int (&a)[4], int b0, int b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The same over 16 values: A rows g, g + 8 of int tig; B int tig of column g.
__device__ __forceinline__ void mma_k16(int (&d)[4], int a0, int a1, int b0) {
  asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(b0));
}

struct MmqArgs {
  const uint8_t* w;
  const uint8_t* w_up;  // gated products only
  size_t row_bytes;
  size_t matrix_bytes;
  int rows;
  int steps;     // ceil(cols / 128)
  int x_blocks;  // cols / 32
  const ActivationBlock* x;
  int x_row_divisor;  // routed slot -> activation row
  float* y;
  bool accumulate;
  int n;                 // dense: rows of the batch
  const int32_t* order;  // grouped: see ExpertGroups
  const int32_t* chunks;
  const int32_t* chunk_count;
  ExpertEpilogue epilogue;  // grouped: what the products add (nothing for dense ones)
};

// Decodes step `step` of the tile's rows (rows past the matrix repeat its last row).
template <uint32_t Type>
__device__ __forceinline__ void load_weights(WeightTile& tile, const uint8_t* w, const MmqArgs& a, int first_row,
                                             int step) {
  for (int u = threadIdx.x; u < kTileRows * kPieces; u += kThreads) {
    const int r = u / kPieces;
    const int row = min(first_row + r, a.rows - 1);
    Decoder<Type>::piece(w + static_cast<size_t>(row) * a.row_bytes, step, u % kPieces, a.x_blocks, tile.codes[r],
                         tile.scales[r], tile.mins[r]);
  }
}

// Copies step `step` of the tile's first `tokens` activation rows (the fragments its products
// read), with the scaled code sums Type's mins take: per 32 or per 16 as it groups them; Q8_1's
// stored sum (and its half-precision scale) for the types with block offsets.
template <uint32_t Type>
__device__ __forceinline__ void load_activations(ActivationTile& tile, const ActivationBlock* const* rows,
                                                 const MmqArgs& a, int step, int tokens) {
  using D = Decoder<Type>;
  for (int u = threadIdx.x; u < tokens * kStepBlocks; u += kThreads) {
    const int t = u / kStepBlocks, b = u % kStepBlocks;
    const int block = kStepBlocks * step + b;
    int q[8] = {};
    float d = 0.0f, stored_sum = 0.0f;
    if (block < a.x_blocks) {
      const ActivationBlock& x = rows[t][block];
      const int* qs = reinterpret_cast<const int*>(x.qs);
#pragma unroll
      for (int i = 0; i < 8; ++i) q[i] = qs[i];
      if constexpr (has_block_offsets(Type)) {
        d = half_bits_to_float(static_cast<uint16_t>(x.d_and_sum));
        stored_sum = half_bits_to_float(static_cast<uint16_t>(x.d_and_sum >> 16));
      } else {
        d = x.d;
      }
    }
    store4(tile.codes[t] + 8 * b, q[0], q[1], q[2], q[3]);
    store4(tile.codes[t] + 8 * b + 4, q[4], q[5], q[6], q[7]);
    tile.d[t][b] = d;
    if constexpr (has_block_offsets(Type)) {
      tile.sums[t][b] = stored_sum;
    } else if constexpr (D::kMins) {
      int halves[2] = {};
#pragma unroll
      for (int i = 0; i < 8; ++i) halves[i / 4] = __dp4a(0x01010101, q[i], halves[i / 4]);
      if constexpr (D::kGroup == 32) {
        tile.sums[t][b] = d * static_cast<float>(halves[0] + halves[1]);
      } else {
        tile.half_sums[t][2 * b] = d * static_cast<float>(halves[0]);
        tile.half_sums[t][2 * b + 1] = d * static_cast<float>(halves[1]);
      }
    }
  }
}

// acc[m][n][e] (C layout: element e at row g + 8 (e / 2), token 2 tig + e % 2 of fragment
// m, n) += the step's products of the warp's rows and its first `fragments` token fragments.
template <uint32_t Type>
__device__ __forceinline__ void multiply_step(const WeightTile& w, const ActivationTile& x, int row0, int token0,
                                              int fragments, float (&acc)[kRowFragments][kTokenFragments][4]) {
  using D = Decoder<Type>;
  const int lane = threadIdx.x % kWarp;
  const int g = lane / 4, tig = lane % 4;
#pragma unroll 1
  for (int b = 0; b < kStepBlocks; ++b) {
    int a[kRowFragments][4];
#pragma unroll
    for (int m = 0; m < kRowFragments; ++m) {
      const int r = row0 + 16 * m + g;
      a[m][0] = w.codes[r][8 * b + tig];
      a[m][1] = w.codes[r + 8][8 * b + tig];
      a[m][2] = w.codes[r][8 * b + 4 + tig];
      a[m][3] = w.codes[r + 8][8 * b + 4 + tig];
    }
#pragma unroll
    for (int n = 0; n < kTokenFragments; ++n) {
      if (n >= fragments) break;
      const int token = token0 + 8 * n + g;
      const int b0 = x.codes[token][8 * b + tig];
      const int b1 = x.codes[token][8 * b + 4 + tig];
      const int t_out = token0 + 8 * n + 2 * tig;
      const float xd[2] = {x.d[t_out][b], x.d[t_out + 1][b]};
#pragma unroll
      for (int m = 0; m < kRowFragments; ++m) {
        const int r_out = row0 + 16 * m + g;
        if constexpr (D::kGroup == 32) {
          int sum[4] = {};
          mma_k32(sum, a[m], b0, b1);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = r_out + 8 * (e / 2);
            acc[m][n][e] += xd[e % 2] * (w.scales[r][b] * exact_float(sum[e]));
            if constexpr (D::kMins) acc[m][n][e] -= w.mins[r][b] * x.sums[t_out + e % 2][b];
          }
        } else {
          static_assert(D::kGroup == 16);
          int low[4] = {}, high[4] = {};
          mma_k16(low, a[m][0], a[m][1], b0);
          mma_k16(high, a[m][2], a[m][3], b1);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = r_out + 8 * (e / 2);
            const float value =
                w.scales[r][2 * b] * exact_float(low[e]) + w.scales[r][2 * b + 1] * exact_float(high[e]);
            acc[m][n][e] += xd[e % 2] * value;
            if constexpr (D::kMins) {
              const float* sums = x.half_sums[t_out + e % 2];
              acc[m][n][e] -= w.mins[r][2 * b] * sums[2 * b] + w.mins[r][2 * b + 1] * sums[2 * b + 1];
            }
          }
        }
      }
    }
  }
}

template <uint32_t Type, bool Gated>
__global__ void __launch_bounds__(kThreads) mmq_kernel(MmqArgs a) {
  __shared__ WeightTile weights[Gated ? 2 : 1];
  __shared__ ActivationTile activations;
  __shared__ const ActivationBlock* x_rows[kTileTokens];
  __shared__ int out_rows[kTileTokens];

  int expert = 0, first, count;
  if (a.chunks) {
    const int c = blockIdx.y;
    if (c >= *a.chunk_count) return;
    expert = a.chunks[3 * c];
    first = a.chunks[3 * c + 1];
    count = a.chunks[3 * c + 2];
  } else {
    first = blockIdx.y * kTileTokens;
    count = min(kTileTokens, a.n - first);
  }
  // Tokens past `count` repeat the last one so every load stays in bounds; their sums are dropped.
  for (int t = threadIdx.x; t < kTileTokens; t += kThreads) {
    const int p = first + min(t, count - 1);
    const int slot = a.order ? a.order[p] : p;
    x_rows[t] = a.x + static_cast<int64_t>(slot / a.x_row_divisor) * a.x_blocks;
    out_rows[t] = slot;
  }
  const int first_row = blockIdx.x * kTileRows;
  const size_t offset = static_cast<size_t>(expert) * a.matrix_bytes;
  const int warp = threadIdx.x / kWarp;
  const int row0 = (warp / 2) * kWarpRows, token0 = (warp % 2) * kWarpTokens;
  // A warp multiplies only the token fragments of 8 that hold some of the tile's `count` tokens
  // (none past them): an expert chunk of a short pass holds a few tokens, whose products would
  // otherwise cost as much as a full tile's. Only those fragments' activations are copied.
  const int fragments = max(0, min(kTokenFragments, (count - token0 + 7) / 8));
  const int tokens = min(kTileTokens, (count + 7) / 8 * 8);

  float acc[kRowFragments][kTokenFragments][4] = {};
  float acc_up[Gated ? kRowFragments : 1][kTokenFragments][4] = {};
  __syncthreads();
  for (int step = 0; step < a.steps; ++step) {
    load_weights<Type>(weights[0], a.w + offset, a, first_row, step);
    if constexpr (Gated) load_weights<Type>(weights[1], a.w_up + offset, a, first_row, step);
    load_activations<Type>(activations, x_rows, a, step, tokens);
    __syncthreads();
    if (fragments > 0) {
      multiply_step<Type>(weights[0], activations, row0, token0, fragments, acc);
      if constexpr (Gated) multiply_step<Type>(weights[1], activations, row0, token0, fragments, acc_up);
    }
    __syncthreads();
  }

  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int m = 0; m < kRowFragments; ++m) {
#pragma unroll
    for (int n = 0; n < kTokenFragments; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = first_row + row0 + 16 * m + lane / 4 + 8 * (e / 2);
        const int t = token0 + 8 * n + 2 * (lane % 4) + e % 2;
        if (row >= a.rows || t >= count) continue;
        const float value =
            Gated ? gated_expert_value(acc[m][n][e], acc_up[m][n][e], a.epilogue, out_rows[t], row, a.rows)
                  : expert_output_value(acc[m][n][e], a.epilogue, out_rows[t], row, a.rows);
        float* out = a.y + static_cast<int64_t>(out_rows[t]) * a.rows + row;
        *out = a.accumulate ? *out + value : value;
      }
    }
  }
}

template <bool Gated>
void launch(uint32_t type, dim3 grid, const MmqArgs& a, StreamHandle stream) {
  const bool served = with_type(QuantizedTypes{}, type, [&](auto t) {
    mmq_kernel<decltype(t)::value, Gated><<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
  });
  if (!served) throw Error("UNSUPPORTED_QUANT", "no GPU matrix-matrix kernel for ggml type " + std::to_string(type));
}

MmqArgs dense_args(const DeviceMatrix& w, const ActivationBlock* x, int64_t n, float* y, bool accumulate) {
  MmqArgs a{};
  a.w = w.data;
  a.row_bytes = w.row_bytes;
  a.matrix_bytes = w.matrix_bytes;
  a.rows = static_cast<int>(w.rows);
  a.steps = static_cast<int>((w.cols + kStep - 1) / kStep);
  a.x_blocks = static_cast<int>(w.cols / 32);
  a.x = x;
  a.x_row_divisor = 1;
  a.y = y;
  a.accumulate = accumulate;
  a.n = static_cast<int>(n);
  return a;
}

MmqArgs grouped_args(const DeviceMatrix& w, const ActivationBlock* x, int64_t divisor, const ExpertGroups& g,
                     float* y) {
  if (g.tokens_per_chunk > kTileTokens) {
    throw Error("INVALID_ARGUMENT", "expert chunks of " + std::to_string(g.tokens_per_chunk) +
                                        " rows exceed the matrix-matrix tile of " + std::to_string(kTileTokens));
  }
  MmqArgs a = dense_args(w, x, 0, y, false);
  a.x_row_divisor = static_cast<int>(divisor);
  a.order = g.order;
  a.chunks = g.chunks;
  a.chunk_count = g.chunk_count;
  return a;
}

dim3 dense_grid(const DeviceMatrix& w, int64_t n) {
  return dim3(ceil_div(w.rows, kTileRows), ceil_div(n, kTileTokens));
}

dim3 grouped_grid(const DeviceMatrix& w, const ExpertGroups& g) {
  return dim3(ceil_div(w.rows, kTileRows), static_cast<unsigned>(g.max_chunks));
}

}  // namespace

bool mmq_serves(uint32_t type, int64_t n) {
  return n >= kMmqMinRows && with_type(QuantizedTypes{}, type, [](auto) {});
}

void mmq(const DeviceMatrix& w, const ActivationBlock* x, int64_t n, float* y, bool accumulate, StreamHandle stream) {
  if (n == 0) return;
  launch<false>(w.type, dense_grid(w, n), dense_args(w, x, n, y, accumulate), stream);
}

void gated_mmq(const DeviceMatrix& gate, const DeviceMatrix& up, const ActivationBlock* x, int64_t n, float* y,
               StreamHandle stream, const GatedActivation& activation) {
  if (n == 0) return;
  MmqArgs a = dense_args(gate, x, n, y, false);
  a.w_up = up.data;
  a.epilogue.activation = activation;
  launch<true>(gate.type, dense_grid(gate, n), a, stream);
}

void expert_gated_mmq(const DeviceMatrix& gate, const DeviceMatrix& up, const ActivationBlock* x, int64_t used,
                      const ExpertGroups& groups, float* hidden, StreamHandle stream, const ExpertEpilogue& epilogue) {
  if (groups.max_chunks == 0) return;
  MmqArgs a = grouped_args(gate, x, used, groups, hidden);
  a.w_up = up.data;
  a.epilogue = epilogue;
  launch<true>(gate.type, grouped_grid(gate, groups), a, stream);
}

void expert_mmq(const DeviceMatrix& down, const ActivationBlock* hidden, const ExpertGroups& groups, float* out,
                StreamHandle stream, const ExpertEpilogue& epilogue) {
  if (groups.max_chunks == 0) return;
  MmqArgs a = grouped_args(down, hidden, 1, groups, out);
  a.epilogue = epilogue;
  launch<false>(down.type, grouped_grid(down, groups), a, stream);
}

}  // namespace bloomery::cuda
