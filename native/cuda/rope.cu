// Attention heads made ready for the cache and the scores in one launch: bias, per-head RMS
// norm and rotary position embedding, one warp per head, and the k and v heads written to the
// f16 KV cache. Beside it, DeepSeek-V4's rotation of each head's last dims, and its inverse.
#include "base/error.h"
#include "cuda/common.cuh"
#include "cuda/rope.cuh"

namespace bloomery::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxHeadDim = 256;

// Warp w of the grid serves head w % per_row of row w / per_row; per row the q heads, then
// the k heads, then (when v has a bias or goes to the cache) the v heads. Each step rounds as
// the CPU path does (engine/forward.cc: add_bias, then cpu/rms_norm.cc's norm per head, then
// cpu/rope.cc), fused multiply-adds only where it has them; the cache gets each final value rounded to f16.
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp)
    position_heads_kernel(AttentionHeads h, int64_t warps, int per_row, const int32_t* positions, RopeShape shape) {
  wait_for_previous_kernel();
  __shared__ float staged[kWarpsPerBlock][kMaxHeadDim];
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (warp >= warps) return;
  const int lane = threadIdx.x % kWarp;
  const int64_t row = warp / per_row;
  int head = static_cast<int>(warp % per_row);
  int width = static_cast<int>(h.head_dim);  // this head's
  float* x;
  const float* bias;
  const float* norm = nullptr;
  bool rotate = true;
  uint16_t* cache = nullptr;  // this head's f16 slot in the KV cache, if it goes there
  const auto cache_slot = [&](uint16_t* const* tables, int64_t row_width) -> uint16_t* {
    if (h.cache.count == 0) return nullptr;
    int s = 0;
    while (row >= h.cache.first_row[s + 1]) ++s;
    return tables[s] + static_cast<int64_t>(positions[row]) * row_width + head * width;
  };
  if (head < h.heads) {
    x = h.q + (row * h.heads + head) * width;
    bias = h.q_bias;
    norm = h.q_norm;
  } else if ((head -= static_cast<int>(h.heads)) < h.kv_heads) {
    x = h.k + (row * h.kv_heads + head) * width;
    bias = h.k_bias;
    norm = h.k_norm;
    cache = cache_slot(h.cache.keys, h.key_row);
  } else {
    head -= static_cast<int>(h.kv_heads);
    width = static_cast<int>(h.value_dim);
    x = h.v + (row * h.kv_heads + head) * width;
    bias = h.v_bias;
    rotate = false;
    cache = cache_slot(h.cache.values, h.value_row);
  }
  if (bias) bias += static_cast<int64_t>(head) * width;
  float* values = staged[threadIdx.x / kWarp];
  double sum = 0.0;
  for (int j = lane; j < width; j += kWarp) {
    float v = x[j];
    if (bias) v = __fadd_rn(v, bias[j]);
    values[j] = v;
    const auto d = static_cast<double>(v);
    sum = __dadd_rn(sum, __dmul_rn(d, d));
  }
  if (norm) {
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    const auto mean = static_cast<float>(sum / static_cast<double>(width));
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, h.eps)));
    for (int j = lane; j < width; j += kWarp) values[j] = __fmul_rn(__fmul_rn(values[j], scale), norm[j]);
  }
  __syncwarp();
  const int dims = rotate ? static_cast<int>(shape.dims) : 0;
  const auto put = [&](int j, float value) {
    x[j] = value;
    if (cache) cache[j] = __half_as_ushort(__float2half(value));
  };
  for (int j = dims + lane; j < width; j += kWarp) put(j, values[j]);
  if (rotate) rotate_pairs(shape, positions[row], values, put);
}

// One warp per head: its last rope.dims values rotated at its token's position, or (`inverse`) by
// the opposite angle, as cpu::rope_apply with the angles' sines negated (ggml_rope_ext_back).
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp)
    rotate_tails_kernel(float* x, int64_t heads_total, int heads, int head_dim, const int32_t* positions,
                        RopeShape rope, bool inverse) {
  wait_for_previous_kernel();
  const int64_t head = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (head >= heads_total) return;
  float* tail = x + head * head_dim + head_dim - rope.dims;
  const int half = static_cast<int>(rope.dims) / 2, position = positions[head / heads];
  for (int i = threadIdx.x % kWarp; i < half; i += kWarp) {
    float c, s;
    rope_angle(rope, position, i, &c, &s);
    if (inverse) s = -s;
    const int a = rope.neox ? i : 2 * i, b = rope.neox ? i + half : 2 * i + 1;
    const float x0 = tail[a], x1 = tail[b];
    tail[a] = __fmaf_rn(x0, c, -__fmul_rn(x1, s));
    tail[b] = __fmaf_rn(x0, s, __fmul_rn(x1, c));
  }
}

}  // namespace

void rotate_tails(float* x, int64_t n, int64_t heads, int64_t head_dim, const int32_t* positions, const RopeShape& rope,
                  bool inverse, StreamHandle stream) {
  if (rope.dims > head_dim || rope.dims % 2 != 0) {
    throw Error("INVALID_ARGUMENT", "rotate_tails turns an even count of at most head_dim (" +
                                        std::to_string(head_dim) + ") dims, not " + std::to_string(rope.dims));
  }
  const int64_t total = n * heads;
  if (total == 0) return;
  launch_early(rotate_tails_kernel, dim3(ceil_div(total, kWarpsPerBlock)), dim3(kWarpsPerBlock * kWarp), 0,
               static_cast<cudaStream_t>(stream), x, total, static_cast<int>(heads), static_cast<int>(head_dim),
               positions, rope, inverse);
}

void position_heads(const AttentionHeads& heads, int64_t n, const int32_t* positions, const RopeShape& shape,
                    StreamHandle stream) {
  const AttentionHeads h = with_cache_rows(heads);
  if (h.value_dim > kMaxHeadDim || h.key_row < h.kv_heads * h.head_dim || h.value_row < h.kv_heads * h.value_dim) {
    throw Error("UNSUPPORTED_MODEL", "GPU attention heads need value heads up to " + std::to_string(kMaxHeadDim) +
                                         " wide, in cache rows that hold the layer's KV heads (value_dim " +
                                         std::to_string(h.value_dim) + ")");
  }
  if (h.head_dim > kMaxHeadDim || shape.dims > h.head_dim || shape.dims % 2 != 0) {
    throw Error("UNSUPPORTED_MODEL", "GPU rotary embedding needs head_dim up to " + std::to_string(kMaxHeadDim) +
                                         " and an even rotated width within it (head_dim " +
                                         std::to_string(h.head_dim) + ", rotated " + std::to_string(shape.dims) + ")");
  }
  if (h.cache.count < 0 || h.cache.count > kMaxKvSegments ||
      (h.cache.count > 0 && (h.cache.first_row[0] != 0 || h.cache.first_row[h.cache.count] != n))) {
    throw Error("INVALID_ARGUMENT", "position_heads' KV cache segments must cover its " + std::to_string(n) +
                                        " rows in at most " + std::to_string(kMaxKvSegments) + " segments");
  }
  const bool v_heads = h.v_bias || h.cache.count > 0;
  const int per_row = static_cast<int>(h.heads + h.kv_heads + (v_heads ? h.kv_heads : 0));
  const int64_t warps = n * per_row;
  if (warps == 0) return;
  launch_early(position_heads_kernel, dim3(ceil_div(warps, kWarpsPerBlock)), dim3(kWarpsPerBlock * kWarp), 0,
               static_cast<cudaStream_t>(stream), h, warps, per_row, positions, shape);
}

}  // namespace bloomery::cuda
