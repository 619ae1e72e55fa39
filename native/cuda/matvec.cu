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

// Up to NT activation rows, from `first` on (`count` of them, the rest repeat the last and
// write nothing), through weight row `row` of `part` (expert `expert`'s, grouped). Quantizes a
// float activation row into `quantized` first where the launch gave one (NT 1 only).
template <uint32_t Type, int NT, bool Gated, int kLanes>
__device__ __forceinline__ void product_rows(const MatvecArgs& a, const MatvecPart& part, int row, int expert,
                                             int first, int count, bool grouped, ActivationBlock* quantized) {
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
    if (!a.x && a.x_floats) {
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
    const float up = Gated ? lanes_sum<kLanes>(acc_up[t]) : 0.0f;
    if (lane == t && t < count) {
      value = Gated ? gated_expert_value(value, up, a.epilogue, out_rows[t], row, part.rows)
                    : expert_output_value(value, a.epilogue, out_rows[t], row, part.rows);
      float* out = part.y + static_cast<int64_t>(out_rows[t]) * part.rows + row;
      *out = part.accumulate ? *out + value : value;
    }
  }
}

// A block serves kWarpsPerBlock * (32 / kLanes) weight rows of one part, against a chunk of up
// to NT activation rows: a dense batch's rows blockIdx.y * NT on, or the rows grouped to one
// expert (chunk blockIdx.y). Grouped chunks of 8 rows (tokens_per_expert_chunk) that hold one or
// two run as the product of one or two rows (in a decode step of a few streams most experts
// have one row, a few two: 8 rows' dots for each would make the product compute-bound). A row's
// sums are the same floats whatever NT: each row is dotted on its own, in the same order.
template <uint32_t Type, int NT, bool Gated, int kLanes>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp) matvec_kernel(MatvecArgs a) {
  extern __shared__ ActivationBlock quantized[];  // with x_floats: the block's activation row
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
                         const ExpertGroups& groups, float* hidden, StreamHandle stream,
                         const ExpertEpilogue& epilogue) {
  if (is_float_type(gate.type)) {
    float_expert_gated_matvec(gate, up, x.floats, used, groups, hidden, stream, epilogue);
    return;
  }
  MatvecArgs a = grouped_args(gate, x, used, groups, hidden);
  a.w_up = up.data;
  a.epilogue = epilogue;
  const dim3 grid(row_blocks(gate.rows, gate.cols), static_cast<unsigned>(groups.max_chunks));
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
  const dim3 grid(row_blocks(down.rows, down.cols), static_cast<unsigned>(groups.max_chunks));
  launch_quantized<false>(down.type, groups.tokens_per_chunk, grid, a, stream);
}

}  // namespace bloomery::cuda
