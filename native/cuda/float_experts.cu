// Expert stacks of a float weight type (F32, F16, BF16) against float rows: one warp per weight
// row, lanes striding over its columns, up to NT routed rows of one expert at a time (a chunk
// of moe.cu's grouping), with the gate and up products fused as in matvec.cu's integer kernel.
#include "cuda/common.cuh"

namespace bloomery::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;

struct FloatExpertArgs {
  const uint8_t* w;
  const uint8_t* w_up;  // gated products only
  size_t row_bytes;
  size_t matrix_bytes;
  int rows;
  int cols;
  const float* x;
  int x_row_divisor;  // routed slot -> activation row
  float* y;
  ExpertGroups groups;
  ExpertEpilogue epilogue;
};

template <uint32_t Type, int NT, bool Gated>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp) float_expert_kernel(FloatExpertArgs a) {
  const int lane = threadIdx.x % kWarp;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarp;
  const int c = blockIdx.y;
  if (c >= *a.groups.chunk_count || row >= a.rows) return;
  const int expert = a.groups.chunks[3 * c], first = a.groups.chunks[3 * c + 1], count = a.groups.chunks[3 * c + 2];
  // Rows past `count` repeat the last one so the inner loop has no branches; their sums are dropped.
  const float* xs[NT];
  int out_rows[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int slot = a.groups.order[first + min(t, count - 1)];
    xs[t] = a.x + static_cast<int64_t>(slot / a.x_row_divisor) * a.cols;
    out_rows[t] = slot;
  }
  const size_t offset = static_cast<size_t>(expert) * a.matrix_bytes + static_cast<size_t>(row) * a.row_bytes;
  float acc[NT] = {};
  float acc_up[Gated ? NT : 1] = {};
  for (int col = lane; col < a.cols; col += kWarp) {
    const float weight = float_weight<Type>(a.w + offset, col);
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] += weight * float_operand<Type>(xs[t][col]);
    if constexpr (Gated) {
      const float weight_up = float_weight<Type>(a.w_up + offset, col);
#pragma unroll
      for (int t = 0; t < NT; ++t) acc_up[t] += weight_up * float_operand<Type>(xs[t][col]);
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    float value = warp_sum(acc[t]);
    const float up = Gated ? warp_sum(acc_up[t]) : 0.0f;
    if (lane == t && t < count) {
      value = Gated ? gated_expert_value(value, up, a.epilogue, out_rows[t], row, a.rows)
                    : expert_output_value(value, a.epilogue, out_rows[t], row, a.rows);
      a.y[static_cast<int64_t>(out_rows[t]) * a.rows + row] = value;
    }
  }
}

template <bool Gated>
void launch(uint32_t type, const FloatExpertArgs& a, cudaStream_t stream) {
  const dim3 grid(ceil_div(a.rows, kWarpsPerBlock), static_cast<unsigned>(a.groups.max_chunks));
  constexpr int kThreads = kWarpsPerBlock * kWarp;
  with_type(FloatTypes{}, type, [&](auto t) {
    constexpr uint32_t kType = decltype(t)::value;
    switch (a.groups.tokens_per_chunk) {
      case 1:
        float_expert_kernel<kType, 1, Gated><<<grid, kThreads, 0, stream>>>(a);
        break;
      case 2:
        float_expert_kernel<kType, 2, Gated><<<grid, kThreads, 0, stream>>>(a);
        break;
      case 4:
        float_expert_kernel<kType, 4, Gated><<<grid, kThreads, 0, stream>>>(a);
        break;
      default:
        float_expert_kernel<kType, 8, Gated><<<grid, kThreads, 0, stream>>>(a);
        break;
    }
  });
}

FloatExpertArgs args(const DeviceMatrix& w, const float* x, int64_t divisor, const ExpertGroups& groups, float* y,
                     const ExpertEpilogue& epilogue) {
  return {w.data,
          nullptr,
          w.row_bytes,
          w.matrix_bytes,
          static_cast<int>(w.rows),
          static_cast<int>(w.cols),
          x,
          static_cast<int>(divisor),
          y,
          groups,
          epilogue};
}

}  // namespace

void float_expert_gated_matvec(const DeviceMatrix& gate, const DeviceMatrix& up, const float* x, int64_t used,
                               const ExpertGroups& groups, float* hidden, StreamHandle stream,
                               const ExpertEpilogue& epilogue) {
  FloatExpertArgs a = args(gate, x, used, groups, hidden, epilogue);
  a.w_up = up.data;
  launch<true>(gate.type, a, static_cast<cudaStream_t>(stream));
}

void float_expert_matvec(const DeviceMatrix& down, const float* hidden, const ExpertGroups& groups, float* out,
                         StreamHandle stream, const ExpertEpilogue& epilogue) {
  launch<false>(down.type, args(down, hidden, 1, groups, out, epilogue), static_cast<cudaStream_t>(stream));
}

}  // namespace bloomery::cuda
