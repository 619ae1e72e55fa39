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

// One token's cells: its rows gathered as one row of llama.cpp's concatenated caches.
struct Cells {
  std::vector<uint16_t> rows;
  int64_t start = 0;  // the position of the first raw row
  int64_t raw = 0;    // raw rows, then masked zero rows up to `padded`
  int64_t padded = 0;
  int64_t seen = 0;  // compressed rows after them
  int64_t count() const { return padded + seen; }
};

// Per-thread buffers, kept between calls so a decode step allocates nothing.
struct Buffers {
  Cells cells;
  std::vector<float> queries, scores, kept;
  std::vector<const float*> query_rows, weight_rows;
  std::vector<float*> score_rows, out_rows;
};

// The cells of the token at `position`: the raw rows from the aligned start of its window (where
// llama.cpp's SIMD blocks over its cells start), zero rows up to a multiple of kWindowRowAlign
// (masked), then the compressed rows, which so start a block as they do after llama.cpp's padded
// raw cells: the products over the row sum in its lanes and order.
void gather(const uint16_t* raw, const uint16_t* compressed, const CompressedAttentionShape& shape, int64_t position,
            Cells& c) {
  const int64_t d = shape.head_dim;
  c.start = std::max(shape.raw_first, aligned_window_start(position, shape.window));
  c.raw = position + 1 - c.start;
  c.padded = (c.raw + kWindowRowAlign - 1) / kWindowRowAlign * kWindowRowAlign;
  c.seen = shape.ratio > 0 ? (position + 1) / shape.ratio : 0;
  c.rows.resize(static_cast<size_t>(c.count() * d));
  std::copy_n(raw + (c.start - shape.raw_first) * d, c.raw * d, c.rows.data());
  std::fill(c.rows.begin() + c.raw * d, c.rows.begin() + c.padded * d, uint16_t{0});
  for (int64_t j = 0; j < c.seen; ++j) {
    std::copy_n(compressed + j * shape.compressed_stride, d, c.rows.data() + (c.padded + j) * d);
  }
}

// Heads [first, first + count) (at most kQueryTile) of the token at `position` over its cells.
void attend_heads(const float* q, const Cells& c, const CompressedAttentionShape& shape, int64_t position,
                  const int32_t* chosen, int64_t first, int count, float* out, Buffers& b) {
  const quant::F16RowKernels& f16 = quant::f16_row_kernels(host_simd_tier());
  const int64_t d = shape.head_dim, cells = c.count();
  b.queries.resize(static_cast<size_t>(count * d));
  b.scores.resize(static_cast<size_t>(count * cells));
  for (auto* rows : {&b.query_rows, &b.weight_rows}) rows->resize(static_cast<size_t>(count));
  for (auto* rows : {&b.score_rows, &b.out_rows}) rows->resize(static_cast<size_t>(count));
  std::copy_n(q + first * d, count * d, b.queries.data());
  f16.round(b.queries.data(), count * d);
  for (int h = 0; h < count; ++h) {
    b.query_rows[h] = b.queries.data() + h * d;
    b.score_rows[h] = b.scores.data() + h * cells;
    b.weight_rows[h] = b.score_rows[h];
    b.out_rows[h] = out + (first + h) * d;
  }
  f16.scores(c.rows.data(), d, cells, b.query_rows.data(), count, d, shape.scale, b.score_rows.data());
  const int64_t hidden = std::clamp<int64_t>(position - shape.window + 1 - c.start, 0, c.raw);
  for (int h = 0; h < count; ++h) {
    float* row = b.score_rows[h];
    std::fill_n(row, hidden, kMasked);
    std::fill(row + c.raw, row + c.padded, kMasked);
    if (chosen && c.seen > 0) {
      // Only the selected compressed rows keep their scores, as llama.cpp's top-k mask leaves them.
      b.kept.assign(static_cast<size_t>(c.seen), kMasked);
      for (int64_t j = 0; j < shape.selected_count; ++j) {
        if (chosen[j] >= 0 && chosen[j] < c.seen) b.kept[chosen[j]] = row[c.padded + chosen[j]];
      }
      std::copy(b.kept.begin(), b.kept.end(), row + c.padded);
    }
    softmax(row, cells, SoftmaxTail::kPadded, shape.sinks ? shape.sinks + first + h : nullptr);
    f16.round(row, cells);
  }
  f16.weighted_sum(b.weight_rows.data(), count, c.rows.data(), d, cells, d, b.out_rows.data());
}

}  // namespace

void compressed_attention(const float* q, int64_t n, int64_t first_position, const uint16_t* raw,
                          const uint16_t* compressed, const CompressedAttentionShape& shape, float* out,
                          ThreadPool& pool) {
  const int64_t d = shape.head_dim, heads = shape.heads, width = heads * d;
  const int64_t tiles = (heads + quant::kQueryTile - 1) / quant::kQueryTile;
  const auto chosen = [&](int64_t i) { return shape.selected ? shape.selected + i * shape.selected_count : nullptr; };
  const auto tile = [&](int64_t i, const Cells& c, int64_t t, Buffers& b) {
    const int64_t first = t * quant::kQueryTile;
    const int count = static_cast<int>(std::min<int64_t>(quant::kQueryTile, heads - first));
    attend_heads(q + i * width, c, shape, first_position + i, chosen(i), first, count, out + i * width, b);
  };
  if (n >= static_cast<int64_t>(pool.size())) {
    // Enough tokens for every thread: a token each, its cells gathered once.
    pool.parallel_for(static_cast<size_t>(n), 1, [&](size_t begin, size_t end) {
      thread_local Buffers b;
      for (auto i = static_cast<int64_t>(begin); i < static_cast<int64_t>(end); ++i) {
        gather(raw, compressed, shape, first_position + i, b.cells);
        for (int64_t t = 0; t < tiles; ++t) tile(i, b.cells, t, b);
      }
    });
    return;
  }
  // A decode step's few tokens: each token's cells gathered once, its heads spread over the threads.
  // The workers read this thread's cells through `gathered`: the name of a thread_local in the
  // lambda would be each worker's own.
  static thread_local Cells cells;
  const Cells& gathered = cells;
  for (int64_t i = 0; i < n; ++i) {
    gather(raw, compressed, shape, first_position + i, cells);
    pool.parallel_for(static_cast<size_t>(tiles), 1, [&](size_t begin, size_t end) {
      thread_local Buffers b;
      for (auto t = static_cast<int64_t>(begin); t < static_cast<int64_t>(end); ++t) tile(i, gathered, t, b);
    });
  }
}

}  // namespace bloomery::cpu
