// Hyper-connections (DeepSeek-V4's residual of several streams), as llama.cpp's fused CPU ops
// (ggml_dsv4_hc_pre, ggml_dsv4_hc_comb, ggml_dsv4_hc_post) and the graph's ops around them
// compute them: a row's residual is `streams` copies of `width` floats; a block reads one mix
// of them and writes each stream as its output times a weight plus a mix of the old streams.
// llama.cpp's x86 build fuses each product into the sum that follows it, and so do we.
#pragma once

#include <cstdint>

#include "cpu/thread_pool.h"

namespace bloomery::cpu {

struct HyperShape {
  int64_t streams = 0;
  int64_t width = 0;
  int64_t sinkhorn_iterations = 0;
  float epsilon = 0;
};

// From each of n rows of (2 + streams) * streams mixes (the block's matrix times the normed
// streams) and the block's scale (3) and base: the input weights `pre` (n x streams:
// sigmoid(m * scale[0] + base) + epsilon), the output weights `post` (n x streams:
// 2 sigmoid(m * scale[1] + base)) and the streams' mix `comb` (n x streams x streams, [dst + streams
// * src]: a softmax over dst per src, then Sinkhorn's alternating normalizations).
void hyper_weights(const float* mixes, int64_t n, const float* scale, const float* base, const HyperShape& shape,
                   float* pre, float* post, float* comb);

// The head's input weights: from n rows of `streams` mixes, sigmoid(m * scale[0] + base) + epsilon.
void hyper_head_weights(const float* mixes, int64_t n, const float* scale, const float* base, const HyperShape& shape,
                        float* pre);

// out[i] = sum over streams s of pre[i][s] * residual[i][s] (n rows of width).
void hyper_pre(const float* residual, const float* pre, int64_t n, const HyperShape& shape, float* out,
               ThreadPool& pool);

// residual[i][dst] = x[i] * post[i][dst] + sum over src of residual[i][src] * comb[i][dst][src],
// in place (n rows).
void hyper_post(const float* x, const float* post, const float* comb, int64_t n, const HyperShape& shape,
                float* residual, ThreadPool& pool);

}  // namespace bloomery::cpu
