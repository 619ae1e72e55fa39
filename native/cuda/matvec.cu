// Quantized matrix-vector products: a warp per weight row (half a warp per row of at most 1,024
// weights, so that a matrix of short rows, such as an expert's down projection, takes half the
// blocks and each lane still several units), each lane taking 16 weights at a time, decoded
// once and dotted (dp4a) with the activation blocks of up to NT rows; a lane loads several such
// units (and, for one activation row, their activations) before it dots any, so that a decode
// step's short rows still keep enough loads in flight to stream the weights at memory speed. A block that reads one
// activation row may take it as floats and quantize it into shared memory itself, which saves
// a decode step the quantize launch before each such product. One launch may multiply up to
// three matrices of one type by the same input (a layer's q, k and v), each block serving one. The
// same kernel serves dense matrices (rows of a batch in chunks of NT) and expert stacks
// (chunks of rows routed to one expert, from moe.cu's grouping).
#include <cstddef>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "cuda/float_dot.cuh"
#include "cuda/iq_decode.cuh"
#include "cuda/quantize.cuh"

namespace bloomery::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kUnit = 16;          // weights a lane decodes at once
constexpr int kUnitsInFlight = 4;  // units a lane loads before it dots any of them

// 16 weights as packed int8 codes q, worth scale * q - min.
struct Unit {
  int q[4];
  float scale;
  float min;
};

// Bits 0..3 of `bits` moved to bit 4 of bytes 0..3: Q5_0/Q5_1's fifth bits of four weights.
__device__ __forceinline__ int fifth_bits(uint32_t bits) {
  return static_cast<int>(((bits & 1u) << 4) | ((bits & 2u) << 11) | ((bits & 4u) << 18) | ((bits & 8u) << 25));
}

// The 32-element formats: unit u is half u % 2 of block u / 2; weight j of a block sits in the
// low nibble of qs[j] (j < 16) or the high nibble of qs[j - 16], and Q5's fifth bit j in qh.
template <uint32_t Type>
__device__ __forceinline__ Unit decode_unit_32(const uint8_t* row, int unit) {
  Unit u{};
  const int half = unit % 2;
  const int shift = 4 * half;
  if constexpr (Type == kTypeQ4_0) {
    const uint8_t* b = row + (unit / 2) * sizeof(BlockQ4_0);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int low = (load_int_aligned2(b + offsetof(BlockQ4_0, qs) + 4 * i) >> shift) & 0x0f0f0f0f;
      u.q[i] = static_cast<int>(__vsub4(static_cast<unsigned>(low), 0x08080808u));
    }
    u.scale = half_at(b + offsetof(BlockQ4_0, d));
  } else if constexpr (Type == kTypeQ4_1) {
    const uint8_t* b = row + (unit / 2) * sizeof(BlockQ4_1);
#pragma unroll
    for (int i = 0; i < 4; ++i) u.q[i] = (load_int_aligned4(b + offsetof(BlockQ4_1, qs) + 4 * i) >> shift) & 0x0f0f0f0f;
    u.scale = half_at(b + offsetof(BlockQ4_1, d));
    u.min = -half_at(b + offsetof(BlockQ4_1, m));
  } else if constexpr (Type == kTypeQ5_0) {
    const uint8_t* b = row + (unit / 2) * sizeof(BlockQ5_0);
    const auto qh = static_cast<uint32_t>(load_int_aligned2(b + offsetof(BlockQ5_0, qh)));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int low = (load_int_aligned2(b + offsetof(BlockQ5_0, qs) + 4 * i) >> shift) & 0x0f0f0f0f;
      const int code = low | fifth_bits(qh >> (16 * half + 4 * i));
      u.q[i] = static_cast<int>(__vsub4(static_cast<unsigned>(code), 0x10101010u));
    }
    u.scale = half_at(b + offsetof(BlockQ5_0, d));
  } else if constexpr (Type == kTypeQ5_1) {
    const uint8_t* b = row + (unit / 2) * sizeof(BlockQ5_1);
    const auto qh = static_cast<uint32_t>(load_int_aligned4(b + offsetof(BlockQ5_1, qh)));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int low = (load_int_aligned4(b + offsetof(BlockQ5_1, qs) + 4 * i) >> shift) & 0x0f0f0f0f;
      u.q[i] = low | fifth_bits(qh >> (16 * half + 4 * i));
    }
    u.scale = half_at(b + offsetof(BlockQ5_1, d));
    u.min = -half_at(b + offsetof(BlockQ5_1, m));
  } else if constexpr (Type == kTypeIQ4_NL) {
    const uint8_t* b = row + (unit / 2) * sizeof(BlockIQ4_NL);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      u.q[i] = iq4nl_values((load_int_aligned2(b + offsetof(BlockIQ4_NL, qs) + 4 * i) >> shift) & 0x0f0f0f0f);
    u.scale = half_at(b + offsetof(BlockIQ4_NL, d));
  } else if constexpr (Type == kTypeMXFP4) {
    const uint8_t* b = row + (unit / 2) * sizeof(BlockMXFP4);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      u.q[i] = mxfp4_values((load_int_unaligned(b + offsetof(BlockMXFP4, qs) + 4 * i) >> shift) & 0x0f0f0f0f);
    u.scale = e8m0_to_float_half(b[offsetof(BlockMXFP4, e)]);
  } else {
    static_assert(Type == kTypeQ8_0);
    const uint8_t* b = row + (unit / 2) * sizeof(BlockQ8_0);
    const uint8_t* qs = b + offsetof(BlockQ8_0, qs) + kUnit * half;
#pragma unroll
    for (int i = 0; i < 4; ++i) u.q[i] = load_int_aligned2(qs + 4 * i);
    u.scale = half_at(b + offsetof(BlockQ8_0, d));
  }
  return u;
}

