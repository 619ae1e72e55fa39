// DeepSeek-V4's attention on the CPU (cpu/compressed_attention.h): a decode step, whose heads are
// spread over the pool's threads in tiles of quant::kQueryTile, against the same token's row in a
// prompt (each token's cells gathered by the thread that attends them). Both take the same cells
// in the same order, so the floats must be equal, with as many heads as DeepSeek-V4-Flash's tiles
// (64 heads: 8 tiles) and with a window, compressed rows of ratios 4 (an indexer's choice) and 128.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "cpu/compressed_attention.h"
#include "cpu/thread_pool.h"
#include "quant/float_formats.h"
#include "tests/check.h"

using namespace bloomery;
using namespace bloomery::cpu;

TEST(cpu_compressed_attention_decode_equals_prompt_rows) {
  std::mt19937 rng(111);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  ThreadPool pool(4);
  const int64_t d = 128, window = 32, first = 300, n = 8, length = first + n;
  for (const int64_t heads : {16, 64}) {
    for (const auto& [ratio, top_k] :
         {std::pair<int64_t, int64_t>{0, 0}, std::pair<int64_t, int64_t>{4, 16}, std::pair<int64_t, int64_t>{128, 0}}) {
      const int64_t stride = d + 32, blocks = ratio > 0 ? length / ratio + 1 : 1;
      std::vector<uint16_t> raw(static_cast<size_t>(length * d)), compressed(static_cast<size_t>(blocks * stride));
      for (auto& x : raw) x = quant::fp32_to_fp16(uniform(rng));
      for (auto& x : compressed) x = quant::fp32_to_fp16(uniform(rng));
      std::vector<float> q(static_cast<size_t>(n * heads * d)), sinks(static_cast<size_t>(heads));
      for (float& v : q) v = 0.3f * uniform(rng);
      for (float& v : sinks) v = uniform(rng);
      std::vector<int32_t> selected;
      for (int64_t i = 0; i < n && top_k > 0; ++i) {
        std::vector<int32_t> all(static_cast<size_t>((first + i + 1) / ratio));
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng);
        all.resize(static_cast<size_t>(top_k), -1);
        selected.insert(selected.end(), all.begin(), all.end());
      }
      CompressedAttentionShape shape;
      shape.heads = heads;
      shape.head_dim = d;
      shape.scale = 0.1f;
      shape.window = window;
      shape.ratio = ratio;
      shape.compressed_stride = stride;
      shape.sinks = sinks.data();
      shape.selected = top_k > 0 ? selected.data() : nullptr;
      shape.selected_count = top_k;
      // The prompt: n tokens at least as many as the pool's threads, a token a thread.
      std::vector<float> prompt(static_cast<size_t>(n * heads * d));
      compressed_attention(q.data(), n, first, raw.data(), compressed.data(), shape, prompt.data(), pool);
      // Each token alone, as a decode step: its heads' tiles over the threads.
      for (int64_t i = 0; i < n; ++i) {
        CompressedAttentionShape one = shape;
        if (top_k > 0) one.selected = selected.data() + i * top_k;
        std::vector<float> step(static_cast<size_t>(heads * d));
        compressed_attention(q.data() + i * heads * d, 1, first + i, raw.data(), compressed.data(), one, step.data(),
                             pool);
        CHECK(std::memcmp(step.data(), prompt.data() + i * heads * d, step.size() * sizeof(float)) == 0)
            << heads << " heads, ratio " << ratio << ", token " << i
            << ": the decode step's row differs from the prompt's";
      }
    }
  }
}
