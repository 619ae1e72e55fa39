// Gated DeltaNet's layer on the GPU (qwen3next, qwen35moe), as engine/forward.cc's
// delta_net_attention computes it on the CPU: the causal convolution with SiLU over the [q, k, v]
// channels and its state, the L2 norm of the q and k heads, the gates, the gated delta rule over
// the recurrent states, and the splits of Qwen3-Next's fused projections; beside them the gated
// attention's query split and output gate, and the shared expert's sigmoid gate.
//
// Roundings: the convolution, SiLU, norms, gates and copies round as the CPU path does (each
// product and sum where it has one, fused multiply-adds where it fuses, exps as the host's); the
// delta rule's row dots sum in another order than ggml_vec_dot_f32, so its outputs and states
// differ from the CPU's in the last bits.
#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"
#include "cuda/common.cuh"

namespace bloomery::cuda {

namespace {

constexpr int kMaxConvKernel = 8;

// x / (1 + e^-x) with the CPU's AVX-512 SiLU's exp (cpu/avx512_math.h's silu_avx512).
__device__ __forceinline__ float silu_as_host(float x) { return __fdiv_rn(x, __fadd_rn(1.0f, exp_as_host(-x))); }

// 1 / (1 + e^-x), as engine/forward.cc's sigmoid (std::exp of a float: libm's expf).
__device__ __forceinline__ float sigmoid_as_host(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, exp_as_libm(-x))); }

// Segment `segment`'s rows [first, end) and state, picked out of the kernel parameter by
// predicated selects (indexing the parameter's arrays would copy it to local memory).
struct Segment {
  int first = 0, end = 0;
  float* state = nullptr;
};
__device__ __forceinline__ Segment segment_of(const RecurrentSegments& segments, int segment) {
  Segment picked;
#pragma unroll
  for (int i = 0; i < kMaxRecurrentSegments; ++i) {
    if (i == segment) picked = {segments.first_row[i], segments.first_row[i + 1], segments.states[i]};
  }
  return picked;
}

void check_segments(const RecurrentSegments& segments, const char* op) {
  bool ok = segments.count >= 0 && segments.count <= kMaxRecurrentSegments;
  for (int s = 0; ok && s < segments.count; ++s) {
    ok = segments.first_row[s] >= 0 && segments.first_row[s] <= segments.first_row[s + 1] && segments.states[s];
  }
  if (!ok) {
    throw Error("INVALID_ARGUMENT", std::string(op) + " takes at most " + std::to_string(kMaxRecurrentSegments) +
                                        " segments of nondecreasing rows, each with its state");
  }
}

void check_shape(const DeltaNetShape& shape, const char* op) {
  if (!delta_net_supports(shape)) {
    throw Error("UNSUPPORTED_MODEL", std::string(op) + ": the GPU's Gated DeltaNet takes head_dim 32, 64, 128 or 256 " +
                                         "and conv_kernel 2 to 8 (head_dim " + std::to_string(shape.head_dim) +
                                         ", conv_kernel " + std::to_string(shape.conv_kernel) + ", k_heads " +
                                         std::to_string(shape.k_heads) + ", v_heads " + std::to_string(shape.v_heads) +
                                         ")");
  }
}

// --- the convolution ---

constexpr int kConvMaxThreads = 512;
constexpr int kConvMaxParts = 16;
constexpr int kConvBatch = 8;  // rows whose inputs a thread loads at once

