// Causal attention over the f16 KV cache against plain math in double (with llama.cpp's
// roundings: queries and softmax weights to f16), for grouped and plain KV heads, a head
// width with a tail, a prompt that continues a cached one, and latent attention's shape (one
// KV head whose values are the first elements of its key rows); and a prompt in one pass
// against the same tokens one at a time, which must agree bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/attention.h"
#include "cpu/thread_pool.h"
#include "quant/float_formats.h"
#include "tests/check.h"

using namespace bloomery;
using namespace bloomery::cpu;

namespace {

float round_f16(float x) { return quant::fp16_to_fp32(quant::fp32_to_fp16(x)); }

struct Case {
  AttentionShape shape;
  int64_t positions;  // cached rows
  std::vector<float> q;
  std::vector<uint16_t> keys, values;  // values empty: the values are in the key rows

  const uint16_t* value_rows() const { return values.empty() ? keys.data() : values.data(); }
};

// `dv` 0: the values are the first `latent` elements of the key rows (one KV head).
Case random_case(int64_t heads, int64_t kv_heads, int64_t d, int64_t positions, std::mt19937& rng, int64_t latent = 0) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const int64_t dv = latent > 0 ? latent : d;
  Case c{{heads, kv_heads, d, dv, 1.0f / std::sqrt(static_cast<float>(d))}, positions, {}, {}, {}};
  if (latent > 0) c.shape.key_stride = c.shape.value_stride = d;
  c.q.resize(static_cast<size_t>(positions * heads * d));
  for (float& v : c.q) v = 2.0f * uniform(rng);
  c.keys.resize(static_cast<size_t>(positions * kv_heads * d));
  if (latent == 0) c.values.resize(static_cast<size_t>(positions * kv_heads * d));
  for (auto* rows : {&c.keys, &c.values}) {
    for (uint16_t& v : *rows) v = quant::fp32_to_fp16(uniform(rng));
  }
  return c;
}

// Output row of query position `token` (0-based) and `head`, the reference way.
std::vector<double> reference(const Case& c, int64_t token, int64_t head) {
  const AttentionShape& s = c.shape;
  const int64_t d = s.key_dim, dv = s.value_dim, kv_head = head / (s.heads / s.kv_heads);
  const int64_t key_stride = s.key_stride > 0 ? s.key_stride : s.kv_heads * d;
  const int64_t value_stride = s.value_stride > 0 ? s.value_stride : s.kv_heads * dv;
  const float* q = c.q.data() + (token * s.heads + head) * d;
  std::vector<double> scores(static_cast<size_t>(token + 1));
  for (int64_t j = 0; j <= token; ++j) {
    double dot = 0;
    for (int64_t i = 0; i < d; ++i)
      dot += round_f16(q[i]) * quant::fp16_to_fp32(c.keys[j * key_stride + kv_head * d + i]);
    scores[j] = dot * s.scale;
  }
  const double max = *std::max_element(scores.begin(), scores.end());
  double sum = 0;
  for (double& v : scores) sum += (v = std::exp(v - max));
  std::vector<double> out(static_cast<size_t>(dv), 0.0);
  for (int64_t j = 0; j <= token; ++j) {
    const double p = round_f16(static_cast<float>(scores[j] / sum));
    for (int64_t i = 0; i < dv; ++i)
      out[i] += p * quant::fp16_to_fp32(c.value_rows()[j * value_stride + kv_head * dv + i]);
  }
  return out;
}

}  // namespace

TEST(cpu_attention_matches_reference_math) {
  std::mt19937 rng(21);
  ThreadPool pool(3);
  struct Shape {
    int64_t heads, kv_heads, d, positions, first, latent;
  };
  for (const Shape sh : {Shape{8, 2, 64, 23, 0, 0}, Shape{4, 4, 40, 19, 0, 0}, Shape{16, 2, 128, 30, 11, 0},
                         Shape{6, 1, 96, 27, 9, 64}}) {
    const Case c = random_case(sh.heads, sh.kv_heads, sh.d, sh.positions, rng, sh.latent);
    const int64_t dv = c.shape.value_dim;
    const int64_t n = sh.positions - sh.first, width = sh.heads * sh.d, out_width = sh.heads * dv;
    std::vector<float> out(static_cast<size_t>(n * out_width));
    causal_attention(c.q.data() + sh.first * width, n, sh.first, c.keys.data(), c.value_rows(), c.shape, out.data(),
                     pool);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < sh.heads; ++h) {
        const std::vector<double> want = reference(c, sh.first + t, h);
        for (int64_t i = 0; i < dv; ++i) {
          const float got = out[t * out_width + h * dv + i];
          CHECK(std::fabs(got - want[i]) < 2e-3 * (1 + std::fabs(want[i])))
              << "heads " << sh.heads << "/" << sh.kv_heads << " token " << t << " head " << h << " [" << i
              << "]: " << got << " vs " << want[i];
        }
      }
    }
  }
}

TEST(cpu_attention_prompt_equals_token_by_token) {
  std::mt19937 rng(22);
  ThreadPool pool(2);
  for (const int64_t heads : {int64_t{16}, int64_t{6}}) {
    const int64_t kv_heads = 2, d = 128, n = 21, width = heads * d;
    const Case c = random_case(heads, kv_heads, d, n, rng);
    std::vector<float> prompt(static_cast<size_t>(n * width)), one(static_cast<size_t>(width));
    causal_attention(c.q.data(), n, 0, c.keys.data(), c.values.data(), c.shape, prompt.data(), pool);
    for (int64_t t = 0; t < n; ++t) {
      causal_attention(c.q.data() + t * width, 1, t, c.keys.data(), c.values.data(), c.shape, one.data(), pool);
      CHECK(std::memcmp(one.data(), prompt.data() + t * width, width * sizeof(float)) == 0)
          << heads << " heads, token " << t;
    }
  }
}
