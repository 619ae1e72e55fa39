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
//
// MXFP4 rows take another path (staged_rows): its 17-byte blocks leave every lane's unit at a
// different alignment, so that a lane's five word loads per unit (and the two lanes of each
// block loading the same codes) kept a decode step's expert products at a fifth of the memory's
// speed. There a warp copies its whole weight row (gate's and up's) into shared memory with
// coalesced asynchronous word copies, every copy in flight at once, then each lane decodes whole
// blocks from there.
#include <vector>

#include "base/error.h"
#include "cuda/float_dot.cuh"
#include "cuda/quantize.cuh"
#include "cuda/unit_decode.cuh"

namespace bloomery::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kUnitsInFlight = 4;  // units a lane loads before it dots any of them

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
  if constexpr (has_code_mins(Type)) {
    // The mins times the activations' sum, as the CPU takes it from Q8_K's bsums.
    int sum_y = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) sum_y = __dp4a(0x01010101, y[i], sum_y);
    return a.d * (u.scale * static_cast<float>(sum) - u.min * static_cast<float>(sum_y));
  } else if constexpr (has_block_offsets(Type)) {
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
  ExpertEpilogue epilogue;  // grouped: what the products add (nothing for dense ones)
  int stage_offset;         // staged types: where the warps' stages start in shared memory
  int stage_bytes;          // staged types: shared bytes that hold one staged weight row
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

// The activation rows of a block's chunk: up to NT from `first` on (`count` of them; the rest
// repeat the last, so that inner loops have no branches, and their sums are dropped), and the
// output row of each. With float input (NT 1 only), the block quantizes its row into `quantized`
// first: every thread of the block takes part.
template <int NT>
struct RowInputs {
  const ActivationBlock* xs[NT];
  int out_rows[NT];

  __device__ __forceinline__ RowInputs(const MatvecArgs& a, int first, int count, ActivationBlock* quantized) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const int p = first + min(t, count - 1);
      const int slot = a.order ? a.order[p] : p;
      xs[t] = a.x ? a.x + static_cast<int64_t>(slot / a.x_row_divisor) * a.x_blocks : quantized;
      out_rows[t] = slot;
    }
    if constexpr (NT == 1) {
      if (!a.x && a.x_floats) {
        const int cols = a.x_blocks * 32;
        quantize_row(a.x_floats + static_cast<int64_t>(out_rows[0] / a.x_row_divisor) * cols, cols, a.format,
                     quantized);
      }
    }
  }
};

// Sums each activation row's lane sums (and up's) over the row's kLanes lanes and writes them
// through the epilogue, one lane per activation row.
template <int NT, bool Gated, int kLanes>
__device__ __forceinline__ void write_sums(const MatvecArgs& a, const MatvecPart& part, int row,
                                           const RowInputs<NT>& in, int count, const float (&acc)[NT],
                                           const float (&acc_up)[Gated ? NT : 1]) {
  const int lane = threadIdx.x % kLanes;
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    float value = lanes_sum<kLanes>(acc[t]);
    const float up = Gated ? lanes_sum<kLanes>(acc_up[t]) : 0.0f;
    if (lane == t && t < count) {
      value = Gated ? gated_expert_value(value, up, a.epilogue, in.out_rows[t], row, part.rows)
                    : expert_output_value(value, a.epilogue, in.out_rows[t], row, part.rows);
      float* out = part.y + static_cast<int64_t>(in.out_rows[t]) * part.rows + row;
      *out = part.accumulate ? *out + value : value;
    }
  }
}

// Types whose products stage each warp's weight rows in shared memory (see the top of the file),
// for rows of at most kStagedMaxCols weights: a block's stages and its quantized activation row
// then fit the 48 KiB a launch gets without opting in.
constexpr bool stages_rows(uint32_t type) { return type == kTypeMXFP4; }
constexpr int64_t kStagedMaxCols = 8192;
bool staged(uint32_t type, int64_t cols) { return stages_rows(type) && cols <= kStagedMaxCols; }

// Shared bytes that hold a row of `cols` weights of a staged type, whatever its alignment: the
// words that hold its first and last bytes are copied whole.
int stage_bytes(int64_t cols) {
  const int64_t bytes = cols / 32 * static_cast<int64_t>(sizeof(BlockMXFP4));
  return static_cast<int>((4 * ((3 + bytes + 3) / 4) + 15) / 16 * 16);
}

__device__ __forceinline__ void copy_word_async(uint8_t* to, const uint32_t* from) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(to))),
               "l"(from)
               : "memory");