// The 256-element formats: unit u is the 16 weights (u % 16) * 16 .. of super-block u / 16.
template <uint32_t Type>
__device__ __forceinline__ Unit decode_unit_256(const uint8_t* row, int unit) {
  Unit u{};
  const int sixteenth = unit % 16;
  if constexpr (Type == kTypeQ4_K || Type == kTypeQ5_K) {
    // Sub-block j (32 weights) of a super-block: low nibbles of qs[32 (j/2) ..] for even j, high
    // for odd; Q5_K's fifth bit of weight l of sub-block j is bit j of qh[l].
    using Block = std::conditional_t<Type == kTypeQ4_K, BlockQ4_K, BlockQ5_K>;
    const uint8_t* b = row + (unit / 16) * sizeof(Block);
    const int j = sixteenth / 2;
    const int4 raw = *reinterpret_cast<const int4*>(b + offsetof(Block, qs) + 32 * (j / 2) + 16 * (unit % 2));
    const int shift = 4 * (j % 2);
    u.q[0] = (raw.x >> shift) & 0x0f0f0f0f;
    u.q[1] = (raw.y >> shift) & 0x0f0f0f0f;
    u.q[2] = (raw.z >> shift) & 0x0f0f0f0f;
    u.q[3] = (raw.w >> shift) & 0x0f0f0f0f;
    if constexpr (Type == kTypeQ5_K) {
      const int4 high = *reinterpret_cast<const int4*>(b + offsetof(Block, qh) + 16 * (unit % 2));
      u.q[0] |= ((high.x >> j) & 0x01010101) << 4;
      u.q[1] |= ((high.y >> j) & 0x01010101) << 4;
      u.q[2] |= ((high.z >> j) & 0x01010101) << 4;
      u.q[3] |= ((high.w >> j) & 0x01010101) << 4;
    }
    const uint8_t* scales = b + offsetof(Block, scales);
    u.scale = half_at(b + offsetof(Block, d)) * static_cast<float>(k4_scale(scales, j));
    u.min = half_at(b + offsetof(Block, dmin)) * static_cast<float>(k4_min(scales, j));
  } else if constexpr (Type == kTypeQ6_K) {
    // Element o of a super-block: half h = o / 128, quarter t = (o % 128) / 32, offset l = o % 32;
    // its low four bits are a nibble of ql[64 h + 32 (t & 1) + l], its high two bits sit in
    // qh[32 h + l] at 2 t, and its scale is scales[8 h + 2 t + l / 16].
    const uint8_t* b = row + (unit / 16) * sizeof(BlockQ6_K);
    const int o = sixteenth * kUnit;
    const int h = o / 128, t = (o % 128) / 32, l = o % 32;
    const uint8_t* ql = b + offsetof(BlockQ6_K, ql) + 64 * h + 32 * (t & 1) + l;
    const uint8_t* qh = b + offsetof(BlockQ6_K, qh) + 32 * h + l;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int low = (load_int_aligned2(ql + 4 * i) >> (4 * (t >> 1))) & 0x0f0f0f0f;
      const int high = ((load_int_aligned2(qh + 4 * i) >> (2 * t)) & 0x03030303) << 4;
      u.q[i] = static_cast<int>(__vsub4(static_cast<unsigned>(low | high), 0x20202020u));
    }
    const auto scale = static_cast<int8_t>(b[offsetof(BlockQ6_K, scales) + 8 * h + 2 * t + l / 16]);
    u.scale = half_at(b + offsetof(BlockQ6_K, d)) * static_cast<float>(scale);
  } else if constexpr (Type == kTypeQ2_K || Type == kTypeQ3_K) {
    // Element o: half h = o / 128, pair p = (o % 128) / 32, offset l = o % 32; its two low bits
    // sit at 2 p in qs[32 h + l], Q3_K's third bit (set: no -4) at 4 h + p in hmask[l]. Each 16
    // weights have one scale (Q2_K: and one min) of their own.
    using Block = std::conditional_t<Type == kTypeQ2_K, BlockQ2_K, BlockQ3_K>;
    const uint8_t* b = row + (unit / 16) * sizeof(Block);
    const int h = sixteenth / 8, p = (sixteenth % 8) / 2, l = 16 * (sixteenth % 2);
    const uint8_t* qs = b + offsetof(Block, qs) + 32 * h + l;
    const float d = half_at(b + offsetof(Block, d));
    if constexpr (Type == kTypeQ2_K) {
#pragma unroll
      for (int i = 0; i < 4; ++i) u.q[i] = (load_int_aligned4(qs + 4 * i) >> (2 * p)) & 0x03030303;
      const uint8_t scale = b[offsetof(BlockQ2_K, scales) + sixteenth];
      u.scale = d * static_cast<float>(scale & 0x0f);
      u.min = half_at(b + offsetof(BlockQ2_K, dmin)) * static_cast<float>(scale >> 4);
    } else {
      const uint8_t* hmask = b + offsetof(BlockQ3_K, hmask) + l;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int low = (load_int_aligned2(qs + 4 * i) >> (2 * p)) & 0x03030303;
        const int high = ((load_int_aligned2(hmask + 4 * i) >> (4 * h + p)) & 0x01010101) << 2;
        u.q[i] = static_cast<int>(__vsub4(static_cast<unsigned>(low | high), 0x04040404u));
      }
      u.scale = d * static_cast<float>(q3k_scale(b + offsetof(BlockQ3_K, scales), sixteenth));
    }
  } else {
    static_assert(Type == kTypeIQ4_XS);
    // Sub-block j (32 weights): weight l in the low nibble of qs[16 j + l] (l < 16) or the high one of qs[16 j + l -
    // 16].
    const uint8_t* b = row + (unit / 16) * sizeof(BlockIQ4_XS);
    const int j = sixteenth / 2;
    const uint8_t* qs = b + offsetof(BlockIQ4_XS, qs) + 16 * j;
#pragma unroll
    for (int i = 0; i < 4; ++i) u.q[i] = iq4nl_values((load_int_aligned4(qs + 4 * i) >> (4 * (unit % 2))) & 0x0f0f0f0f);
    u.scale = half_at(b + offsetof(BlockIQ4_XS, d)) * static_cast<float>(iq4xs_scale(b, j));
  }
  return u;
}

