// DeepSeek-V4's attention (model::AttentionKind::kCompressed) over one sequence's f16 cache:
// every query head reads one key head whose keys are also its values, over two kinds of rows:
// the raw rows of the last `window` positions, and compressed rows, each standing for a block of
// `ratio` positions and seen by a query from the position that completes its block on (all it
// sees, or those a lightning indexer selected). One softmax (with the head's learned sink) runs
// over both, as llama.cpp's graph concatenates the raw cache and the compressed one, masked; the
// rounding follows cpu/attention.h (queries and weights rounded to f16, softmax of a padded row).
#pragma once

#include <cstdint>

#include "cpu/thread_pool.h"

namespace bloomery::cpu {

struct CompressedAttentionShape {
  int64_t heads = 0;
  int64_t head_dim = 0;  // of queries, keys and values
  float scale = 1.0f;
  int64_t window = 0;             // raw positions a query sees: (p - window, p]
  int64_t raw_first = 0;          // the position of the first raw row held
  int64_t ratio = 0;              // positions per compressed row; 0: no compressed rows
  int64_t compressed_stride = 0;  // f16 elements from one compressed row to the next
  const float* sinks = nullptr;   // one logit per head (null: none)
  // Where given, token i attends only the compressed rows selected[i * selected_count ...] (-1:
  // none) among those it sees; null: all it sees.
  const int32_t* selected = nullptr;
  int64_t selected_count = 0;
};

// q: n rows of heads * head_dim floats, token i at position first_position + i. raw: f16 rows of
// head_dim for positions [raw_first, first_position + n); compressed: f16 rows for the blocks the
// last token sees. out: n rows of heads * head_dim.
void compressed_attention(const float* q, int64_t n, int64_t first_position, const uint16_t* raw,
                          const uint16_t* compressed, const CompressedAttentionShape& shape, float* out,
                          ThreadPool& pool);

}  // namespace bloomery::cpu