#else
  *reinterpret_cast<uint32_t*>(to) = *from;
#endif
}

// Waits for the lane's copies, then for the warp's: every lane reads what others copied.
__device__ __forceinline__ void wait_for_stage() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
  __syncwarp();
}

// Starts copying `bytes` bytes at `src` (any alignment) into `stage`, the warp's lanes a word
// each in turn, all in flight at once; returns the offset in `stage` of src's first byte.
__device__ __forceinline__ int stage_span(const uint8_t* src, int64_t bytes, uint8_t* stage) {
  const auto address = reinterpret_cast<uintptr_t>(src);
  const auto* words = reinterpret_cast<const uint32_t*>(address & ~uintptr_t{3});
  const int head = static_cast<int>(address & 3);
  const int count = static_cast<int>((head + bytes + 3) / 4);
  for (int i = static_cast<int>(threadIdx.x % kWarp); i < count; i += kWarp) copy_word_async(stage + 4 * i, words + i);
  return head;
}

// A whole 32-weight block as int8 codes (weights 0..15 in lo, 16..31 in hi) and its scale.
struct Block32 {
  int lo[4];
  int hi[4];
  float scale;
};

// The MXFP4 block at `at` (its scale byte, then its 16 code bytes), in shared memory.
__device__ __forceinline__ Block32 staged_block(const uint8_t* at) {
  constexpr uint32_t w0 = codebook_word(quant::kMxfp4Values, 0), w1 = codebook_word(quant::kMxfp4Values, 1);
  constexpr uint32_t w2 = codebook_word(quant::kMxfp4Values, 2), w3 = codebook_word(quant::kMxfp4Values, 3);
  Block32 b;
  uint32_t qs[4];
  load_16_unaligned(at + offsetof(BlockMXFP4, qs), qs);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int2 pair = codebook_pairs(qs[i], w0, w1, w2, w3);
    b.lo[i] = pair.x;
    b.hi[i] = pair.y;
  }
  b.scale = e8m0_to_float_half(at[offsetof(BlockMXFP4, e)]);
  return b;
}

__device__ __forceinline__ float staged_block_dot(const Block32& w, const ActivationBlock& x) {
  const int* q = reinterpret_cast<const int*>(x.qs);
  int sum = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) sum = __dp4a(w.lo[i], q[i], sum);
#pragma unroll
  for (int i = 0; i < 4; ++i) sum = __dp4a(w.hi[i], q[4 + i], sum);
  return x.d * w.scale * static_cast<float>(sum);
}

// product_rows for a staged type: the warp stages weight row `row` of `part` (and up's), then each
// lane dots blocks lane, lane + 32, ... with the NT activation rows. A row's sums do not depend
// on NT either.
template <uint32_t Type, int NT, bool Gated>
__device__ __forceinline__ void staged_rows(const MatvecArgs& a, const MatvecPart& part, int row, int expert, int first,
                                            int count, bool grouped, ActivationBlock* quantized) {
  static_assert(Type == kTypeMXFP4);
  const int lane = threadIdx.x % kWarp;
  const bool active = row < part.rows;  // the warp's: a row per warp
  const size_t offset = static_cast<size_t>(expert) * a.matrix_bytes + static_cast<size_t>(row) * a.row_bytes;
  uint8_t* stage =
      reinterpret_cast<uint8_t*>(quantized) + a.stage_offset + (threadIdx.x / kWarp) * (Gated ? 2 : 1) * a.stage_bytes;
  const int blocks = a.x_blocks;
  int head = 0, head_up = 0;
  if (active) {
    head = stage_span(part.w + offset, a.row_bytes, stage);
    if constexpr (Gated) head_up = stage_span(a.w_up + offset, a.row_bytes, stage + a.stage_bytes);
  }
  // A dense matrix is no kernel's output: its row copies while the previous kernel ends.
  if (!grouped) wait_for_previous_kernel();
  const RowInputs<NT> in(a, first, count, quantized);
  if (!active) return;
  float acc[NT] = {};
  float acc_up[Gated ? NT : 1] = {};
  wait_for_stage();
  for (int j = lane; j < blocks; j += kWarp) {
    const Block32 w = staged_block(stage + head + j * static_cast<int>(sizeof(BlockMXFP4)));
    Block32 up;
    if constexpr (Gated) up = staged_block(stage + a.stage_bytes + head_up + j * static_cast<int>(sizeof(BlockMXFP4)));
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const ActivationBlock& x = in.xs[t][j];
      acc[t] += staged_block_dot(w, x);
      if constexpr (Gated) acc_up[t] += staged_block_dot(up, x);
    }
  }
  write_sums<NT, Gated, kWarp>(a, part, row, in, count, acc, acc_up);
}

