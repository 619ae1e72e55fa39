// The tiled (tensor-core) attention kernels against the exact kernel, which gives the CPU
// path's floats (cuda_ops_test.cc checks that), on random queries and f16 caches: decode rows
// at contexts 1 to 5,000 (a block per segment of the cache), batches of 2 and 4 rows, and
// prompts of 1 to 700 rows from position 0 and from mid-cache; GQA ratios 1, 4 and 8; head_dim
// 64, 128 and 256 (its value columns split over two blocks); spread scores and sharp ones (large enough that exp
// overflows without the maximum subtracted). Then that a row's floats do not depend on its batch, that decode rows come
// back quantized when asked, and the kernels' times. Skips, saying why, where there is no CUDA device.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/check.h"

#ifdef BLOOMERY_CUDA

#include "cuda/ops.h"
#include "tests/cuda_test_util.h"

using namespace bloomery;
using namespace bloomery::tests::gpu;

namespace {

struct Case {
  int64_t kv_heads, group, head_dim, first, n;
  float query_amplitude;  // 1.5: scores of a few units; 60: scores past exp's float range, a nearly one-hot softmax
  int64_t window = 0;     // gpt-oss's sliding window (0: none)
  bool sinks = false;     // gpt-oss's learned sinks, one logit per head
};

constexpr float kValueAmplitude = 2.0f;

// The device, ready for every head width the tiled kernels serve (256-wide heads' shared memory).
bool attention_ready(const char* test) {
  if (!device_ready(test)) return false;
  cuda::prepare_tiled_attention(256);
  return true;
}

// `count` f16 cache values drawn uniformly from [-1.5, 1.5).
std::vector<uint16_t> random_cache(int64_t count, std::mt19937& rng) {
  std::vector<uint16_t> cache(static_cast<size_t>(count));
  for (auto& x : cache) x = quant::fp32_to_fp16(std::uniform_real_distribution<float>(-1.5f, 1.5f)(rng));
  return cache;
}

// The kernels agree up to the order of float sums, and that order moves a probability's f16
// rounding by one f16 ulp (at most 2^-10 of it, or 2^-24 below f16's normal range) where a
// score falls within float noise of a rounding boundary. Over a row, all of them moving
// would change an output by at most 2^-10 sum(p) max|v| + length 2^-24 max|v|; each side's
// f32 sum of `length` products errs by at most length 2^-24 max|v| (sum p = 1). So the
// largest difference allowed is max|v| (2^-10 + 3 length 2^-24), a few thousandths: a wrong
// mask, maximum or normalization moves outputs by tenths. And since a move needs a
// boundary within float noise (about 1 probability in 1,000), a (row, head) output more than
// 2^-12 max|v| away somewhere, which needs a moved probability above 1/4, is rare: at most
// one in a case, or 1 % of them.
void check_case(const Case& c, std::mt19937& rng, const cuda::Stream& stream) {
  const int64_t heads = c.kv_heads * c.group, d = c.head_dim;
  const int64_t kv_width = c.kv_heads * d, q_width = heads * d, length = c.first + c.n;
  std::vector<uint16_t> keys(static_cast<size_t>(length * kv_width)), values(keys.size());
  for (auto& k : keys) k = quant::fp32_to_fp16(std::uniform_real_distribution<float>(-1.5f, 1.5f)(rng));
  for (auto& v : values) {
    v = quant::fp32_to_fp16(std::uniform_real_distribution<float>(-kValueAmplitude, kValueAmplitude)(rng));
  }
  const auto q = random_floats(static_cast<size_t>(c.n * q_width), c.query_amplitude, rng);
  std::vector<int32_t> positions(static_cast<size_t>(c.n));
  for (int64_t i = 0; i < c.n; ++i) positions[i] = static_cast<int32_t>(c.first + i);
  // A cache longer than the rows reach, as a session's is: blocks of segments past them do nothing.
  cuda::AttentionShape shape{heads, c.kv_heads, d, 1.0f / std::sqrt(static_cast<float>(d)), length + 300};
  // Sinks in the scores' range (some above every score, some below), as trained ones are.
  const auto dsinks = upload(random_floats(static_cast<size_t>(heads), 3.0f, rng));
  shape.window = c.window;
  shape.sinks = c.sinks ? dsinks.as<float>() : nullptr;
  const auto dq = upload(q), dk = upload(keys), dv = upload(values), dpos = upload(positions);
  cuda::DeviceBuffer exact(q.size() * sizeof(float), "exact"), tiled(q.size() * sizeof(float), "tiled");
  cuda::DeviceBuffer scratch(cuda::attention_scratch_bytes(shape, c.n), "scratch");
  cuda::exact_causal_attention(dq.as<float>(), c.n, dpos.as<int32_t>(), dk.as<uint16_t>(), dv.as<uint16_t>(), shape,
                               exact.as<float>(), stream.handle());
  cuda::causal_attention(dq.as<float>(), c.n, dpos.as<int32_t>(), dk.as<uint16_t>(), dv.as<uint16_t>(), shape,
                         scratch.data(), tiled.as<float>(), stream.handle());
  cuda::check_launch("attention test");
  const auto want = download<float>(exact, q.size(), stream);
  const auto got = download<float>(tiled, q.size(), stream);

  const double bound =
      kValueAmplitude * (std::ldexp(1.0, -10) + 3.0 * static_cast<double>(length) * std::ldexp(1.0, -24));
  const double far = kValueAmplitude * std::ldexp(1.0, -12);
  double largest = 0.0;
  int64_t beyond = 0;  // (row, head) outputs with an element more than `far` away
  for (int64_t h = 0; h < c.n * heads; ++h) {
    bool away = false;
    for (int64_t i = h * d; i < (h + 1) * d; ++i) {
      const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
      largest = std::isnan(diff) ? INFINITY : std::max(largest, diff);
      away = away || !(diff <= far);
    }
    beyond += away;
  }
  const auto label = [&] {
    std::ostringstream s;
    s << "head_dim " << d << ", group " << c.group << ", kv_heads " << c.kv_heads << ", rows " << c.n
      << " from position " << c.first << ", query amplitude " << c.query_amplitude << ", window " << c.window
      << (c.sinks ? ", sinks" : "");
    return s.str();
  };
  CHECK(largest <= bound) << label() << ": largest difference " << largest << " over the bound " << bound;
  CHECK(beyond <= 1 + c.n * heads / 100) << label() << ": " << beyond << " of " << c.n * heads
                                         << " (row, head) outputs differ by more than " << far;
}

}  // namespace

