// Causal multi-head attention over an f16 KV cache, with grouped KV heads. The rounding
// follows llama.cpp's CPU graph (without flash attention, one token per decode): queries are
// rounded to f16 for the K dot, the softmax runs over a row of KV cells padded with masked
// ones, and its weights are rounded to f16 for the V sum; the kernels sum in the order of
// llama.cpp's (quant/f16_rows.h, cpu/softmax.h).
#pragma once

#include <cstdint>

#include "cpu/thread_pool.h"

namespace bloomery::cpu {

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
};

// q: n rows of heads * key_dim floats, token i at position first_position + i.
// keys, values: f16 rows (of the shape's strides) for positions [0, first_position + n).
// out: n rows of heads * value_dim. Token i attends positions [0, first_position + i].
void causal_attention(const float* q, int64_t n, int64_t first_position, const uint16_t* keys, const uint16_t* values,
                      const AttentionShape& shape, float* out, ThreadPool& pool);

}  // namespace bloomery::cpu
