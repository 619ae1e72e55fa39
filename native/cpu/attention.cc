#include "cpu/attention.h"

#include <vector>

#include "cpu/softmax.h"
#include "quant/float_formats.h"

namespace bloomery::cpu {

namespace {

float round_to_f16(float x) { return quant::fp16_to_fp32(quant::fp32_to_fp16(x)); }

}  // namespace

void causal_attention(const float* q, int64_t n, int64_t first_position, const uint16_t* keys, const uint16_t* values,
                      const AttentionShape& shape, float* out, ThreadPool& pool) {
  const int64_t d = shape.head_dim;
  const int64_t q_width = shape.heads * d;
  const int64_t kv_width = shape.kv_heads * d;
  const int64_t group = shape.heads / shape.kv_heads;
  pool.parallel_for(static_cast<size_t>(n * shape.heads), 1, [&](size_t begin, size_t end) {
    std::vector<float> query(static_cast<size_t>(d));
    std::vector<float> scores;
    std::vector<float> sum(static_cast<size_t>(d));
    for (size_t task = begin; task < end; ++task) {
      const int64_t token = static_cast<int64_t>(task) / shape.heads;
      const int64_t head = static_cast<int64_t>(task) % shape.heads;
      const int64_t kv_head = head / group;
      const int64_t length = first_position + token + 1;
      const float* q_head = q + token * q_width + head * d;
      for (int64_t i = 0; i < d; ++i) query[i] = round_to_f16(q_head[i]);

      scores.resize(static_cast<size_t>(length));
      for (int64_t j = 0; j < length; ++j) {
        const uint16_t* k = keys + j * kv_width + kv_head * d;
        float dot = 0.0f;
        for (int64_t i = 0; i < d; ++i) dot += query[i] * quant::fp16_to_fp32(k[i]);
        scores[j] = dot * shape.scale;
      }
      softmax(scores.data(), length);

      std::fill(sum.begin(), sum.end(), 0.0f);
      for (int64_t j = 0; j < length; ++j) {
        const float weight = round_to_f16(scores[j]);
        const uint16_t* v = values + j * kv_width + kv_head * d;
        for (int64_t i = 0; i < d; ++i) sum[i] += weight * quant::fp16_to_fp32(v[i]);
      }
      float* o = out + token * q_width + head * d;
      for (int64_t i = 0; i < d; ++i) o[i] = sum[i];
    }
  });
}

}  // namespace bloomery::cpu