TEST(cuda_tiled_attention_decode_matches_exact) {
  if (!attention_ready("cuda_tiled_attention_decode_matches_exact")) return;
  std::mt19937 rng(41);
  const cuda::Stream stream;
  for (const int64_t d : {128, 64, 256}) {
    for (const int64_t group : {1, 4, 8}) {
      for (const int64_t context : {1, 7, 300, 5000}) {
        for (const float amplitude : {1.5f, 60.0f}) check_case({4, group, d, context - 1, 1, amplitude}, rng, stream);
      }
      // A batch of a few rows (several streams' worth): still split, the rows in one or two warps.
      for (const int64_t n : {2, 4}) check_case({4, group, d, 2000, n, 1.5f}, rng, stream);
    }
  }
}

TEST(cuda_tiled_attention_prompt_matches_exact) {
  if (!attention_ready("cuda_tiled_attention_prompt_matches_exact")) return;
  std::mt19937 rng(43);
  const cuda::Stream stream;
  for (const int64_t d : {128, 64, 256}) {
    for (const int64_t group : {1, 4, 8}) {
      for (const int64_t first : {0, 777}) {
        for (const int64_t n : {1, 2, 3, 15, 16, 17, 63, 64, 65, 130, 511, 700}) {
          check_case({2, group, d, first, n, n % 2 == 1 ? 60.0f : 1.5f}, rng, stream);
        }
      }
    }
  }
}

