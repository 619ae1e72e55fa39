#include "cpu/hyper_connections.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace bloomery::cpu {

namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// Scales each of the `streams` lines of comb to sum to one, epsilon added to the sum: line i's
// entries are comb[i * line + k * step]. A destination's weights over its sources: line 1, step
// streams; a source's over its destinations: line streams, step 1.
void normalize_lines(float* comb, int64_t streams, float eps, int64_t line, int64_t step) {
  for (int64_t i = 0; i < streams; ++i) {
    float* first = comb + i * line;
    float sum = eps;
    for (int64_t k = 0; k < streams; ++k) sum += first[k * step];
    const float inv = 1.0f / sum;
    for (int64_t k = 0; k < streams; ++k) first[k * step] *= inv;
  }
}

}  // namespace

void hyper_weights(const float* mixes, int64_t n, const float* scale, const float* base, const HyperShape& shape,
                   float* pre, float* post, float* comb) {
  const int64_t s = shape.streams, width = (2 + s) * s;
  for (int64_t i = 0; i < n; ++i) {
    const float* m = mixes + i * width;
    for (int64_t h = 0; h < s; ++h) {
      // Separate ops in llama.cpp's graph: the product rounds before the base is added.
      const float scaled_pre = m[h] * scale[0];
      pre[i * s + h] = sigmoid(scaled_pre + base[h]) + shape.epsilon;
      const float scaled_post = m[s + h] * scale[1];
      post[i * s + h] = 2.0f * sigmoid(scaled_post + base[s + h]);
    }
    float* c = comb + i * s * s;
    for (int64_t src = 0; src < s; ++src) {
      float max = -INFINITY;
      for (int64_t dst = 0; dst < s; ++dst) {
        const int64_t at = dst + s * src;
        c[at] = std::fma(m[2 * s + at], scale[2], base[2 * s + at]);
        max = std::fmax(max, c[at]);
      }
      float sum = 0.0f;
      for (int64_t dst = 0; dst < s; ++dst) {
        const int64_t at = dst + s * src;
        c[at] = std::exp(c[at] - max);
        sum += c[at];
      }
      const float inv = 1.0f / sum;
      for (int64_t dst = 0; dst < s; ++dst) c[dst + s * src] = std::fma(c[dst + s * src], inv, shape.epsilon);
    }
    normalize_lines(c, s, shape.epsilon, 1, s);
    for (int64_t k = 1; k < shape.sinkhorn_iterations; ++k) {
      normalize_lines(c, s, shape.epsilon, s, 1);
      normalize_lines(c, s, shape.epsilon, 1, s);
    }
  }
}

void hyper_head_weights(const float* mixes, int64_t n, const float* scale, const float* base, const HyperShape& shape,
                        float* pre) {
  const int64_t s = shape.streams;
  for (int64_t i = 0; i < n * s; ++i) {
    const float scaled = mixes[i] * scale[0];
    pre[i] = sigmoid(scaled + base[i % s]) + shape.epsilon;
  }
}

void hyper_pre(const float* residual, const float* pre, int64_t n, const HyperShape& shape, float* out,
               ThreadPool& pool) {
  const int64_t s = shape.streams, w = shape.width;
  pool.parallel_for(static_cast<size_t>(n), 1, [&](size_t begin, size_t end) {
    for (auto i = static_cast<int64_t>(begin); i < static_cast<int64_t>(end); ++i) {
      const float* r = residual + i * s * w;
      const float* p = pre + i * s;
      for (int64_t j = 0; j < w; ++j) {
        float sum = 0.0f;
        for (int64_t h = 0; h < s; ++h) sum = std::fma(r[h * w + j], p[h], sum);
        out[i * w + j] = sum;
      }
    }
  });
}

void hyper_post(const float* x, const float* post, const float* comb, int64_t n, const HyperShape& shape,
                float* residual, ThreadPool& pool) {
  const int64_t s = shape.streams, w = shape.width;
  pool.parallel_for(static_cast<size_t>(n), 1, [&](size_t begin, size_t end) {
    thread_local std::vector<float> old;
    old.resize(static_cast<size_t>(s * w));
    for (auto i = static_cast<int64_t>(begin); i < static_cast<int64_t>(end); ++i) {
      float* r = residual + i * s * w;
      std::copy_n(r, s * w, old.data());
      const float* c = comb + i * s * s;
      for (int64_t dst = 0; dst < s; ++dst) {
        for (int64_t j = 0; j < w; ++j) {
          float sum = x[i * w + j] * post[i * s + dst];
          for (int64_t src = 0; src < s; ++src) sum = std::fma(old[src * w + j], c[dst + s * src], sum);
          r[dst * w + j] = sum;
        }
      }
    }
  });
}

}  // namespace bloomery::cpu
