// Hyper-connections on the GPU (DeepSeek-V4's residual of several streams), as cpu/hyper_connections.cc
// computes them, op for op: the weights of a block's input mix, output and streams' mix (a softmax per
// source, then Sinkhorn's alternating normalizations), the head's input weights, the input mix and the
// residual's update. Each product rounds where the CPU's does and fuses where it fuses; exps are libm's
// (through double), so every float equals the CPU's.
#include "base/error.h"
#include "cuda/common.cuh"

namespace bloomery::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxStreams = 8;

__device__ __forceinline__ float sigmoid_as_libm(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, exp_as_libm(-x))); }

// Scales each line of c (as cpu's normalize_lines: line i's entries c[i * line + k * step]) to sum
// to one, epsilon added to the sum. S: the streams (see weights_kernel).
template <int S>
__device__ __forceinline__ void normalize_lines(float* c, int streams, float eps, int line, int step) {
  const int s = S > 0 ? S : streams;
#pragma unroll
  for (int i = 0; i < (S > 0 ? S : kMaxStreams); ++i) {
    if (i >= s) break;
    float* first = c + i * line;
    float sum = eps;
#pragma unroll
    for (int k = 0; k < (S > 0 ? S : kMaxStreams); ++k) {
      if (k < s) sum = __fadd_rn(sum, first[k * step]);
    }
    const float inv = __fdiv_rn(1.0f, sum);
#pragma unroll
    for (int k = 0; k < (S > 0 ? S : kMaxStreams); ++k) {
      if (k < s) first[k * step] = __fmul_rn(first[k * step], inv);
    }
  }
}

// A thread per row: pre, post and comb from the row's (2 + streams) * streams mixes. S is the
// streams where known when compiled (DeepSeek-V4's 4): every index of the streams' matrix is then a
// constant and the matrix stays in registers through Sinkhorn's iterations, where indexed at run
// time (S = 0, up to kMaxStreams) it lives in local memory and a decode step's one thread waits on
// it (47 us a layer on an H200). The operations and their order are the same either way.
template <int S>
__global__ void weights_kernel(const float* mixes, int64_t n, const float* scale, const float* base, HyperShape shape,
                               float* pre, float* post, float* comb) {
  wait_for_previous_kernel();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  constexpr int kMax = S > 0 ? S : kMaxStreams;
  const int s = S > 0 ? S : static_cast<int>(shape.streams);
  const float* m = mixes + i * (2 + s) * s;
#pragma unroll
  for (int h = 0; h < kMax; ++h) {
    if (h >= s) break;
    pre[i * s + h] = __fadd_rn(sigmoid_as_libm(__fadd_rn(__fmul_rn(m[h], scale[0]), base[h])), shape.epsilon);
    post[i * s + h] = __fmul_rn(2.0f, sigmoid_as_libm(__fadd_rn(__fmul_rn(m[s + h], scale[1]), base[s + h])));
  }
  float c[kMax * kMax];
#pragma unroll
  for (int src = 0; src < kMax; ++src) {
    if (src >= s) break;
    float max = -INFINITY;
#pragma unroll
    for (int dst = 0; dst < kMax; ++dst) {
      if (dst >= s) break;
      const int at = dst + s * src;
      c[at] = __fmaf_rn(m[2 * s + at], scale[2], base[2 * s + at]);
      max = fmaxf(max, c[at]);
    }
    float sum = 0.0f;
#pragma unroll
    for (int dst = 0; dst < kMax; ++dst) {
      if (dst >= s) break;
      const int at = dst + s * src;
      c[at] = exp_as_libm(__fsub_rn(c[at], max));
      sum = __fadd_rn(sum, c[at]);
    }
    const float inv = __fdiv_rn(1.0f, sum);
#pragma unroll
    for (int dst = 0; dst < kMax; ++dst) {
      if (dst < s) c[dst + s * src] = __fmaf_rn(c[dst + s * src], inv, shape.epsilon);
    }
  }
  normalize_lines<S>(c, s, shape.epsilon, 1, s);
  for (int64_t k = 1; k < shape.sinkhorn_iterations; ++k) {
    normalize_lines<S>(c, s, shape.epsilon, s, 1);
    normalize_lines<S>(c, s, shape.epsilon, 1, s);
  }
#pragma unroll
  for (int at = 0; at < kMax * kMax; ++at) {
    if (at < s * s) comb[i * s * s + at] = c[at];
  }
}

__global__ void head_weights_kernel(const float* mixes, int64_t count, int streams, const float* scale,
                                    const float* base, float epsilon, float* pre) {
  wait_for_previous_kernel();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  pre[i] = __fadd_rn(sigmoid_as_libm(__fadd_rn(__fmul_rn(mixes[i], scale[0]), base[i % streams])), epsilon);
}