// gpt-oss's attention: sliding windows (the tiled kernels mask positions before a row's window and
// skip segments before every window of a block's rows) and learned sinks (folded into each row's
// statistics), for decode rows (a block per segment: the fused launch up to a few thousand
// positions, the two launches at 40,960) and prompts from position 0 and from mid-cache, windows
// shorter and longer than a segment, against the exact kernel.
TEST(cuda_tiled_attention_window_and_sinks_match_exact) {
  if (!attention_ready("cuda_tiled_attention_window_and_sinks_match_exact")) return;
  std::mt19937 rng(73);
  const cuda::Stream stream;
  for (const int64_t d : {64, 128}) {
    for (const int64_t group : {1, 8}) {
      for (const auto& [window, sinks] : {std::pair{int64_t{128}, true}, std::pair{int64_t{32}, true},
                                          std::pair{int64_t{100}, false}, std::pair{int64_t{0}, true}}) {
        for (const int64_t context : {1, 40, 129, 300, 5000}) {
          for (const float amplitude : {1.5f, 60.0f}) {
            check_case({4, group, d, context - 1, 1, amplitude, window, sinks}, rng, stream);
          }
        }
        for (const int64_t first : {0, 777}) {
          for (const int64_t n : {1, 17, 65, 300}) {
            check_case({2, group, d, first, n, n % 2 == 1 ? 60.0f : 1.5f, window, sinks}, rng, stream);
          }
        }
      }
      check_case({4, group, d, 40959, 1, 1.5f, 128, true}, rng, stream);
    }
  }
}

// A row's floats do not depend on the rest of its batch (its sums run over the same positions
// in the same order): rows of a long prompt pass equal, bit for bit, the same rows as decode
// steps (a block per segment), as a short batch (one row tile, a block per segment) and as a
// middle batch (all segments in one block). What prompt caching and batched decoding rely on.
TEST(cuda_tiled_attention_rows_do_not_depend_on_the_batch) {
  if (!attention_ready("cuda_tiled_attention_rows_do_not_depend_on_the_batch")) return;
  std::mt19937 rng(53);
  const cuda::Stream stream;
  const auto sinks = upload(random_floats(16, 3.0f, rng));
  for (const auto& [d, group, window] :
       {std::tuple{int64_t{128}, int64_t{1}, int64_t{0}}, std::tuple{int64_t{128}, int64_t{8}, int64_t{0}},
        std::tuple{int64_t{64}, int64_t{1}, int64_t{0}}, std::tuple{int64_t{64}, int64_t{8}, int64_t{0}},
        std::tuple{int64_t{64}, int64_t{8}, int64_t{96}}, std::tuple{int64_t{256}, int64_t{8}, int64_t{0}}}) {
    {
      const int64_t kv_heads = 2, heads = kv_heads * group, first = 500, n = 300, length = first + n;
      const int64_t kv_width = kv_heads * d, q_width = heads * d;
      std::vector<uint16_t> keys(static_cast<size_t>(length * kv_width)), values(keys.size());
      for (auto* cache : {&keys, &values}) {
        for (auto& x : *cache) x = quant::fp32_to_fp16(std::uniform_real_distribution<float>(-1.5f, 1.5f)(rng));
      }
      const auto q = random_floats(static_cast<size_t>(n * q_width), 3.0f, rng);
      std::vector<int32_t> positions(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) positions[i] = static_cast<int32_t>(first + i);
      // gpt-oss's shape with a window: which segments a block skips depends on its batch, and the
      // floats must not.
      cuda::AttentionShape shape{heads, kv_heads, d, 1.0f / std::sqrt(static_cast<float>(d)), length};
      shape.window = window;
      shape.sinks = window > 0 ? sinks.as<float>() : nullptr;
      const auto dk = upload(keys), dv = upload(values);
      cuda::DeviceBuffer scratch(cuda::attention_scratch_bytes(shape, n), "scratch");
      const auto attend = [&](int64_t row, int64_t rows) {
        const std::vector<float> part(q.begin() + row * q_width, q.begin() + (row + rows) * q_width);
        const std::vector<int32_t> at(positions.begin() + row, positions.begin() + row + rows);
        const auto dq = upload(part), dpos = upload(at);
        cuda::DeviceBuffer out(part.size() * sizeof(float), "out");
        cuda::causal_attention(dq.as<float>(), rows, dpos.as<int32_t>(), dk.as<uint16_t>(), dv.as<uint16_t>(), shape,
                               scratch.data(), out.as<float>(), stream.handle());
        return download<float>(out, part.size(), stream);
      };
      const auto whole = attend(0, n);
      for (const auto& [row, rows] :
           {std::pair{int64_t{0}, int64_t{1}}, std::pair{int64_t{137}, int64_t{1}}, std::pair{int64_t{299}, int64_t{1}},
            std::pair{int64_t{100}, int64_t{4}}, std::pair{int64_t{200}, int64_t{37}}}) {
        const auto got = attend(row, rows);
        const std::vector<float> want(whole.begin() + row * q_width, whole.begin() + (row + rows) * q_width);
        CHECK(mismatches(got, want) == 0)
            << "head_dim " << d << ", group " << group << ", window " << window << ": rows " << row << " to "
            << row + rows - 1 << " alone differ from the whole pass in " << mismatches(got, want) << " of "
            << want.size();
      }
    }
  }
}