// Block (x, s) serves `width` channels of segment s, all its rows: thread (part, channel) the
// part-th of `parts` runs of consecutive rows (blocks of width * parts threads). Every thread
// first reads what it needs of inputs that other threads overwrite (the kernel - 1 inputs before
// its run, from the rows or the state), and part 0 also the segment's last kernel - 1 inputs (the
// next state); after the barrier each walks its rows in order, keeping its last inputs in
// registers (loading a batch of rows ahead), and writes silu(conv) over each input. Per output as
// cpu::conv_token_scalar: fused multiply-adds of input k (the earliest first) and tap k, into 0.
template <int Kernel>
__global__ void __launch_bounds__(kConvMaxThreads)
    conv_kernel(float* mixed, RecurrentSegments segments, int64_t channels, const float* taps, int width, int parts) {
  constexpr int kHeld = Kernel - 1;
  wait_for_previous_kernel();
  const int64_t c = static_cast<int64_t>(blockIdx.x) * width + threadIdx.x % width;
  const int part = static_cast<int>(threadIdx.x) / width;
  const bool valid = c < channels;
  const Segment segment = segment_of(segments, static_cast<int>(blockIdx.y));
  const int first = segment.first, rows = segment.end - segment.first;
  const int run = (rows + parts - 1) / parts;
  const int begin = min(rows, part * run), end = min(rows, begin + run);
  float* column = mixed + static_cast<int64_t>(first) * channels + c;
  float* state = segment.state + c * kHeld;
  // Row i of the segment's inputs, i < 0 for those the state holds (state[kHeld + i]).
  const auto original = [&](int i) { return i >= 0 ? column[static_cast<int64_t>(i) * channels] : state[kHeld + i]; };
  // The inputs of rows [t, t + kConvBatch) that are this thread's.
  const auto load_batch = [&](int t, float(&x)[kConvBatch]) {
#pragma unroll
    for (int j = 0; j < kConvBatch; ++j) x[j] = t + j < end ? column[static_cast<int64_t>(t + j) * channels] : 0.0f;
  };
  float held[kHeld], tap[Kernel], next_state[kHeld], x[kConvBatch];
  if (valid) {
    if (begin < end) {
#pragma unroll
      for (int k = 0; k < kHeld; ++k) held[k] = original(begin - kHeld + k);
#pragma unroll
      for (int k = 0; k < Kernel; ++k) tap[k] = taps[c * Kernel + k];
      load_batch(begin, x);
    }
    if (part == 0) {
#pragma unroll
      for (int k = 0; k < kHeld; ++k) next_state[k] = original(rows - kHeld + k);
    }
  }
  __syncthreads();
  if (!valid) return;
  for (int t = begin; t < end; t += kConvBatch) {
    float ahead[kConvBatch];
    if (t + kConvBatch < end) load_batch(t + kConvBatch, ahead);
#pragma unroll
    for (int j = 0; j < kConvBatch; ++j) {
      if (t + j < end) {
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < kHeld; ++k) sum = __fmaf_rn(held[k], tap[k], sum);
        sum = __fmaf_rn(x[j], tap[kHeld], sum);
        column[static_cast<int64_t>(t + j) * channels] = silu_as_host(sum);
#pragma unroll
        for (int k = 0; k + 1 < kHeld; ++k) held[k] = held[k + 1];
        held[kHeld - 1] = x[j];
      }
    }
#pragma unroll
    for (int j = 0; j < kConvBatch; ++j) x[j] = ahead[j];
  }
  if (part == 0) {
#pragma unroll
    for (int k = 0; k < kHeld; ++k) state[k] = next_state[k];
  }
}

// The L2 norm of the first `heads` heads of `head_dim` of each of `rows` rows (`stride` floats
// apart), one warp per head, as cpu::l2_norm: the squares rounded to float and summed in double
// (in another order, which in double rounds to the same float in practice), sqrt of the sum
// rounded to float, the scale 1 / max(that, eps), each value times it.
constexpr int kNormWarps = 8;

__global__ void __launch_bounds__(kNormWarps* kWarp)
    l2_norm_kernel(float* x, int64_t warps, int heads, int head_dim, int64_t stride, float eps) {
  wait_for_previous_kernel();
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * kNormWarps + threadIdx.x / kWarp;
  if (warp >= warps) return;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  float* head = x + (warp / heads) * stride + (warp % heads) * head_dim;
  double sum = 0.0;
  for (int j = lane; j < head_dim; j += kWarp) {
    const float v = head[j];
    sum = __dadd_rn(sum, static_cast<double>(__fmul_rn(v, v)));
  }
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  const float scale = __fdiv_rn(1.0f, fmaxf(__fsqrt_rn(static_cast<float>(sum)), eps));
  for (int j = lane; j < head_dim; j += kWarp) head[j] = __fmul_rn(head[j], scale);
}

