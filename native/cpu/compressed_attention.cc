#include "cpu/compressed_attention.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "cpu/attention.h"
#include "cpu/cpu_dispatch.h"
#include "cpu/softmax.h"
#include "quant/f16_rows.h"

namespace bloomery::cpu {

namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();

// Per-thread buffers, kept between calls so a decode step allocates nothing.
struct Buffers {
  std::vector<uint16_t> rows;
  std::vector<float> queries, scores, kept;
  std::vector<const float*> query_rows, weight_rows;
  std::vector<float*> score_rows, out_rows;
};

}  // namespace

void compressed_attention(const float* q, int64_t n, int64_t first_position, const uint16_t* raw,
                          const uint16_t* compressed, const CompressedAttentionShape& shape, float* out,
                          ThreadPool& pool) {
  const quant::F16RowKernels& f16 = quant::f16_row_kernels(host_simd_tier());
  const int64_t d = shape.head_dim, heads = shape.heads, width = heads * d;
  pool.parallel_for(static_cast<size_t>(n), 1, [&](size_t begin, size_t end) {
    thread_local Buffers b;
    for (auto i = static_cast<int64_t>(begin); i < static_cast<int64_t>(end); ++i) {
      const int64_t position = first_position + i;
      // One row of cells, as llama.cpp concatenates its raw cache and its compressed one: the raw
      // rows from the aligned start of the window (where llama.cpp's SIMD blocks over its cells
      // start), zero rows up to a multiple of kWindowRowAlign (masked), then the compressed rows,
      // which so start a block as they do after llama.cpp's padded raw cells, and the products
      // over the row sum in its lanes and order.
      const int64_t start = std::max(shape.raw_first, aligned_window_start(position, shape.window));
      const int64_t raw_cells = position + 1 - start;
      const int64_t padded = (raw_cells + kWindowRowAlign - 1) / kWindowRowAlign * kWindowRowAlign;
      const int64_t seen = shape.ratio > 0 ? (position + 1) / shape.ratio : 0;
      const int64_t cells = padded + seen;
      b.rows.resize(static_cast<size_t>(cells * d));
      std::copy_n(raw + (start - shape.raw_first) * d, raw_cells * d, b.rows.data());
      std::fill(b.rows.begin() + raw_cells * d, b.rows.begin() + padded * d, uint16_t{0});
      for (int64_t j = 0; j < seen; ++j) {
        std::copy_n(compressed + j * shape.compressed_stride, d, b.rows.data() + (padded + j) * d);
      }
      b.queries.resize(static_cast<size_t>(width));
      b.scores.resize(static_cast<size_t>(heads * cells));
      for (auto* rows : {&b.query_rows, &b.weight_rows}) rows->resize(static_cast<size_t>(heads));
      for (auto* rows : {&b.score_rows, &b.out_rows}) rows->resize(static_cast<size_t>(heads));
      std::copy_n(q + i * width, width, b.queries.data());
      f16.round(b.queries.data(), width);
      for (int64_t h = 0; h < heads; ++h) {
        b.query_rows[h] = b.queries.data() + h * d;
        b.score_rows[h] = b.scores.data() + h * cells;
        b.weight_rows[h] = b.score_rows[h];
        b.out_rows[h] = out + i * width + h * d;
      }
      for (int64_t h = 0; h < heads; h += quant::kQueryTile) {
        const int count = static_cast<int>(std::min<int64_t>(quant::kQueryTile, heads - h));
        f16.scores(b.rows.data(), d, cells, b.query_rows.data() + h, count, d, shape.scale, b.score_rows.data() + h);
      }
      const int64_t hidden = std::clamp<int64_t>(position - shape.window + 1 - start, 0, raw_cells);
      const int32_t* chosen = shape.selected ? shape.selected + i * shape.selected_count : nullptr;
      for (int64_t h = 0; h < heads; ++h) {
        float* row = b.score_rows[h];
        std::fill_n(row, hidden, kMasked);
        std::fill(row + raw_cells, row + padded, kMasked);
        if (chosen && seen > 0) {
          // Only the selected compressed rows keep their scores, as llama.cpp's top-k mask leaves them.
          b.kept.assign(static_cast<size_t>(seen), kMasked);
          for (int64_t j = 0; j < shape.selected_count; ++j) {
            if (chosen[j] >= 0 && chosen[j] < seen) b.kept[chosen[j]] = row[padded + chosen[j]];
          }
          std::copy(b.kept.begin(), b.kept.end(), row + padded);
        }
        softmax(row, cells, SoftmaxTail::kPadded, shape.sinks ? shape.sinks + h : nullptr);
        f16.round(row, cells);
      }
      for (int64_t h = 0; h < heads; h += quant::kQueryTile) {
        const int count = static_cast<int>(std::min<int64_t>(quant::kQueryTile, heads - h));
        f16.weighted_sum(b.weight_rows.data() + h, count, b.rows.data(), d, cells, d, b.out_rows.data() + h);
      }
    }
  });
}

}  // namespace bloomery::cpu