// A decode step's blocks fold every segment's statistics only once all are stored: at 8,192
// positions (128 segments of 4 KV heads, 512 blocks) the fused kernel's blocks meet at
// segment_barrier; at 40,960 (2,560 blocks, more than the GPU holds at once) the last statistics
// block of each KV head folds them for the values launch (last_segment_block). Two query sets
// decode in turn, 200 times each, and every result equals that query set's first, bit for bit. A
// block that read the statistics early would find the other query set's, left by the launch before.
TEST(cuda_tiled_attention_decode_blocks_wait_for_every_segment) {
  if (!attention_ready("cuda_tiled_attention_decode_blocks_wait_for_every_segment")) return;
  std::mt19937 rng(61);
  const cuda::Stream stream;
  const int64_t kv_heads = 4, heads = 32, d = 128, q_width = heads * d;
  for (const int64_t length : {8192, 40960}) {
    const cuda::AttentionShape shape{heads, kv_heads, d, 1.0f / std::sqrt(static_cast<float>(d)), length};
    const auto cache = random_cache(length * kv_heads * d, rng);
    const auto dk = upload(cache), dv = upload(cache);
    const auto dpos = upload(std::vector<int32_t>{static_cast<int32_t>(length - 1)});
    const cuda::DeviceBuffer queries[2] = {upload(random_floats(static_cast<size_t>(q_width), 3.0f, rng)),
                                           upload(random_floats(static_cast<size_t>(q_width), 3.0f, rng))};
    cuda::DeviceBuffer scratch(cuda::attention_scratch_bytes(shape, 1), "scratch");
    cuda::DeviceBuffer out(static_cast<size_t>(q_width) * sizeof(float), "out");
    std::vector<float> first[2];
    int differing = 0;
    for (int run = 0; run < 400; ++run) {
      const int which = run % 2;
      cuda::causal_attention(queries[which].as<float>(), 1, dpos.as<int32_t>(), dk.as<uint16_t>(), dv.as<uint16_t>(),
                             shape, scratch.data(), out.as<float>(), stream.handle());
      const auto got = download<float>(out, static_cast<size_t>(q_width), stream);
      if (run < 2) {
        first[which] = got;
      } else if (mismatches(got, first[which]) != 0) {
        ++differing;
      }
    }
    CHECK(differing == 0) << "at " << length << " positions, " << differing
                          << " of 398 decode steps differ from their query set's first";
  }
}

// A decode step over a long cache: a block per segment of every KV head is more blocks than the
// GPU holds at once, so they cannot wait for each other (segment_barrier would wait forever for
// blocks that never start); the step runs as two launches, each block leaving its segment's
// product. It ends, and its row equals, bit for bit, the same row in a batch whose blocks run all
// of their segments, and the exact kernel's within check_case's bound.
TEST(cuda_tiled_attention_decode_over_a_long_cache) {
  if (!attention_ready("cuda_tiled_attention_decode_over_a_long_cache")) return;
  std::mt19937 rng(71);
  const cuda::Stream stream;
  const int64_t kv_heads = 4, heads = 32, d = 128, length = 40960, rows = 40, q_width = heads * d;
  const cuda::AttentionShape shape{heads, kv_heads, d, 1.0f / std::sqrt(static_cast<float>(d)), length};
  const auto dk = upload(random_cache(length * kv_heads * d, rng)),
             dv = upload(random_cache(length * kv_heads * d, rng));
  const auto q = random_floats(static_cast<size_t>(rows * q_width), 3.0f, rng);
  std::vector<int32_t> positions(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) positions[i] = static_cast<int32_t>(length - rows + i);
  cuda::DeviceBuffer scratch(cuda::attention_scratch_bytes(shape, rows), "scratch");
  const auto attend = [&](int64_t row, int64_t n) {
    const auto dq = upload(std::vector<float>(q.begin() + row * q_width, q.begin() + (row + n) * q_width));
    const auto dpos = upload(std::vector<int32_t>(positions.begin() + row, positions.begin() + row + n));
    cuda::DeviceBuffer out(static_cast<size_t>(n * q_width) * sizeof(float), "out");
    cuda::causal_attention(dq.as<float>(), n, dpos.as<int32_t>(), dk.as<uint16_t>(), dv.as<uint16_t>(), shape,
                           scratch.data(), out.as<float>(), stream.handle());
    return download<float>(out, static_cast<size_t>(n * q_width), stream);
  };
  const auto batch = attend(0, rows);
  const auto last = attend(rows - 1, 1);
  const std::vector<float> want(batch.end() - q_width, batch.end());
  CHECK(mismatches(last, want) == 0) << "the last row decoded alone differs from the batch's in "
                                     << mismatches(last, want) << " of " << want.size();
  check_case({kv_heads, heads / kv_heads, d, length - 1, 1, 1.5f}, rng, stream);
}