// --- the rule ---

constexpr int kRuleWarps = 4;
constexpr int kRuleThreads = kRuleWarps * kWarp;

// How the rule kernel splits a head of `Dim`: kPerLane values of a state row per lane, kLanes
// lanes per row, kRows rows per block, kBlocksPerHead blocks per head. (16 values a lane took
// Qwen3-Next's prompt of 4,096 tokens through a layer in 1.4 ms on an H100, 8 in 1.9 ms.)
template <int Dim>
struct RuleLayout {
  static constexpr int kPerLane = Dim >= 64 ? 16 : 8;
  static constexpr int kLanes = Dim / kPerLane;
  static constexpr int kRows = kRuleWarps * kWarp / kLanes;
  static constexpr int kBlocksPerHead = Dim / kRows;
  static constexpr int kChunk = Dim <= 64 ? 16 : 8;  // tokens staged at a time
};

struct RuleArgs {
  int k_heads = 0, group = 0;
  bool grouped = false;
  int64_t channels = 0, key_width = 0, value_width = 0, conv_floats = 0;
  float scale = 1.0f;
};

// Block (x, s) serves kRows rows of value head h = x / kBlocksPerHead's state in segment s (row j:
// value element j), kLanes lanes a row: a row needs only itself, the head's k and q, v[j], g and
// beta. A lane holds kPerLane of its row's values in registers over the segment's tokens (runs of
// 4, kLanes * 4 apart, so that a warp's 16-byte loads of k and q from shared memory take
// consecutive addresses): per token the row scaled by exp(g) (libm's expf, as the CPU's
// std::exp), d = (v[j] - row . k) * beta, row += k d (fused), out[j] = (row . q) * scale, each
// rounded as cpu::delta_rule_token_scalar, the dots summed per lane then across the row's lanes
// (a token's k dot reduced together with the token before's q dot). The block's threads stage
// the tokens' operands in shared memory a chunk at a time, loading the next chunk while the
// warps walk this one.
template <int Dim>
__global__ void __launch_bounds__(kRuleThreads)
    rule_kernel(const float* __restrict__ mixed, const float* __restrict__ decay, const float* __restrict__ beta,
                RecurrentSegments segments, RuleArgs a, int64_t v_heads, float* __restrict__ out) {
  using L = RuleLayout<Dim>;
  constexpr int kPerLane = L::kPerLane, kLanes = L::kLanes, kRows = L::kRows, kChunk = L::kChunk;
  static_assert(kLanes >= 4 && kRows <= Dim && kLanes <= kWarp && kChunk * 2 * Dim % kRuleThreads == 0);
  __shared__ __align__(16) float qk[2][kChunk][2 * Dim];  // per token: q, then k
  __shared__ float vs[2][kChunk][kRows];
  __shared__ float factors[2][kChunk];  // exp(g)
  __shared__ float betas[2][kChunk];
  wait_for_previous_kernel();
  const Segment segment = segment_of(segments, static_cast<int>(blockIdx.y));
  const int first = segment.first, end = segment.end;
  if (first >= end) return;  // the whole block: one segment
  const int tid = static_cast<int>(threadIdx.x);
  const int part = tid % kLanes;  // of the row
  const int h = static_cast<int>(blockIdx.x) / L::kBlocksPerHead;
  const int j0 = (static_cast<int>(blockIdx.x) % L::kBlocksPerHead) * kRows, r = tid / kLanes;
  const int kh = a.grouped ? h / a.group : h % a.k_heads;
  const float* q_at = mixed + static_cast<int64_t>(kh) * Dim;  // + row * channels
  const float* k_at = q_at + a.key_width;
  const float* v_at = mixed + 2 * a.key_width + static_cast<int64_t>(h) * Dim + j0;
  float* row = segment.state + a.conv_floats + (static_cast<int64_t>(h) * Dim + j0 + r) * Dim;
  float* out_at = out + static_cast<int64_t>(h) * Dim + j0 + r;
  // Element e of this lane's share of a row.
  const auto element = [&](int e) { return (e / 4) * (4 * kLanes) + 4 * part + e % 4; };

  // Staging: a chunk's q and k values (kChunk rows of 2 * Dim) in passes of kColumns columns by
  // kRuleThreads / kColumns tokens; thread tid takes column tid % kColumns (and those kColumns on)
  // of token tid / kColumns (and those a pass on); then the chunk's v (kRows a token), g and
  // beta, kRuleThreads at a time. Loaded into registers, then stored into a shared buffer.
  constexpr int kColumns = 2 * Dim < kRuleThreads ? 2 * Dim : kRuleThreads;
  constexpr int kColumnPasses = 2 * Dim / kColumns, kTokenPasses = kChunk * kColumns / kRuleThreads;
  constexpr int kExtras = kChunk * (kRows + 2), kExtraPasses = (kExtras + kRuleThreads - 1) / kRuleThreads;
  const int column = tid % kColumns, token = tid / kColumns;
  const float* from[kColumnPasses];  // q or k at each of this thread's columns
#pragma unroll
  for (int c = 0; c < kColumnPasses; ++c) {
    const int i = column + c * kColumns;
    from[c] = i < Dim ? q_at + i : k_at + (i - Dim);
  }
  float staged[kTokenPasses][kColumnPasses], extras[kExtraPasses];
  const auto fetch = [&](int t0) {
#pragma unroll
    for (int p = 0; p < kTokenPasses; ++p) {
      const int t = t0 + token + p * (kRuleThreads / kColumns);
      if (t < end) {
#pragma unroll
        for (int c = 0; c < kColumnPasses; ++c) staged[p][c] = from[c][static_cast<int64_t>(t) * a.channels];
      }
    }
#pragma unroll
    for (int p = 0; p < kExtraPasses; ++p) {
      const int at = tid + p * kRuleThreads;
      if (at < kChunk * kRows) {
        const int t = t0 + at / kRows;
        if (t < end) extras[p] = v_at[static_cast<int64_t>(t) * a.channels + at % kRows];
      } else if (at < kExtras) {
        const int t = t0 + (at - kChunk * kRows) % kChunk;
        if (t < end) extras[p] = (at < kChunk * (kRows + 1) ? decay : beta)[static_cast<int64_t>(t) * v_heads + h];
      }
    }
  };
  const auto stash = [&](int buffer, int t0) {
#pragma unroll
    for (int p = 0; p < kTokenPasses; ++p) {
      const int at = token + p * (kRuleThreads / kColumns);
      if (t0 + at < end) {
#pragma unroll
        for (int c = 0; c < kColumnPasses; ++c) qk[buffer][at][column + c * kColumns] = staged[p][c];
      }
    }
#pragma unroll
    for (int p = 0; p < kExtraPasses; ++p) {
      const int at = tid + p * kRuleThreads;
      if (at >= kExtras || t0 + (at < kChunk * kRows ? at / kRows : (at - kChunk * kRows) % kChunk) >= end) continue;
      if (at < kChunk * kRows) {
        vs[buffer][at / kRows][at % kRows] = extras[p];
      } else if (at < kChunk * (kRows + 1)) {
        factors[buffer][at - kChunk * kRows] = exp_as_libm(extras[p]);
      } else {
        betas[buffer][at - kChunk * (kRows + 1)] = extras[p];
      }
    }
  };
  // The lane's 8 values of a token's q or k (at `values`, in shared memory).
  const auto share = [&](const float* values, float(&x)[kPerLane]) {
#pragma unroll
    for (int g = 0; g < kPerLane / 4; ++g) {
      const float4 v = *reinterpret_cast<const float4*>(values + element(4 * g));
      x[4 * g] = v.x, x[4 * g + 1] = v.y, x[4 * g + 2] = v.z, x[4 * g + 3] = v.w;
    }
  };
  // A dot of the lane's values, in two sums.
  const auto dot = [](const float(&x)[kPerLane], const float(&y)[kPerLane]) {
    float low = 0.0f, high = 0.0f;
#pragma unroll
    for (int e = 0; e < kPerLane / 2; ++e) {
      low = __fmaf_rn(x[e], y[e], low);
      high = __fmaf_rn(x[e + kPerLane / 2], y[e + kPerLane / 2], high);
    }
    return __fadd_rn(low, high);
  };

  float s[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) s[e] = row[element(e)];
  fetch(first);
  stash(0, first);
  __syncthreads();
  float q_dot = 0.0f;  // the token before's row . q, this lane's part
  int buffer = 0;
  for (int t0 = first; t0 < end; t0 += kChunk) {
    const int next = t0 + kChunk;
    if (next < end) fetch(next);
    const int count = min(kChunk, end - t0);
#pragma unroll 1
    for (int i = 0; i < count; ++i) {
      float k[kPerLane], q[kPerLane];
      share(qk[buffer][i] + Dim, k);
      share(qk[buffer][i], q);
      const float factor = factors[buffer][i];
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) s[e] = __fmul_rn(s[e], factor);
      float k_dot = dot(s, k);
#pragma unroll
      for (int offset = kLanes / 2; offset > 0; offset /= 2) {
        k_dot += __shfl_xor_sync(0xffffffffu, k_dot, offset);
        q_dot += __shfl_xor_sync(0xffffffffu, q_dot, offset);
      }
      const int t = t0 + i;
      if (t > first && part == 0) out_at[static_cast<int64_t>(t - 1) * a.value_width] = __fmul_rn(q_dot, a.scale);
      const float d = __fmul_rn(__fsub_rn(vs[buffer][i][r], k_dot), betas[buffer][i]);
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) s[e] = __fmaf_rn(k[e], d, s[e]);
      q_dot = dot(s, q);
    }
    if (next < end) stash(buffer ^ 1, next);
    __syncthreads();
    buffer ^= 1;
  }
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) q_dot += __shfl_xor_sync(0xffffffffu, q_dot, offset);
  if (part == 0) out_at[static_cast<int64_t>(end - 1) * a.value_width] = __fmul_rn(q_dot, a.scale);
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) row[element(e)] = s[e];
}