// A thread per (row, column): the weighted sum of the column's streams.
__global__ void pre_kernel(const float* residual, const float* pre, int64_t n, int streams, int64_t width, float* out) {
  wait_for_previous_kernel();
  const int64_t at = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (at >= n * width) return;
  const int64_t i = at / width, j = at % width;
  const float* r = residual + i * streams * width + j;
  float sum = 0.0f;
  for (int h = 0; h < streams; ++h) sum = __fmaf_rn(r[h * width], pre[i * streams + h], sum);
  out[at] = sum;
}

// A thread per (row, column): the column's old streams read, then each stream rewritten.
__global__ void post_kernel(const float* x, const float* post, const float* comb, int64_t n, int streams, int64_t width,
                            float* residual) {
  wait_for_previous_kernel();
  const int64_t at = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (at >= n * width) return;
  const int64_t i = at / width, j = at % width;
  float* r = residual + i * streams * width + j;
  float old[kMaxStreams];
  for (int h = 0; h < streams; ++h) old[h] = r[h * width];
  const float* c = comb + i * streams * streams;
  for (int dst = 0; dst < streams; ++dst) {
    float sum = __fmul_rn(x[at], post[i * streams + dst]);
    for (int src = 0; src < streams; ++src) sum = __fmaf_rn(old[src], c[dst + streams * src], sum);
    r[dst * width] = sum;
  }
}

// A thread per (row, column): the embedding's column copied into each of the row's streams.
__global__ void spread_kernel(const float* x, int64_t n, int streams, int64_t width, float* residual) {
  wait_for_previous_kernel();
  const int64_t at = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (at >= n * width) return;
  const int64_t i = at / width, j = at % width;
  const float v = x[at];
  for (int h = 0; h < streams; ++h) residual[(i * streams + h) * width + j] = v;
}

void check(const HyperShape& shape) {
  if (shape.streams < 1 || shape.streams > kMaxStreams) {
    throw Error("UNSUPPORTED_MODEL", "the GPU's hyper-connections serve 1 to " + std::to_string(kMaxStreams) +
                                         " streams, not " + std::to_string(shape.streams));
  }
}

dim3 blocks_for(int64_t count) { return dim3(static_cast<unsigned>(ceil_div(count, kThreads))); }

}  // namespace

void spread_streams(const float* x, int64_t n, const HyperShape& shape, float* residual, StreamHandle stream) {
  check(shape);
  if (n == 0) return;
  launch_early(spread_kernel, blocks_for(n * shape.width), dim3(kThreads), 0, static_cast<cudaStream_t>(stream), x, n,
               static_cast<int>(shape.streams), shape.width, residual);
}

void hyper_weights(const float* mixes, int64_t n, const float* scale, const float* base, const HyperShape& shape,
                   float* pre, float* post, float* comb, StreamHandle stream) {
  check(shape);
  if (n == 0) return;
  // DeepSeek-V4 has 4 streams.
  const auto kernel = shape.streams == 4 ? weights_kernel<4> : weights_kernel<0>;
  launch_early(kernel, blocks_for(n), dim3(kThreads), 0, static_cast<cudaStream_t>(stream), mixes, n, scale, base,
               shape, pre, post, comb);
}

void hyper_head_weights(const float* mixes, int64_t n, const float* scale, const float* base, const HyperShape& shape,
                        float* pre, StreamHandle stream) {
  check(shape);
  if (n == 0) return;
  launch_early(head_weights_kernel, blocks_for(n * shape.streams), dim3(kThreads), 0, static_cast<cudaStream_t>(stream),
               mixes, n * shape.streams, static_cast<int>(shape.streams), scale, base, shape.epsilon, pre);
}

void hyper_pre(const float* residual, const float* pre, int64_t n, const HyperShape& shape, float* out,
               StreamHandle stream) {
  check(shape);
  if (n == 0) return;
  launch_early(pre_kernel, blocks_for(n * shape.width), dim3(kThreads), 0, static_cast<cudaStream_t>(stream), residual,
               pre, n, static_cast<int>(shape.streams), shape.width, out);
}

void hyper_post(const float* x, const float* post, const float* comb, int64_t n, const HyperShape& shape,
                float* residual, StreamHandle stream) {
  check(shape);
  if (n == 0) return;
  launch_early(post_kernel, blocks_for(n * shape.width), dim3(kThreads), 0, static_cast<cudaStream_t>(stream), x, post,
               comb, n, static_cast<int>(shape.streams), shape.width, residual);
}

}  // namespace bloomery::cuda