constexpr bool has_super_blocks(uint32_t type) {
  return type == kTypeQ2_K || type == kTypeQ3_K || type == kTypeQ4_K || type == kTypeQ5_K || type == kTypeQ6_K ||
         type == kTypeIQ4_XS;
}

// The 1- to 3-bit types: unit u is groups 2 (u % 16) and 2 (u % 16) + 1 of super-block u / 16, which
// share a scale. IQ1's values q + 0.125 * delta_sign are kept as the integers 8 q + delta_sign at an
// eighth of the scale.
template <uint32_t Type>
__device__ __forceinline__ Unit decode_unit_low_bit(const uint8_t* row, int unit) {
  const uint8_t* b = row + (unit / 16) * iq_block_bytes<Type>();
  const IqGroup g0 = iq_group<Type>(b, 2 * (unit % 16)), g1 = iq_group<Type>(b, 2 * (unit % 16) + 1);
  Unit u{};
  u.q[0] = static_cast<int>(g0.lo), u.q[1] = static_cast<int>(g0.hi);
  u.q[2] = static_cast<int>(g1.lo), u.q[3] = static_cast<int>(g1.hi);
  float factor = iq_factor<Type>();
  if constexpr (Type == kTypeIQ1_S || Type == kTypeIQ1_M) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int delta_sign = i < 2 ? g0.delta_sign : g1.delta_sign;
      const uint32_t eight_q = (static_cast<uint32_t>(u.q[i]) << 3) & 0xf8f8f8f8u;
      u.q[i] = static_cast<int>(__vadd4(eight_q, delta_sign > 0 ? 0x01010101u : 0xffffffffu));
    }
    factor = 0.125f;
  }
  u.scale = iq_block_d<Type>(b) * static_cast<float>(g0.scale) * factor;
  return u;
}