// --- elementwise ---

constexpr int kThreads = 256;

// ggml's softplus (linear above 20) as forward.cc computes it: std::log(1.0f + std::exp(x)),
// libm's logf and expf (correctly rounded here through double, as they return in practice).
__device__ __forceinline__ float softplus_as_host(float x) {
  if (x > 20.0f) return x;
  return static_cast<float>(log(static_cast<double>(__fadd_rn(1.0f, exp_as_libm(x)))));
}

__global__ void gates_kernel(float* beta, float* decay, int64_t count, int64_t v_heads, const float* dt_bias,
                             const float* a) {
  wait_for_previous_kernel();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const int64_t h = i % v_heads;
  beta[i] = sigmoid_as_host(beta[i]);
  decay[i] = __fmul_rn(softplus_as_host(__fadd_rn(decay[i], dt_bias[h])), a[h]);
}

// Element i of the grouped rows (row, key head kh, offset o in its part) to its place.
__global__ void split_qkvz_kernel(const float* grouped, int64_t count, int64_t k_heads, int64_t head_dim, int64_t group,
                                  float* mixed, float* z) {
  wait_for_previous_kernel();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const int64_t values = group * head_dim, per_head = 2 * head_dim + 2 * values;
  const int64_t key_width = k_heads * head_dim, channels = 2 * key_width + k_heads * values;
  const int64_t row = i / (k_heads * per_head), kh = i / per_head % k_heads, o = i % per_head;
  float* to;
  if (o < head_dim) {
    to = mixed + row * channels + kh * head_dim + o;
  } else if (o < 2 * head_dim) {
    to = mixed + row * channels + key_width + kh * head_dim + (o - head_dim);
  } else if (o < 2 * head_dim + values) {
    to = mixed + row * channels + 2 * key_width + kh * values + (o - 2 * head_dim);
  } else {
    to = z + row * k_heads * values + kh * values + (o - 2 * head_dim - values);
  }
  *to = grouped[i];
}

