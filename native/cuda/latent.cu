// Multi-head latent attention's heads made ready, one warp per head, as the CPU path does it
// (engine/forward.cc: mla_attention): each query head split into its unrotated part (which the
// absorbed key up-projection multiplies next) and its rotated part; each token's latent RMS-normed
// and its rotary key rotated, both stored as f16 into its sequence's cache row. Every step rounds
// as the CPU's (cpu/rms_norm.cc: float squares summed in double; cpu/rope.cc), with no fused
// multiply-add.
#include "base/error.h"
#include "cuda/common.cuh"
#include "cuda/rope.cuh"

namespace bloomery::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxRope = 128;

__global__ void __launch_bounds__(kWarpsPerBlock* kWarp)
    split_query_kernel(const float* q, int64_t heads_total, int heads, int nope, const int32_t* positions,
                       RopeShape rope, float* nope_out, float* rope_out) {
  wait_for_previous_kernel();
  __shared__ float staged[kWarpsPerBlock][kMaxRope];
  const int64_t head = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (head >= heads_total) return;
  const int lane = threadIdx.x % kWarp, dims = static_cast<int>(rope.dims);
  const float* x = q + head * (nope + dims);
  for (int j = lane; j < nope; j += kWarp) nope_out[head * nope + j] = x[j];
  float* values = staged[threadIdx.x / kWarp];
  for (int j = lane; j < dims; j += kWarp) values[j] = x[nope + j];
  __syncwarp();
  float* out = rope_out + head * dims;
  rotate_pairs(rope, positions[head / heads], values, [&](int j, float v) { out[j] = v; });
}

__global__ void __launch_bounds__(kWarpsPerBlock* kWarp)
    store_latent_kernel(const float* kv, int64_t n, int rank, const float* norm, float eps, const int32_t* positions,
                        RopeShape rope, KvSegments cache, int64_t key_row) {
  wait_for_previous_kernel();
  __shared__ float staged[kWarpsPerBlock][kMaxRope];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (row >= n) return;
  const int lane = threadIdx.x % kWarp, dims = static_cast<int>(rope.dims), width = rank + dims;
  int s = 0;
  while (row >= cache.first_row[s + 1]) ++s;
  uint16_t* slot = cache.keys[s] + static_cast<int64_t>(positions[row]) * key_row;
  const float* x = kv + row * width;
  double sum = 0.0;
  for (int j = lane; j < rank; j += kWarp) sum = __dadd_rn(sum, static_cast<double>(__fmul_rn(x[j], x[j])));
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  const auto mean = static_cast<float>(sum / static_cast<double>(rank));
  const float scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
  for (int j = lane; j < rank; j += kWarp) {
    slot[j] = __half_as_ushort(__float2half(__fmul_rn(__fmul_rn(x[j], scale), norm[j])));
  }
  float* values = staged[threadIdx.x / kWarp];
  for (int j = lane; j < dims; j += kWarp) values[j] = x[rank + j];
  __syncwarp();
  rotate_pairs(rope, positions[row], values,
               [&](int j, float v) { slot[rank + j] = __half_as_ushort(__float2half(v)); });
}

// A warp per row: its floats as f16 into the row's cache row.
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp)
    store_rows_kernel(const float* x, int64_t n, int width, const int32_t* positions, KvSegments cache,
                      int64_t key_row) {
  wait_for_previous_kernel();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (row >= n) return;
  const int lane = threadIdx.x % kWarp;
  int s = 0;
  while (row >= cache.first_row[s + 1]) ++s;
  uint16_t* slot = cache.keys[s] + static_cast<int64_t>(positions[row]) * key_row;
  for (int j = lane; j < width; j += kWarp) slot[j] = __half_as_ushort(__float2half(x[row * width + j]));
}

void check_segments(const KvSegments& cache, int64_t n, const char* what) {
  if (cache.count < 1 || cache.count > kMaxKvSegments || cache.first_row[0] != 0 || cache.first_row[cache.count] != n) {
    throw Error("INVALID_ARGUMENT", std::string(what) + "'s cache segments must cover its " + std::to_string(n) +
                                        " rows in at most " + std::to_string(kMaxKvSegments) + " segments");
  }
}

void check_rope(const RopeShape& rope) {
  if (rope.dims > kMaxRope || rope.dims % 2 != 0) {
    throw Error("UNSUPPORTED_MODEL", "GPU latent attention rotates an even count of at most " +
                                         std::to_string(kMaxRope) + " dims, not " + std::to_string(rope.dims));
  }
}

}  // namespace

void split_latent_query(const float* q, int64_t n, int64_t heads, int64_t nope, const int32_t* positions,
                        const RopeShape& rope, float* nope_out, float* rope_out, StreamHandle stream) {
  check_rope(rope);
  const int64_t total = n * heads;
  if (total == 0) return;
  launch_early(split_query_kernel, dim3(ceil_div(total, kWarpsPerBlock)), dim3(kWarpsPerBlock * kWarp), 0,
               static_cast<cudaStream_t>(stream), q, total, static_cast<int>(heads), static_cast<int>(nope), positions,
               rope, nope_out, rope_out);
}

void store_latent(const float* kv, int64_t n, int64_t rank, const float* norm, float eps, const int32_t* positions,
                  const RopeShape& rope, const KvSegments& cache, int64_t key_row, StreamHandle stream) {
  check_rope(rope);
  if (key_row < rank + rope.dims) {
    throw Error("INVALID_ARGUMENT", "store_latent's cache rows of " + std::to_string(key_row) +
                                        " halves cannot hold a latent and rotary key of " +
                                        std::to_string(rank + rope.dims));
  }
  check_segments(cache, n, "store_latent");
  launch_early(store_latent_kernel, dim3(ceil_div(n, kWarpsPerBlock)), dim3(kWarpsPerBlock * kWarp), 0,
               static_cast<cudaStream_t>(stream), kv, n, static_cast<int>(rank), norm, eps, positions, rope, cache,
               key_row);
}

void store_rows(const float* x, int64_t n, int64_t width, const int32_t* positions, const KvSegments& cache,
                int64_t key_row, StreamHandle stream) {
  if (key_row < width) {
    throw Error("INVALID_ARGUMENT", "store_rows' cache rows of " + std::to_string(key_row) +
                                        " halves cannot hold rows of " + std::to_string(width));
  }
  check_segments(cache, n, "store_rows");
  if (n == 0) return;
  launch_early(store_rows_kernel, dim3(ceil_div(n, kWarpsPerBlock)), dim3(kWarpsPerBlock * kWarp), 0,
               static_cast<cudaStream_t>(stream), x, n, static_cast<int>(width), positions, cache, key_row);
}

}  // namespace bloomery::cuda
