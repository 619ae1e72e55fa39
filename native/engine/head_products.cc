#include "engine/head_products.h"

#include <algorithm>

namespace bloomery::engine {

void per_head(const cpu::ExpertMatrices& matrices, const float* x, int64_t n, int64_t x_row, int64_t x_stride, float* y,
              int64_t y_row, int64_t y_stride, ForwardScratch& s, cpu::ThreadPool& pool) {
  const int64_t in = matrices.first.cols, out = matrices.first.rows;
  s.head_in.resize(static_cast<size_t>(n * in));
  s.head_out.resize(static_cast<size_t>(n * out));
  for (int64_t h = 0; h < matrices.count; ++h) {
    for (int64_t i = 0; i < n; ++i) std::copy_n(x + i * x_row + h * x_stride, in, s.head_in.data() + i * in);
    s.input.reset(s.head_in.data(), n, in);
    cpu::WeightMatrix head = matrices.expert(h);
    head.stored_plain_by_llama = true;  // llama.cpp repacks 2D weights only, not these per-head stacks
    cpu::matmul(head, s.input, s.head_out.data(), pool);
    for (int64_t i = 0; i < n; ++i) std::copy_n(s.head_out.data() + i * out, out, y + i * y_row + h * y_stride);
  }
}

}  // namespace bloomery::engine