// Decode rows (a block per segment) also come back quantized when asked, for K-quant weights
// (Q8_K) and Q8_0's, exactly as quantize_activations quantizes the float output; a prompt batch
// (all segments in one block) says it did not quantize.
TEST(cuda_tiled_attention_quantizes_decode_rows) {
  if (!attention_ready("cuda_tiled_attention_quantizes_decode_rows")) return;
  std::mt19937 rng(59);
  const cuda::Stream stream;
  const int64_t kv_heads = 4, heads = 32, d = 128, length = 700, q_width = heads * d;
  const cuda::AttentionShape shape{heads, kv_heads, d, 1.0f / std::sqrt(static_cast<float>(d)), length};
  const auto cache = random_cache(length * kv_heads * d, rng);
  const auto dk = upload(cache), dv = upload(cache);
  cuda::DeviceBuffer scratch(cuda::attention_scratch_bytes(shape, 64), "scratch");
  for (const uint32_t type : {quant::BlockQ4_K::kType, quant::BlockQ8_0::kType}) {
    for (const int64_t n : {1, 2, 64}) {
      const auto dq = upload(random_floats(static_cast<size_t>(n * q_width), 2.0f, rng));
      std::vector<int32_t> positions(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) positions[i] = static_cast<int32_t>(length - n + i);
      const auto dpos = upload(positions);
      const size_t blocks = static_cast<size_t>(n * q_width / 32);
      cuda::DeviceBuffer out(static_cast<size_t>(n * q_width) * sizeof(float), "out");
      cuda::DeviceBuffer got(blocks * sizeof(cuda::ActivationBlock), "quantized");
      cuda::DeviceBuffer want(blocks * sizeof(cuda::ActivationBlock), "reference");
      const bool quantized = cuda::causal_attention(dq.as<float>(), n, dpos.as<int32_t>(), dk.as<uint16_t>(),
                                                    dv.as<uint16_t>(), shape, scratch.data(), out.as<float>(),
                                                    stream.handle(), {got.as<cuda::ActivationBlock>(), type});
      CHECK(quantized == (n <= 2)) << n << " rows: quantized " << quantized;
      if (!quantized) continue;
      cuda::quantize_activations(out.as<float>(), n, q_width, type, want.as<cuda::ActivationBlock>(), stream.handle());
      const auto a = download<uint8_t>(got, blocks * sizeof(cuda::ActivationBlock), stream);
      const auto b = download<uint8_t>(want, blocks * sizeof(cuda::ActivationBlock), stream);
      CHECK(a == b) << n << " rows, ggml type " << type << ": the blocks differ from quantize_activations'";
    }
  }
}