// Up to NT activation rows, from `first` on (`count` of them, the rest repeat the last and
// write nothing), through weight row `row` of `part` (expert `expert`'s, grouped). Quantizes a
// float activation row into `quantized` first where the launch gave one (NT 1 only).
template <uint32_t Type, int NT, bool Gated, int kLanes>
__device__ __forceinline__ void product_rows(const MatvecArgs& a, const MatvecPart& part, int row, int expert,
                                             int first, int count, bool grouped, ActivationBlock* quantized) {
  if constexpr (stages_rows(Type) && kLanes == kWarp) {
    if (a.stage_bytes > 0) {
      staged_rows<Type, NT, Gated>(a, part, row, expert, first, count, grouped, quantized);
      return;
    }
  }
  const int lane = threadIdx.x % kLanes;  // within the row's lanes
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

  const RowInputs<NT> in(a, first, count, quantized);
  if (row >= part.rows) return;
  // One activation row: a round's activations load with its weights, not after them.
  ActivationUnit x1[NT == 1 ? kUnitsInFlight : 1];
  const auto load_activations = [&](int base) {
    if constexpr (NT == 1) {
#pragma unroll
      for (int b = 0; b < kUnitsInFlight; ++b) {
        const int unit = min(base + b * kLanes, a.units - 1);
        x1[b] = activation_unit(in.xs[0][unit / 2], unit);
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
        const ActivationUnit x = NT == 1 ? x1[b] : activation_unit(in.xs[t][unit / 2], unit);
        acc[t] += dot_unit<Type>(u[b], x);
        if constexpr (Gated) acc_up[t] += dot_unit<Type>(v[b], x);
      }
    }
    base += kLanes * kUnitsInFlight;
    if (base >= a.units) break;
    load_round(base);
    load_activations(base);
  }
  write_sums<NT, Gated, kLanes>(a, part, row, in, count, acc, acc_up);
}