template <uint32_t Type>
__device__ __forceinline__ Unit decode_unit(const uint8_t* row, int unit) {
  if constexpr (is_low_bit_type(Type)) {
    return decode_unit_low_bit<Type>(row, unit);
  } else if constexpr (has_super_blocks(Type)) {
    return decode_unit_256<Type>(row, unit);
  } else {
    return decode_unit_32<Type>(row, unit);
  }
}

// The 16 activation codes and the scale word (ActivationBlock's) a unit is dotted with.
struct ActivationUnit {
  int q[4];
  union {
    float d;
    uint32_t d_and_sum;
  };
};

// The block's codes sit 4 bytes into its 36: 4-byte loads.
__device__ __forceinline__ ActivationUnit activation_unit(const ActivationBlock& a, int unit) {
  const int* q = reinterpret_cast<const int*>(a.qs) + 4 * (unit % 2);
  ActivationUnit x;
  x.q[0] = q[0], x.q[1] = q[1], x.q[2] = q[2], x.q[3] = q[3];
  x.d_and_sum = a.d_and_sum;
  return x;
}

template <uint32_t Type>
__device__ __forceinline__ float dot_unit(const Unit& u, const ActivationUnit& a) {
  const int* y = a.q;
  int sum = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) sum = __dp4a(u.q[i], y[i], sum);
  if constexpr (Type == kTypeQ4_K || Type == kTypeQ5_K || Type == kTypeQ2_K) {
    // The mins times the activations' sum, as the CPU takes it from Q8_K's bsums.
    int sum_y = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) sum_y = __dp4a(0x01010101, y[i], sum_y);
    return a.d * (u.scale * static_cast<float>(sum) - u.min * static_cast<float>(sum_y));
  } else if constexpr (Type == kTypeQ4_1 || Type == kTypeQ5_1) {
    // The offset times Q8_1's block sum, half of it for each 16 weights (exact: a power of two).
    const float d = half_bits_to_float(static_cast<uint16_t>(a.d_and_sum));
    const float block_sum = half_bits_to_float(static_cast<uint16_t>(a.d_and_sum >> 16));
    return d * u.scale * static_cast<float>(sum) - u.min * (0.5f * block_sum);
  } else {
    return a.d * u.scale * static_cast<float>(sum);
  }
}

// The sum of v over each group of kLanes lanes (a row's lanes), in every lane of the group.
template <int kLanes>
__device__ __forceinline__ float lanes_sum(float v) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

constexpr int kMaxParts = 3;  // matrices of one input a launch multiplies (a layer's q, k and v)

// One matrix of a launch: grid.x blocks from first_block on serve its rows, outputs to y.
struct MatvecPart {
  const uint8_t* w;
  float* y;
  int rows;
  int first_block;
  bool accumulate;
};

