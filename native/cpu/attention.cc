#include "cpu/attention.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "cpu/cpu_dispatch.h"
#include "cpu/softmax.h"
#include "quant/f16_rows.h"

namespace bloomery::cpu {

namespace {

// Per-thread buffers, kept between calls so a decode step allocates nothing.
struct AttentionBuffers {
  std::vector<float> queries, scores, kept;
  std::vector<const float*> query_rows, weight_rows;
  std::vector<float*> score_rows, out_rows;
};

// Masks every score of a row but those of the selected positions (row[0] is position `start`).
void keep_selected(float* row, int64_t start, int64_t seen, const int32_t* selected, int64_t count,
                   std::vector<float>& kept) {
  kept.resize(static_cast<size_t>(count));
  for (int64_t j = 0; j < count; ++j) {
    const int64_t at = selected[j] - start;
    if (selected[j] >= 0 && at < seen) kept[j] = row[at];
  }
  std::fill_n(row, seen, -std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < count; ++j) {
    const int64_t at = selected[j] - start;
    if (selected[j] >= 0 && at < seen) row[at] = kept[j];
  }
}

}  // namespace

int64_t aligned_window_start(int64_t position, int64_t window) {
  const int64_t first = std::max<int64_t>(0, position - window + 1);
  return first - first % kWindowRowAlign;
}

void causal_attention(const float* q, int64_t n, int64_t first_position, const uint16_t* keys, const uint16_t* values,
                      const AttentionShape& shape, float* out, ThreadPool& pool) {
  const quant::F16RowKernels& f16 = quant::f16_row_kernels(host_simd_tier());
  const int64_t d = shape.key_dim, dv = shape.value_dim;
  const int64_t q_width = shape.heads * d, out_width = shape.heads * dv;
  const int64_t key_stride = shape.key_stride > 0 ? shape.key_stride : shape.kv_heads * d;
  const int64_t value_stride = shape.value_stride > 0 ? shape.value_stride : shape.kv_heads * dv;
  const int64_t group = shape.heads / shape.kv_heads;
  // One task: one KV head and enough tokens that their query heads fill a kernel call, so
  // each cached row is converted once for all of them.
  const int64_t tokens_per_task = std::max<int64_t>(1, quant::kQueryTile / group);
  const int64_t token_blocks = (n + tokens_per_task - 1) / tokens_per_task;
  const auto kv_heads = static_cast<size_t>(shape.kv_heads);
  pool.parallel_for(static_cast<size_t>(token_blocks) * kv_heads, 1, [&](size_t begin, size_t end) {
    thread_local AttentionBuffers b;
    for (size_t task = begin; task < end; ++task) {
      // The last tokens (the longest rows) go first, so the tasks handed out last are short.
      const int64_t block = token_blocks - 1 - static_cast<int64_t>(task / kv_heads);
      const int64_t kv_head = static_cast<int64_t>(task % kv_heads);
      const int64_t first_token = block * tokens_per_task;
      const int64_t tokens = std::min(n, first_token + tokens_per_task) - first_token;
      const int64_t length = first_position + first_token + tokens;  // positions the last token sees
      // A windowed row starts at the aligned start of the first token's window, not at 0.
      const int64_t start =
          shape.window > 0
              ? std::max(shape.first_cached, aligned_window_start(first_position + first_token, shape.window))
              : shape.first_cached;
      const int64_t cells = length - start;
      const int64_t queries = tokens * group;
      b.queries.resize(static_cast<size_t>(queries * d));
      b.scores.resize(static_cast<size_t>(queries * cells));
      for (auto* rows : {&b.query_rows, &b.weight_rows}) rows->resize(static_cast<size_t>(queries));
      for (auto* rows : {&b.score_rows, &b.out_rows}) rows->resize(static_cast<size_t>(queries));
      for (int64_t i = 0; i < queries; ++i) {
        const int64_t token = first_token + i / group;
        const int64_t head = kv_head * group + i % group;
        std::copy_n(q + token * q_width + head * d, d, b.queries.data() + i * d);
        b.query_rows[i] = b.queries.data() + i * d;
        b.score_rows[i] = b.scores.data() + i * cells;
        b.weight_rows[i] = b.score_rows[i];
        b.out_rows[i] = out + token * out_width + head * dv;
      }
      f16.round(b.queries.data(), queries * d);

      const uint16_t* k = keys + (start - shape.first_cached) * key_stride + kv_head * d;
      for (int64_t i = 0; i < queries; i += quant::kQueryTile) {
        const int count = static_cast<int>(std::min<int64_t>(quant::kQueryTile, queries - i));
        f16.scores(k, key_stride, cells, b.query_rows.data() + i, count, d, shape.scale, b.score_rows.data() + i);
      }
      for (int64_t i = 0; i < queries; ++i) {
        const int64_t position = first_position + first_token + i / group;
        const int64_t seen = position + 1 - start;
        if (shape.window > 0) {
          // Masked as llama.cpp masks them: -inf, whose e^x is an exact 0.
          const int64_t hidden = std::clamp<int64_t>(position - shape.window + 1 - start, 0, seen);
          std::fill_n(b.score_rows[i], hidden, -std::numeric_limits<float>::infinity());
        }
        if (shape.selected) {
          const int64_t token = first_token + i / group;
          keep_selected(b.score_rows[i], start, seen, shape.selected + token * shape.selected_count,
                        shape.selected_count, b.kept);
        }
        const float* sink = shape.sinks ? shape.sinks + kv_head * group + i % group : nullptr;
        softmax(b.score_rows[i], seen, SoftmaxTail::kPadded, sink);
        f16.round(b.score_rows[i], seen);
        std::fill(b.score_rows[i] + seen, b.score_rows[i] + cells, 0.0f);
      }
      const uint16_t* v = values + (start - shape.first_cached) * value_stride + kv_head * dv;
      for (int64_t i = 0; i < queries; i += quant::kQueryTile) {
        const int count = static_cast<int>(std::min<int64_t>(quant::kQueryTile, queries - i));
        f16.weighted_sum(b.weight_rows.data() + i, count, v, value_stride, cells, dv, b.out_rows.data() + i);
      }
    }
  });
}

}  // namespace bloomery::cpu