__global__ void split_beta_alpha_kernel(const float* grouped, int64_t count, int64_t v_heads, int64_t group,
                                        float* beta, float* decay) {
  wait_for_previous_kernel();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const int64_t row = i / (2 * v_heads), kh = i % (2 * v_heads) / (2 * group), o = i % (2 * group);
  if (o < group) {
    beta[row * v_heads + kh * group + o] = grouped[i];
  } else {
    decay[row * v_heads + kh * group + (o - group)] = grouped[i];
  }
}

__global__ void split_gated_query_kernel(const float* q_gated, int64_t count, int64_t head_dim, float* q, float* gate) {
  wait_for_previous_kernel();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const int64_t head = i / (2 * head_dim), o = i % (2 * head_dim);
  if (o < head_dim) {
    q[head * head_dim + o] = q_gated[i];
  } else {
    gate[head * head_dim + (o - head_dim)] = q_gated[i];
  }
}

__global__ void sigmoid_gate_kernel(float* x, const float* gate, int64_t count) {
  wait_for_previous_kernel();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) x[i] = __fmul_rn(x[i], sigmoid_as_host(gate[i]));
}

__global__ void add_sigmoid_gated_kernel(const float* rows, const float* gate_logits, int64_t count, int64_t width,
                                         float* residual) {
  wait_for_previous_kernel();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  residual[i] = __fadd_rn(residual[i], __fmul_rn(rows[i], sigmoid_as_host(gate_logits[i / width])));
}

