#include "cpu/attention.h"

#include <algorithm>
#include <vector>

#include "cpu/cpu_dispatch.h"
#include "cpu/softmax.h"
#include "quant/f16_rows.h"

namespace bloomery::cpu {

namespace {

// Per-thread buffers, kept between calls so a decode step allocates nothing.
struct AttentionBuffers {
  std::vector<float> queries, scores;
  std::vector<const float*> query_rows, weight_rows;
  std::vector<float*> score_rows, out_rows;
};

}  // namespace

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
      const int64_t queries = tokens * group;
      b.queries.resize(static_cast<size_t>(queries * d));
      b.scores.resize(static_cast<size_t>(queries * length));
      for (auto* rows : {&b.query_rows, &b.weight_rows}) rows->resize(static_cast<size_t>(queries));
      for (auto* rows : {&b.score_rows, &b.out_rows}) rows->resize(static_cast<size_t>(queries));
      for (int64_t i = 0; i < queries; ++i) {
        const int64_t token = first_token + i / group;
        const int64_t head = kv_head * group + i % group;
        std::copy_n(q + token * q_width + head * d, d, b.queries.data() + i * d);
        b.query_rows[i] = b.queries.data() + i * d;
        b.score_rows[i] = b.scores.data() + i * length;
        b.weight_rows[i] = b.score_rows[i];
        b.out_rows[i] = out + token * out_width + head * dv;
      }
      f16.round(b.queries.data(), queries * d);

      const uint16_t* k = keys + kv_head * d;
      for (int64_t i = 0; i < queries; i += quant::kQueryTile) {
        const int count = static_cast<int>(std::min<int64_t>(quant::kQueryTile, queries - i));
        f16.scores(k, key_stride, length, b.query_rows.data() + i, count, d, shape.scale, b.score_rows.data() + i);
      }
      for (int64_t i = 0; i < queries; ++i) {
        const int64_t seen = first_position + first_token + i / group + 1;
        softmax(b.score_rows[i], seen, SoftmaxTail::kPadded);
        f16.round(b.score_rows[i], seen);
        std::fill(b.score_rows[i] + seen, b.score_rows[i] + length, 0.0f);
      }
      const uint16_t* v = values + kv_head * dv;
      for (int64_t i = 0; i < queries; i += quant::kQueryTile) {
        const int count = static_cast<int>(std::min<int64_t>(quant::kQueryTile, queries - i));
        f16.weighted_sum(b.weight_rows.data() + i, count, v, value_stride, length, dv, b.out_rows.data() + i);
      }
    }
  });
}

}  // namespace bloomery::cpu
