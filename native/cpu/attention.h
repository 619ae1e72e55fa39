// Causal multi-head attention over an f16 KV cache, with grouped KV heads. The rounding
// follows llama.cpp's CPU graph (without flash attention, one token per decode): queries are
// rounded to f16 for the K dot, the softmax runs over a row of KV cells padded with masked
// ones, and its weights are rounded to f16 for the V sum; the kernels sum in the order of
// llama.cpp's (quant/f16_rows.h, cpu/softmax.h).
#pragma once

#include <cstdint>

#include "cpu/thread_pool.h"

namespace bloomery::cpu {

// A windowed row starts at a multiple of this many positions, where llama.cpp's SIMD blocks
// over its KV cells do: the masked positions before the window then add exact zeros, and the
// row rounds as llama.cpp's full masked row.
inline constexpr int64_t kWindowRowAlign = 64;

// The first position a windowed row for `position` reads: the start of its window, rounded
// down to kWindowRowAlign.
int64_t aligned_window_start(int64_t position, int64_t window);

struct AttentionShape {
  int64_t heads = 0;
  int64_t kv_heads = 0;   // divides heads: query head h reads KV head h / (heads / kv_heads)
  int64_t key_dim = 0;    // of each query and key head
  int64_t value_dim = 0;  // of each value head and output head
  float scale = 1.0f;     // applied to q.k before the softmax
  // f16 elements from one position's keys (values) to the next; 0: kv_heads * key_dim
  // (value_dim). Multi-head latent attention reads its values inside its key rows.
  int64_t key_stride = 0;
  int64_t value_stride = 0;
  // Sliding window: a token at position p attends positions (p - window, p] only. 0: none.
  int64_t window = 0;
  // Learned sinks: one logit per query head in each softmax, with no value (null: none).
  const float* sinks = nullptr;
  // The position of the first cached row (a windowed layer keeps only its last positions).
  int64_t first_cached = 0;
  // Sparse attention (a lightning indexer's choice): token i attends only the positions
  // selected[i * selected_count ...] (-1: none) among those it sees, the others masked as
  // llama.cpp masks them (-inf). Null: every position.
  const int32_t* selected = nullptr;
  int64_t selected_count = 0;
};

// q: n rows of heads * key_dim floats, token i at position first_position + i.
// keys, values: f16 rows (of the shape's strides) for positions [shape.first_cached,
// first_position + n). out: n rows of heads * value_dim. Token i attends positions
// [0, first_position + i], or the last shape.window of them; the cache must hold those.
void causal_attention(const float* q, int64_t n, int64_t first_position, const uint16_t* keys, const uint16_t* values,
                      const AttentionShape& shape, float* out, ThreadPool& pool);

}  // namespace bloomery::cpu