// f(std::integral_constant<int, V>{}) for the one of Values equal to `value` (none: nothing).
template <int... Values, typename F>
void with_value(int value, F&& f) {
  (void)((value == Values ? (f(std::integral_constant<int, Values>{}), true) : false) || ...);
}

template <typename... Params, typename... Args>
void launch_elementwise(void (*kernel)(Params...), int64_t count, StreamHandle stream, Args... args) {
  if (count <= 0) return;
  launch_early(kernel, dim3(ceil_div(count, kThreads)), dim3(kThreads), 0, static_cast<cudaStream_t>(stream), args...);
}

}  // namespace

bool delta_net_supports(const DeltaNetShape& shape) {
  const int64_t d = shape.head_dim;
  return (d == 32 || d == 64 || d == 128 || d == 256) && shape.conv_kernel >= 2 &&
         shape.conv_kernel <= kMaxConvKernel && shape.k_heads > 0 && shape.v_heads > 0 &&
         shape.v_heads % shape.k_heads == 0;
}

void delta_net_conv(float* mixed, const RecurrentSegments& segments, const DeltaNetShape& shape, const float* taps,
                    float eps, StreamHandle stream) {
  check_shape(shape, "delta_net_conv");
  check_segments(segments, "delta_net_conv");
  if (segments.count == 0) return;
  int longest = 0;
  for (int s = 0; s < segments.count; ++s)
    longest = std::max(longest, segments.first_row[s + 1] - segments.first_row[s]);
  // Runs of rows per channel: a decode step's one row takes one thread per channel (blocks of 256
  // channels), a prompt's rows up to 16 threads per channel (runs of 16 rows and more; blocks of
  // 32 channels from 8 parts on).
  int parts = 1;
  while (parts < kConvMaxParts && longest >= 32 * parts) parts *= 2;
  const int width = std::max(kWarp, 256 / parts);
  const int64_t channels = shape.channels();
  const dim3 grid(ceil_div(channels, width), static_cast<unsigned>(segments.count));
  const auto s = static_cast<cudaStream_t>(stream);
  const auto launch = [&](auto kernel_taps) {
    constexpr int kKernel = decltype(kernel_taps)::value;
    launch_early(conv_kernel<kKernel>, grid, dim3(width * parts), 0, s, mixed, segments, channels, taps, width, parts);
  };
  with_value<2, 3, 4, 5, 6, 7, 8>(static_cast<int>(shape.conv_kernel), launch);
  const int64_t first = segments.first_row[0], rows = segments.first_row[segments.count] - first;
  const int heads = static_cast<int>(2 * shape.k_heads);
  const int64_t warps = rows * heads;
  if (warps == 0) return;
  launch_early(l2_norm_kernel, dim3(ceil_div(warps, kNormWarps)), dim3(kNormWarps * kWarp), 0, s,
               mixed + first * channels, warps, heads, static_cast<int>(shape.head_dim), channels, eps);
}

