#include "cpu/lightning_indexer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cpu/cpu_dispatch.h"
#include "quant/float_formats.h"

namespace bloomery::cpu {

namespace {

constexpr uint32_t kF32 = 0;  // ggml's type id of F32

}  // namespace

std::vector<float> hadamard_matrix(int64_t dim) {
  std::vector<float> h(static_cast<size_t>(dim * dim));
  h[0] = 1.0f / std::sqrt(static_cast<float>(dim));
  for (int64_t s = 1; s < dim; s *= 2) {
    for (int64_t i = 0; i < s; ++i) {
      for (int64_t j = 0; j < s; ++j) {
        const float v = h[i * dim + j];
        h[(i + s) * dim + j] = v;
        h[i * dim + j + s] = v;
        h[(i + s) * dim + j + s] = -v;
      }
    }
  }
  return h;
}

namespace {

// select_positions for a group of tokens, whose scores `scores` holds at once.
void select_group(const float* q, const float* weights, int64_t n, int64_t first_position, const uint16_t* keys,
                  const IndexerShape& shape, int32_t* selected, std::vector<float>& scores, ThreadPool& pool) {
  const quant::VecDotFn dot = host_quant_kernels(kF32).vec_dot;
  const int64_t d = shape.head_dim, k = shape.top_k, positions = (first_position + n) / shape.ratio;
  // The scores of every (token, position) it sees, in tasks of one token and a block of
  // positions, so a decode step's one token spreads over the threads too.
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (positions + kBlock - 1) / kBlock;
  scores.resize(static_cast<size_t>(n * positions));
  float* all = scores.data();
  pool.parallel_for(static_cast<size_t>(n * blocks), 1, [&](size_t begin, size_t end) {
    thread_local std::vector<float> key;
    key.resize(static_cast<size_t>(d));
    for (size_t task = begin; task < end; ++task) {
      const int64_t i = static_cast<int64_t>(task) / blocks, block = static_cast<int64_t>(task) % blocks;
      const int64_t seen = (first_position + i + 1) / shape.ratio;
      if (seen <= k) continue;
      const float* qi = q + i * shape.heads * d;
      const float* wi = weights + i * shape.heads;
      for (int64_t p = block * kBlock; p < std::min(seen, (block + 1) * kBlock); ++p) {
        const uint16_t* kp = keys + p * shape.key_stride;
        for (int64_t j = 0; j < d; ++j) key[j] = quant::fp16_to_fp32(kp[j]);
        float score = 0.0f;
        for (int64_t h = 0; h < shape.heads; ++h) {
          const float qk = dot(qi + h * d, key.data(), d);
          // ggml's x86 build fuses the product into the sum.
          score = std::fma(std::max(qk, 0.0f), wi[h], score);
        }
        all[i * positions + p] = score;
      }
    }
  });
  pool.parallel_for(static_cast<size_t>(n), 1, [&](size_t begin, size_t end) {
    thread_local std::vector<int32_t> order;
    for (auto i = static_cast<int64_t>(begin); i < static_cast<int64_t>(end); ++i) {
      const int64_t seen = (first_position + i + 1) / shape.ratio;
      int32_t* out = selected + i * k;
      if (seen <= k) {
        std::iota(out, out + seen, 0);
        std::fill(out + seen, out + k, -1);
        continue;
      }
      const float* row = all + i * positions;
      order.resize(static_cast<size_t>(seen));
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [row](int32_t a, int32_t b) { return row[a] > row[b]; });
      std::copy_n(order.begin(), k, out);
    }
  });
}

}  // namespace

void select_positions(const float* q, const float* weights, int64_t n, int64_t first_position, const uint16_t* keys,
                      const IndexerShape& shape, int32_t* selected, std::vector<float>& scores, ThreadPool& pool) {
  // At most this many tokens' scores at once: a long prompt's would hold tokens x context floats.
  constexpr int64_t kTokenGroup = 64;
  for (int64_t t = 0; t < n; t += kTokenGroup) {
    select_group(q + t * shape.heads * shape.head_dim, weights + t * shape.heads, std::min(kTokenGroup, n - t),
                 first_position + t, keys, shape, selected + t * shape.top_k, scores, pool);
  }
}

}  // namespace bloomery::cpu