struct MatvecArgs {
  MatvecPart parts[kMaxParts];
  int part_count;
  const uint8_t* w_up;  // gated products only
  size_t row_bytes;
  size_t matrix_bytes;
  int units;     // cols / 16
  int x_blocks;  // cols / 32
  const ActivationBlock* x;
  const float* x_floats;    // instead of x (NT = 1 only): float rows the kernel quantizes
  ActivationFormat format;  // with x_floats: the format the weights read
  int x_row_divisor;        // routed slot -> activation row
  int n;                    // dense: rows of the batch
  const int32_t* order;     // grouped: see ExpertGroups
  const int32_t* chunks;
  const int32_t* chunk_count;
};

// The activation row at x quantized into `blocks` (shared memory) by the block's warps, 256
// values per warp at a time, as quantize_activations does it.
__device__ void quantize_row(const float* x, int cols, ActivationFormat format, ActivationBlock* blocks) {
  const int lane = threadIdx.x % kWarp;
  for (int first = static_cast<int>(threadIdx.x / kWarp) * kQuantizeValuesPerWarp; first < cols;
       first += kWarpsPerBlock * kQuantizeValuesPerWarp) {
    float v[kQuantizeValuesPerLane];
#pragma unroll
    for (int i = 0; i < kQuantizeValuesPerLane; ++i) {
      const int j = first + lane * kQuantizeValuesPerLane + i;
      v[i] = j < cols ? x[j] : 0.0f;
    }
    quantize_warp(v, format, first, cols, blocks);
  }
  __syncthreads();
}

template <uint32_t Type, int NT, bool Gated, int kLanes>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp) matvec_kernel(MatvecArgs a) {
  extern __shared__ ActivationBlock quantized[];  // with x_floats: the block's activation row
  constexpr int kRowsPerWarp = kWarp / kLanes;
  const int lane = threadIdx.x % kLanes;  // within the row's lanes
  MatvecPart part = a.parts[0];
#pragma unroll
  for (int p = 1; p < kMaxParts; ++p) {
    if (p < a.part_count && static_cast<int>(blockIdx.x) >= a.parts[p].first_block) part = a.parts[p];
  }
  const int row =
      ((static_cast<int>(blockIdx.x) - part.first_block) * kWarpsPerBlock + threadIdx.x / kWarp) * kRowsPerWarp +
      static_cast<int>(threadIdx.x % kWarp) / kLanes;
  const bool grouped = a.chunks != nullptr;
  int expert = 0, first, count;
  if (grouped) {
    wait_for_previous_kernel();  // the chunks are the grouping's
    const int c = blockIdx.y;
    if (c >= *a.chunk_count) return;
    expert = a.chunks[3 * c];
    first = a.chunks[3 * c + 1];
    count = a.chunks[3 * c + 2];
  } else {
    first = blockIdx.y * NT;
    count = min(NT, a.n - first);
  }
  // Lanes past the last row load that row again and write nothing: they may still have a
  // share in quantizing the activation row.
  const size_t offset =
      static_cast<size_t>(expert) * a.matrix_bytes + static_cast<size_t>(min(row, part.rows - 1)) * a.row_bytes;
  const uint8_t* w = part.w + offset;
  const uint8_t* w_up = Gated ? a.w_up + offset : nullptr;
  // A lane's units in rounds of kUnitsInFlight: all of a round's weights are loaded before any
  // is dotted, so each lane has that many independent loads in flight (a row of 2048 Q4_K
  // weights is one round). Units past the row's end load a repeat of its last unit and add nothing.
  Unit u[kUnitsInFlight];
  Unit v[Gated ? kUnitsInFlight : 1];
  const auto load_round = [&](int base) {
#pragma unroll
    for (int b = 0; b < kUnitsInFlight; ++b) {
      const int unit = min(base + b * kLanes, a.units - 1);
      u[b] = decode_unit<Type>(w, unit);
      if constexpr (Gated) v[b] = decode_unit<Type>(w_up, unit);
    }
  };
  load_round(lane);
  // A dense matrix is no kernel's output: its first round loads while the previous kernel ends.
  if (!grouped) wait_for_previous_kernel();

  // Rows past `count` repeat the last one so the inner loop has no branches; their sums are dropped.
  const ActivationBlock* xs[NT];
  int out_rows[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int p = first + min(t, count - 1);
    const int slot = a.order ? a.order[p] : p;
    xs[t] = a.x ? a.x + static_cast<int64_t>(slot / a.x_row_divisor) * a.x_blocks : quantized;
    out_rows[t] = slot;
  }
  if constexpr (NT == 1) {
    if (a.x_floats) {
      const int cols = a.x_blocks * 32;
      quantize_row(a.x_floats + static_cast<int64_t>(out_rows[0] / a.x_row_divisor) * cols, cols, a.format, quantized);
    }
  }
  if (row >= part.rows) return;
  // One activation row: a round's activations load with its weights, not after them.
  ActivationUnit x1[NT == 1 ? kUnitsInFlight : 1];
  const auto load_activations = [&](int base) {
    if constexpr (NT == 1) {
#pragma unroll
      for (int b = 0; b < kUnitsInFlight; ++b) {
        const int unit = min(base + b * kLanes, a.units - 1);
        x1[b] = activation_unit(xs[0][unit / 2], unit);
      }
    }
  };
  load_activations(lane);
  float acc[NT] = {};
  float acc_up[Gated ? NT : 1] = {};
  for (int base = lane;;) {
#pragma unroll
    for (int b = 0; b < kUnitsInFlight; ++b) {
      const int unit = base + b * kLanes;
      if (unit >= a.units) break;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const ActivationUnit x = NT == 1 ? x1[b] : activation_unit(xs[t][unit / 2], unit);
        acc[t] += dot_unit<Type>(u[b], x);
        if constexpr (Gated) acc_up[t] += dot_unit<Type>(v[b], x);
      }
    }
    base += kLanes * kUnitsInFlight;
    if (base >= a.units) break;
    load_round(base);
    load_activations(base);
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    float value = lanes_sum<kLanes>(acc[t]);
    if constexpr (Gated) value = swiglu_value(value, lanes_sum<kLanes>(acc_up[t]));
    if (lane == t && t < count) {
      float* out = part.y + static_cast<int64_t>(out_rows[t]) * part.rows + row;
      *out = part.accumulate ? *out + value : value;
    }
  }
}