// A block serves kWarpsPerBlock * (32 / kLanes) weight rows of one part, against a chunk of up
// to NT activation rows: a dense batch's rows blockIdx.y * NT on, or the rows grouped to one
// expert (chunk blockIdx.y). Grouped chunks of 8 rows (tokens_per_expert_chunk) that hold one or
// two run as the product of one or two rows (in a decode step of a few streams most experts
// have one row, a few two: 8 rows' dots for each would make the product compute-bound). A row's
// sums are the same floats whatever NT: each row is dotted on its own, in the same order.
template <uint32_t Type, int NT, bool Gated, int kLanes>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp) matvec_kernel(MatvecArgs a) {
  // With x_floats: the block's activation row; then the warps' stages (staged types).
  extern __shared__ __align__(16) ActivationBlock quantized[];
  constexpr int kRowsPerWarp = kWarp / kLanes;
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
  if constexpr (NT == 8) {
    if (grouped && count <= 2) {
      if (count == 1) {
        product_rows<Type, 1, Gated, kLanes>(a, part, row, expert, first, count, grouped, quantized);
      } else {
        product_rows<Type, 2, Gated, kLanes>(a, part, row, expert, first, count, grouped, quantized);
      }
      return;
    }
  }
  product_rows<Type, NT, Gated, kLanes>(a, part, row, expert, first, count, grouped, quantized);
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
// A staged row takes a whole warp.
int lanes_per_row(uint32_t type, int64_t cols) {
  return !staged(type, cols) && cols / kUnit <= kWarp / 2 * kUnitsInFlight ? kWarp / 2 : kWarp;
}

// Blocks serving `rows` weight rows of `cols` weights of `type`.
unsigned row_blocks(uint32_t type, int64_t rows, int64_t cols) {
  return ceil_div(rows, kWarpsPerBlock * (kWarp / lanes_per_row(type, cols)));
}

template <int NT, bool Gated>
void launch_quantized(uint32_t type, dim3 grid, const MatvecArgs& a, cudaStream_t stream) {
  constexpr int kThreads = kWarpsPerBlock * kWarp;
  const int64_t cols = static_cast<int64_t>(a.x_blocks) * 32;
  const size_t row_shared = a.x_floats ? static_cast<size_t>(a.x_blocks) * sizeof(ActivationBlock) : 0;
  MatvecArgs args = a;
  size_t shared = row_shared;
  if (staged(type, cols)) {
    args.stage_offset = static_cast<int>((row_shared + 15) / 16 * 16);
    args.stage_bytes = stage_bytes(cols);
    shared = args.stage_offset + static_cast<size_t>(kWarpsPerBlock) * (Gated ? 2 : 1) * args.stage_bytes;
  }
  const bool supported = with_type(QuantizedTypes{}, type, [&](auto t) {
    constexpr uint32_t kType = decltype(t)::value;
    if (lanes_per_row(type, cols) == kWarp) {
      launch_early(matvec_kernel<kType, NT, Gated, kWarp>, grid, dim3(kThreads), shared, stream, args);
    } else {
      launch_early(matvec_kernel<kType, NT, Gated, kWarp / 2>, grid, dim3(kThreads), shared, stream, args);
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

// The values all blocks of a one-row product may quantize (see quantizes_one_row).
constexpr int64_t kMaxRowQuantizeValues = int64_t{1} << 22;

bool quantizes_one_row(uint32_t type, int64_t cols, int64_t weight_rows) {
  // Each block reads the whole float row (4 bytes a value) from L2 and quantizes it: more bytes
  // than its own weight rows. That buys a launch where the product is small; past
  // kMaxRowQuantizeValues values in all, the blocks' reads cost more than the launch (GLM-5's
  // output projection of 16,384 columns ran at half the speed of the same product after a
  // quantize launch, and a decode step 13 % slower). 2^20 and 2^22 measured alike there; 2^22
  // keeps a 2,048-wide model's products (q, k and v; o; eight experts' gate and up) as they were.
  return !is_float_type(type) && quantizes_input(1, cols) &&
         static_cast<int64_t>(row_blocks(type, weight_rows, cols)) * cols <= kMaxRowQuantizeValues;
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
  const dim3 grid(row_blocks(w.type, w.rows, w.cols), ceil_div(n, nt));
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
    unsigned blocks = row_blocks(w.type, w.rows, w.cols);
    for (size_t j = i + 1; j < products.size() && a.part_count < kMaxParts; ++j) {
      const DeviceMatrix& other = *products[j].w;
      if (queued[j] || other.type != w.type || other.cols != w.cols || other.row_bytes != w.row_bytes) continue;
      a.parts[a.part_count++] = {other.data, products[j].y, static_cast<int>(other.rows), static_cast<int>(blocks),
                                 products[j].accumulate};
      blocks += row_blocks(other.type, other.rows, other.cols);
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
                  StreamHandle stream, const GatedActivation& activation) {
  const int nt = tokens_per_block(n);
  MatvecArgs a = dense_args(gate, {nullptr, x}, n, y, false);
  a.w_up = up.data;
  a.epilogue.activation = activation;
  launch_quantized<true>(gate.type, nt, dim3(row_blocks(gate.type, gate.rows, gate.cols), ceil_div(n, nt)), a, stream);
}

void expert_gated_matvec(const DeviceMatrix& gate, const DeviceMatrix& up, const MatvecInput& x, int64_t used,
                         const ExpertGroups& groups, float* hidden, StreamHandle stream,
                         const ExpertEpilogue& epilogue) {
  if (is_float_type(gate.type)) {
    float_expert_gated_matvec(gate, up, x.floats, used, groups, hidden, stream, epilogue);
    return;
  }
  MatvecArgs a = grouped_args(gate, x, used, groups, hidden);
  a.w_up = up.data;
  a.epilogue = epilogue;
  const dim3 grid(row_blocks(gate.type, gate.rows, gate.cols), static_cast<unsigned>(groups.max_chunks));
  launch_quantized<true>(gate.type, groups.tokens_per_chunk, grid, a, stream);
}

void expert_matvec(const DeviceMatrix& down, const MatvecInput& hidden, const ExpertGroups& groups, float* out,
                   StreamHandle stream, const ExpertEpilogue& epilogue) {
  if (is_float_type(down.type)) {
    float_expert_matvec(down, hidden.floats, groups, out, stream, epilogue);
    return;
  }
  MatvecArgs a = grouped_args(down, hidden, 1, groups, out);
  a.epilogue = epilogue;
  const dim3 grid(row_blocks(down.type, down.rows, down.cols), static_cast<unsigned>(groups.max_chunks));
  launch_quantized<false>(down.type, groups.tokens_per_chunk, grid, a, stream);
}

}  // namespace bloomery::cuda