// A decode step of several sequences in one launch (batched_causal_attention) gives each row the
// floats (and quantized blocks) of its sequence attended alone: up to 8 sequences of their own
// caches and capacities, at depths on both sides of a segment's edge and deep into the cache,
// some of two rows (a verify step), for head_dim 128, 64 and 256, 8 and 4 query heads per KV head.
// Run twice over, alternating two query sets, so a barrier or statistic left by the launch
// before cannot pass. A sequence attending another's cache, or its rows another's positions, fails.
TEST(cuda_batched_decode_attention_equals_each_sequence_alone) {
  if (!attention_ready("cuda_batched_decode_attention_equals_each_sequence_alone")) return;
  std::mt19937 rng(67);
  const cuda::Stream stream;
  const uint32_t type = quant::BlockQ4_K::kType;
  const auto sinks = upload(random_floats(32, 3.0f, rng));
  // Without and with gpt-oss's window and sinks.
  for (const int64_t window : {0, 96})
    for (const int64_t d : {128, 64, 256}) {
      for (const int64_t group : {8, 4, 2}) {
        const int64_t kv_heads = group == 2 ? 2 : 4, heads = kv_heads * group, q_width = heads * d;
        // (depth of the first row, rows, capacity) per sequence.
        const std::vector<std::tuple<int64_t, int64_t, int64_t>> sequences =
            group == 8
                ? std::vector<std::tuple<int64_t, int64_t, int64_t>>{{0, 1, 64},     {63, 1, 200},    {64, 2, 130},
                                                                     {700, 1, 4096}, {3000, 1, 3001}, {5, 2, 512}}
                : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 1, 64},      {100, 1, 128}, {64, 1, 65},
                                                                     {2047, 1, 2048}, {9, 1, 4096},  {300, 1, 301},
                                                                     {4000, 1, 4096}, {128, 1, 129}};
        int64_t n = 0, capacity = 0;
        for (const auto& [depth, rows, cap] : sequences) n += rows, capacity = std::max(capacity, cap);
        const float scale = 1.0f / std::sqrt(static_cast<float>(d));
        std::vector<cuda::DeviceBuffer> keys, values;
        std::vector<int32_t> positions;
        cuda::KvSegments batch;
        batch.count = static_cast<int>(sequences.size());
        for (size_t i = 0; i < sequences.size(); ++i) {
          const auto& [depth, rows, cap] = sequences[i];
          keys.push_back(upload(random_cache(cap * kv_heads * d, rng)));
          values.push_back(upload(random_cache(cap * kv_heads * d, rng)));
          batch.keys[i] = keys.back().as<uint16_t>();
          batch.values[i] = values.back().as<uint16_t>();
          batch.first_row[i] = static_cast<int>(positions.size());
          for (int64_t r = 0; r < rows; ++r) positions.push_back(static_cast<int32_t>(depth + r));
        }
        batch.first_row[batch.count] = static_cast<int>(n);
        const auto with_window = [&](cuda::AttentionShape shape) {
          shape.window = window;
          shape.sinks = window > 0 ? sinks.as<float>() : nullptr;
          return shape;
        };
        const cuda::AttentionShape shape = with_window({heads, kv_heads, d, scale, capacity});
        CHECK(cuda::batched_attention_serves(shape, batch)) << "head_dim " << d << ", group " << group;
        const auto dpos = upload(positions);
        const size_t blocks = static_cast<size_t>(n * q_width / 32);
        cuda::DeviceBuffer scratch(cuda::attention_scratch_bytes(shape, 64), "scratch");
        cuda::DeviceBuffer out(static_cast<size_t>(n * q_width) * sizeof(float), "out");
        cuda::DeviceBuffer quantized(blocks * sizeof(cuda::ActivationBlock), "quantized");
        const cuda::DeviceBuffer queries[2] = {upload(random_floats(static_cast<size_t>(n * q_width), 3.0f, rng)),
                                               upload(random_floats(static_cast<size_t>(n * q_width), 3.0f, rng))};
        // Each query set's rows, sequence by sequence, attended alone.
        std::vector<float> want[2];
        std::vector<uint8_t> want_blocks[2];
        for (int which = 0; which < 2; ++which) {
          for (size_t i = 0; i < sequences.size(); ++i) {
            const auto& [depth, rows, cap] = sequences[i];
            const int64_t first = batch.first_row[i];
            const cuda::AttentionShape own = with_window({heads, kv_heads, d, scale, cap});
            cuda::DeviceBuffer alone_scratch(cuda::attention_scratch_bytes(own, 64), "scratch");
            CHECK(cuda::causal_attention(queries[which].as<float>() + first * q_width, rows, dpos.as<int32_t>() + first,
                                         batch.keys[i], batch.values[i], own, alone_scratch.data(),
                                         out.as<float>() + first * q_width, stream.handle(),
                                         {quantized.as<cuda::ActivationBlock>() + first * (q_width / 32), type}));
          }
          want[which] = download<float>(out, static_cast<size_t>(n * q_width), stream);
          want_blocks[which] = download<uint8_t>(quantized, blocks * sizeof(cuda::ActivationBlock), stream);
        }
        for (int run = 0; run < 4; ++run) {
          const int which = run % 2;
          const bool wrote = cuda::batched_causal_attention(
              queries[which].as<float>(), dpos.as<int32_t>(), batch, shape, scratch.data(), out.as<float>(),
              {quantized.as<cuda::ActivationBlock>(), type}, stream.handle());
          const auto got = download<float>(out, static_cast<size_t>(n * q_width), stream);
          CHECK(wrote) << "head_dim " << d << ", group " << group << ": the rows were not quantized";
          CHECK(mismatches(got, want[which]) == 0) << "head_dim " << d << ", group " << group << ", window " << window
                                                   << ", run " << run << ": " << mismatches(got, want[which]) << " of "
                                                   << got.size() << " outputs differ from the sequences attended alone";
          CHECK(download<uint8_t>(quantized, blocks * sizeof(cuda::ActivationBlock), stream) == want_blocks[which])
              << "head_dim " << d << ", group " << group << ", run " << run << ": the quantized rows differ";
        }
      }
    }
}