// F32, F16 and BF16 weights against float rows (routers, small dense matrices): a block per
// weight row (float_dot.cuh), against NT activation rows.
template <uint32_t Type, int NT>
__global__ void __launch_bounds__(kFloatThreads)
    float_matvec_kernel(const uint8_t* w, size_t row_bytes, int cols, const float* x, int n, float* y, int rows,
                        bool accumulate) {
  const int row = blockIdx.x;
  const int first = blockIdx.y * NT;
  const int count = min(NT, n - first);
  const float* xs[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) xs[t] = x + static_cast<int64_t>(first + min(t, count - 1)) * cols;
  const float value = float_row_dots<Type, NT>(w + static_cast<size_t>(row) * row_bytes, cols, xs);
  if (static_cast<int>(threadIdx.x) < count) {
    float* out = y + static_cast<int64_t>(first + threadIdx.x) * rows + row;
    *out = accumulate ? *out + value : value;
  }
}

int tokens_per_block(int64_t n) { return n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : 8; }

// Lanes per weight row: half a warp for rows of at most one round of half a warp's units. A
// function of the row length only, so that a row's sums do not depend on the batch.
int lanes_per_row(int units) { return units <= kWarp / 2 * kUnitsInFlight ? kWarp / 2 : kWarp; }

// Blocks serving `rows` weight rows of `cols` weights.
unsigned row_blocks(int64_t rows, int64_t cols) {
  return ceil_div(rows, kWarpsPerBlock * (kWarp / lanes_per_row(static_cast<int>(cols / kUnit))));
}