void delta_net_gates(float* beta, float* decay, int64_t n, int64_t v_heads, const float* dt_bias, const float* a,
                     StreamHandle stream) {
  launch_elementwise(gates_kernel, n * v_heads, stream, beta, decay, n * v_heads, v_heads, dt_bias, a);
}

void delta_net_rule(const float* mixed, const float* decay, const float* beta, const RecurrentSegments& segments,
                    const DeltaNetShape& shape, float* out, StreamHandle stream) {
  check_shape(shape, "delta_net_rule");
  check_segments(segments, "delta_net_rule");
  if (segments.count == 0) return;
  RuleArgs a;
  a.k_heads = static_cast<int>(shape.k_heads);
  a.group = static_cast<int>(shape.v_heads / shape.k_heads);
  a.grouped = shape.grouped_heads;
  a.channels = shape.channels();
  a.key_width = shape.key_width();
  a.value_width = shape.value_width();
  a.conv_floats = shape.conv_floats();
  // As cpu::gated_delta_rule computes it on the host.
  a.scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  const auto s = static_cast<cudaStream_t>(stream);
  const auto launch = [&](auto dim) {
    constexpr int kDim = decltype(dim)::value;
    const dim3 grid(static_cast<unsigned>(shape.v_heads * RuleLayout<kDim>::kBlocksPerHead),
                    static_cast<unsigned>(segments.count));
    launch_early(rule_kernel<kDim>, grid, dim3(kRuleThreads), 0, s, mixed, decay, beta, segments, a, shape.v_heads,
                 out);
  };
  with_value<32, 64, 128, 256>(static_cast<int>(shape.head_dim), launch);
}

void delta_net_split_qkvz(const float* grouped, int64_t n, const DeltaNetShape& shape, float* mixed, float* z,
                          StreamHandle stream) {
  const int64_t group = shape.v_heads / shape.k_heads;
  const int64_t count = n * shape.k_heads * (2 * shape.head_dim + 2 * group * shape.head_dim);
  launch_elementwise(split_qkvz_kernel, count, stream, grouped, count, shape.k_heads, shape.head_dim, group, mixed, z);
}

void delta_net_split_beta_alpha(const float* grouped, int64_t n, const DeltaNetShape& shape, float* beta, float* decay,
                                StreamHandle stream) {
  const int64_t group = shape.v_heads / shape.k_heads, count = n * 2 * shape.v_heads;
  launch_elementwise(split_beta_alpha_kernel, count, stream, grouped, count, shape.v_heads, group, beta, decay);
}

void split_gated_query(const float* q_gated, int64_t n, int64_t heads, int64_t head_dim, float* q, float* gate,
                       StreamHandle stream) {
  const int64_t count = n * heads * 2 * head_dim;
  launch_elementwise(split_gated_query_kernel, count, stream, q_gated, count, head_dim, q, gate);
}

void sigmoid_gate(float* x, const float* gate, int64_t count, StreamHandle stream) {
  launch_elementwise(sigmoid_gate_kernel, count, stream, x, gate, count);
}

void add_sigmoid_gated(const float* rows, const float* gate_logits, int64_t n, int64_t width, float* residual,
                       StreamHandle stream) {
  launch_elementwise(add_sigmoid_gated_kernel, n * width, stream, rows, gate_logits, n * width, width, residual);
}

}  // namespace bloomery::cuda