// Not a check: the times of both kernels on the qwen3-30b-a3b shape (32 query heads, 4 KV
// heads, head_dim 128) and Qwen3.6-35B-A3B's gated attention (16 query heads, 2 KV heads,
// head_dim 256), for the device report: a prompt batch of 512 rows at the start and at the end
// of a 4,096-token prompt, and decode rows at short and long contexts.
TEST(cuda_attention_times) {
  if (!attention_ready("cuda_attention_times")) return;
  std::mt19937 rng(47);
  const cuda::Stream stream;
  const int64_t capacity = 8192;
  for (const auto& [heads, kv_heads, d] :
       {std::tuple{int64_t{32}, int64_t{4}, int64_t{128}}, std::tuple{int64_t{16}, int64_t{2}, int64_t{256}}}) {
    const cuda::AttentionShape shape{heads, kv_heads, d, 1.0f / std::sqrt(static_cast<float>(d)), capacity};
    const int64_t kv_width = shape.kv_heads * shape.head_dim, q_width = shape.heads * shape.head_dim;
    const auto cache = random_cache(capacity * kv_width, rng);
    const auto keys = upload(cache), values = upload(cache);
    const auto q = upload(random_floats(static_cast<size_t>(512 * q_width), 1.5f, rng));
    cuda::DeviceBuffer out(static_cast<size_t>(512 * q_width) * sizeof(float), "out");
    cuda::DeviceBuffer scratch(cuda::attention_scratch_bytes(shape, 512), "scratch");
    for (const auto& [first, n] : {std::pair{int64_t{0}, int64_t{512}}, std::pair{int64_t{3584}, int64_t{512}},
                                   std::pair{int64_t{299}, int64_t{1}}, std::pair{int64_t{4095}, int64_t{1}},
                                   std::pair{int64_t{8191}, int64_t{1}}, std::pair{int64_t{4095}, int64_t{4}}}) {
      std::vector<int32_t> positions(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) positions[i] = static_cast<int32_t>(first + i);
      const auto dpos = upload(positions);
      const auto time = [&](const auto& launch) {
        launch();
        stream.synchronize();
        constexpr int kRuns = 20;
        const auto start = std::chrono::steady_clock::now();
        for (int r = 0; r < kRuns; ++r) launch();
        stream.synchronize();
        return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / kRuns;
      };
      const double exact = time([&] {
        cuda::exact_causal_attention(q.as<float>(), n, dpos.as<int32_t>(), keys.as<uint16_t>(), values.as<uint16_t>(),
                                     shape, out.as<float>(), stream.handle());
      });
      const double tiled = time([&] {
        cuda::causal_attention(q.as<float>(), n, dpos.as<int32_t>(), keys.as<uint16_t>(), values.as<uint16_t>(), shape,
                               scratch.data(), out.as<float>(), stream.handle());
      });
      cuda::check_launch("attention times");
      std::printf("  attention, head_dim %lld, %lld rows from position %lld: exact %.1f us, tiled %.1f us (%.1fx)\n",
                  static_cast<long long>(d), static_cast<long long>(n), static_cast<long long>(first), exact, tiled,
                  exact / tiled);
    }
  }
}

#else

TEST(cuda_attention_skipped) { std::printf("skip cuda_attention tests: this build has no CUDA\n"); }

#endif