template <int NT, bool Gated>
void launch_quantized(uint32_t type, dim3 grid, const MatvecArgs& a, cudaStream_t stream) {
  constexpr int kThreads = kWarpsPerBlock * kWarp;
  const size_t shared = a.x_floats ? static_cast<size_t>(a.x_blocks) * sizeof(ActivationBlock) : 0;
  const bool supported = with_type(QuantizedTypes{}, type, [&](auto t) {
    constexpr uint32_t kType = decltype(t)::value;
    if (lanes_per_row(a.units) == kWarp) {
      launch_early(matvec_kernel<kType, NT, Gated, kWarp>, grid, dim3(kThreads), shared, stream, a);
    } else {
      launch_early(matvec_kernel<kType, NT, Gated, kWarp / 2>, grid, dim3(kThreads), shared, stream, a);
    }
  });
  if (!supported) throw Error("UNSUPPORTED_QUANT", "no GPU matvec kernel for ggml type " + std::to_string(type));
}

template <bool Gated>
void launch_quantized(uint32_t type, int nt, dim3 grid, const MatvecArgs& a, StreamHandle stream) {
  if (!a.x && !(a.x_floats && nt == 1 && quantizes_input(1, static_cast<int64_t>(a.x_blocks) * 32))) {
    throw Error("INVALID_ARGUMENT", "a quantized product of " + std::to_string(nt) +
                                        " rows per block needs its activations quantized beforehand");
  }
  const auto s = static_cast<cudaStream_t>(stream);
  switch (nt) {
    case 1:
      launch_quantized<1, Gated>(type, grid, a, s);
      break;
    case 2:
      launch_quantized<2, Gated>(type, grid, a, s);
      break;
    case 4:
      launch_quantized<4, Gated>(type, grid, a, s);
      break;
    default:
      launch_quantized<8, Gated>(type, grid, a, s);
      break;
  }
}

template <int NT>
void launch_float(const DeviceMatrix& w, const float* x, int64_t n, float* y, bool accumulate, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(w.rows), ceil_div(n, NT));
  const auto rows = static_cast<int>(w.rows);
  const auto cols = static_cast<int>(w.cols);
  const auto nn = static_cast<int>(n);
  with_type(FloatTypes{}, w.type, [&](auto t) {
    launch_early(float_matvec_kernel<decltype(t)::value, NT>, grid, dim3(kFloatThreads), 0, stream, w.data, w.row_bytes,
                 cols, x, nn, y, rows, accumulate);
  });
}

MatvecArgs dense_args(const DeviceMatrix& w, const MatvecInput& x, int64_t n, float* y, bool accumulate) {
  MatvecArgs a{};
  a.parts[0] = {w.data, y, static_cast<int>(w.rows), 0, accumulate};
  a.part_count = 1;
  a.row_bytes = w.row_bytes;
  a.matrix_bytes = w.matrix_bytes;
  a.units = static_cast<int>(w.cols / kUnit);
  a.x_blocks = static_cast<int>(w.cols / 32);
  a.x = x.blocks;
  if (!x.blocks) {
    a.x_floats = x.floats;
    a.format = activation_format(w.type);
  }
  a.x_row_divisor = 1;
  a.n = static_cast<int>(n);
  return a;
}

MatvecArgs grouped_args(const DeviceMatrix& w, const MatvecInput& x, int64_t divisor, const ExpertGroups& g, float* y) {
  MatvecArgs a = dense_args(w, x, 0, y, false);
  a.x_row_divisor = static_cast<int>(divisor);
  a.order = g.order;
  a.chunks = g.chunks;
  a.chunk_count = g.chunk_count;
  return a;
}

}  // namespace

bool is_float_type(uint32_t type) {
  return with_type(FloatTypes{}, type, [](auto) {});
}

bool quantizes_input(int64_t rows_per_block, int64_t cols) {
  // The row's blocks sit in shared memory: within the 48 KiB a launch gets without opting in.
  return rows_per_block == 1 && static_cast<size_t>(cols / 32) * sizeof(ActivationBlock) <= 48 * 1024;
}

bool matvec_supports(uint32_t type) {
  return is_float_type(type) || with_type(QuantizedTypes{}, type, [](auto) {});
}

