#include "cpu/attention.h"

#include <algorithm>
#include <vector>

#include "cpu/cpu_dispatch.h"
#include "cpu/softmax.h"
#include "quant/f16_rows.h"
#include "quant/float_formats.h"

namespace bloomery::cpu {

namespace {

float round_to_f16(float x) { return quant::fp16_to_fp32(quant::fp32_to_fp16(x)); }

// Per-thread buffers, kept between calls so a decode step allocates nothing.
struct AttentionBuffers {
  std::vector<float> query, scores, sum;
};

}  // namespace

void causal_attention(const float* q, int64_t n, int64_t first_position, const uint16_t* keys, const uint16_t* values,
                      const AttentionShape& shape, float* out, ThreadPool& pool) {
  const quant::F16RowKernels& f16 = quant::f16_row_kernels(host_simd_tier());
  const int64_t d = shape.head_dim;
  const int64_t q_width = shape.heads * d;
  const int64_t kv_width = shape.kv_heads * d;
  const int64_t group = shape.heads / shape.kv_heads;
  pool.parallel_for(static_cast<size_t>(n * shape.heads), 1, [&](size_t begin, size_t end) {
    thread_local AttentionBuffers buffers;
    std::vector<float>& query = buffers.query;
    std::vector<float>& scores = buffers.scores;
    std::vector<float>& sum = buffers.sum;
    query.resize(static_cast<size_t>(d));
    sum.resize(static_cast<size_t>(d));
    for (size_t task = begin; task < end; ++task) {
      const int64_t token = static_cast<int64_t>(task) / shape.heads;
      const int64_t head = static_cast<int64_t>(task) % shape.heads;
      const int64_t kv_head = head / group;
      const int64_t length = first_position + token + 1;
      const float* q_head = q + token * q_width + head * d;
      for (int64_t i = 0; i < d; ++i) query[i] = round_to_f16(q_head[i]);

      scores.resize(static_cast<size_t>(length));
      const uint16_t* k = keys + kv_head * d;
      for (int64_t j = 0; j < length; ++j) scores[j] = f16.dot(k + j * kv_width, query.data(), d) * shape.scale;
      softmax(scores.data(), length);

      std::fill(sum.begin(), sum.end(), 0.0f);
      const uint16_t* v = values + kv_head * d;
      for (int64_t j = 0; j < length; ++j) f16.axpy(round_to_f16(scores[j]), v + j * kv_width, sum.data(), d);
      std::copy(sum.begin(), sum.end(), out + token * q_width + head * d);
    }
  });
}

}  // namespace bloomery::cpu