void matvec(const DeviceMatrix& w, const MatvecInput& x, int64_t n, float* y, bool accumulate, StreamHandle stream) {
  const int nt = tokens_per_block(n);
  if (is_float_type(w.type)) {
    const auto s = static_cast<cudaStream_t>(stream);
    switch (nt) {
      case 1:
        launch_float<1>(w, x.floats, n, y, accumulate, s);
        break;
      case 2:
        launch_float<2>(w, x.floats, n, y, accumulate, s);
        break;
      case 4:
        launch_float<4>(w, x.floats, n, y, accumulate, s);
        break;
      default:
        launch_float<8>(w, x.floats, n, y, accumulate, s);
        break;
    }
    return;
  }
  const dim3 grid(row_blocks(w.rows, w.cols), ceil_div(n, nt));
  launch_quantized<false>(w.type, nt, grid, dense_args(w, x, n, y, accumulate), stream);
}

void matvecs(std::span<const MatvecProduct> products, const MatvecInput& x, int64_t n, StreamHandle stream) {
  const int nt = tokens_per_block(n);
  std::vector<bool> queued(products.size(), false);
  for (size_t i = 0; i < products.size(); ++i) {
    if (queued[i]) continue;
    const DeviceMatrix& w = *products[i].w;
    if (is_float_type(w.type)) {
      matvec(w, x, n, products[i].y, products[i].accumulate, stream);
      continue;
    }
    MatvecArgs a = dense_args(w, x, n, products[i].y, products[i].accumulate);
    unsigned blocks = row_blocks(w.rows, w.cols);
    for (size_t j = i + 1; j < products.size() && a.part_count < kMaxParts; ++j) {
      const DeviceMatrix& other = *products[j].w;
      if (queued[j] || other.type != w.type || other.cols != w.cols || other.row_bytes != w.row_bytes) continue;
      a.parts[a.part_count++] = {other.data, products[j].y, static_cast<int>(other.rows), static_cast<int>(blocks),
                                 products[j].accumulate};
      blocks += row_blocks(other.rows, other.cols);
      queued[j] = true;
    }
    launch_quantized<false>(w.type, nt, dim3(blocks, ceil_div(n, nt)), a, stream);
  }
}

bool gated_matvec_supports(const DeviceMatrix& gate, const DeviceMatrix& up) {
  return gate.type == up.type && !is_float_type(gate.type) && matvec_supports(gate.type) && gate.rows == up.rows &&
         gate.cols == up.cols && gate.row_bytes == up.row_bytes && gate.matrix_bytes == up.matrix_bytes;
}

void gated_matvec(const DeviceMatrix& gate, const DeviceMatrix& up, const ActivationBlock* x, int64_t n, float* y,
                  StreamHandle stream) {
  const int nt = tokens_per_block(n);
  MatvecArgs a = dense_args(gate, {nullptr, x}, n, y, false);
  a.w_up = up.data;
  launch_quantized<true>(gate.type, nt, dim3(row_blocks(gate.rows, gate.cols), ceil_div(n, nt)), a, stream);
}

void expert_gated_matvec(const DeviceMatrix& gate, const DeviceMatrix& up, const MatvecInput& x, int64_t used,
                         const ExpertGroups& groups, float* hidden, StreamHandle stream) {
  if (is_float_type(gate.type)) {
    float_expert_gated_matvec(gate, up, x.floats, used, groups, hidden, stream);
    return;
  }
  MatvecArgs a = grouped_args(gate, x, used, groups, hidden);
  a.w_up = up.data;
  const dim3 grid(row_blocks(gate.rows, gate.cols), static_cast<unsigned>(groups.max_chunks));
  launch_quantized<true>(gate.type, groups.tokens_per_chunk, grid, a, stream);
}

void expert_matvec(const DeviceMatrix& down, const MatvecInput& hidden, const ExpertGroups& groups, float* out,
                   StreamHandle stream) {
  if (is_float_type(down.type)) {
    float_expert_matvec(down, hidden.floats, groups, out, stream);
    return;
  }
  const dim3 grid(row_blocks(down.rows, down.cols), static_cast<unsigned>(groups.max_chunks));
  launch_quantized<false>(down.type, groups.tokens_per_chunk, grid, grouped_args(down, hidden, 1, groups, out), stream);
}

}  // namespace bloomery::cuda
