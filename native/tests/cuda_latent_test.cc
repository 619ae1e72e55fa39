// Multi-head latent attention on the GPU against the CPU path: the latent attention kernels
// against cpu::causal_attention in latent attention's shape (one cache row per position whose
// first `rank` halves are the values), for DeepSeek's widths and the tests' small ones, decode
// rows at contexts 1 to 3,000 and prompts from position 0 and from mid-cache, spread and sharp
// scores; a row's floats the same in a prompt and decoded alone; and the heads' preparation
// (queries split and rotated, latents normed and rotated into the cache) against the CPU's steps.
// Skips, saying why, where there is no CUDA device.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <tuple>
#include <vector>

#include "tests/check.h"

#ifdef BLOOMERY_CUDA

#include "cpu/attention.h"
#include "cpu/rms_norm.h"
#include "cpu/rope.h"
#include "cpu/thread_pool.h"
#include "cuda/ops.h"
#include "tests/cuda_test_util.h"

using namespace bloomery;
using namespace bloomery::tests::gpu;

namespace {

constexpr float kValueAmplitude = 1.5f;

struct LatentCase {
  int64_t rank, rope, heads, first, n;
  float query_amplitude;
};

struct LatentRun {
  std::vector<float> q_latent, q_rope;
  std::vector<uint16_t> cache;  // rows of key_row halves, [latent, rope] first
  int64_t key_row = 0;
  std::vector<int32_t> positions;
  // A sparse choice: each token's top_k positions (empty: every position).
  std::vector<int32_t> selected;
  int64_t top_k = 0;
};

// Random queries and cache rows (of key_row halves; 0: rank + rope).
LatentRun random_run(const LatentCase& c, std::mt19937& rng, int64_t key_row = 0) {
  LatentRun r;
  const int64_t length = c.first + c.n;
  r.key_row = key_row > 0 ? key_row : c.rank + c.rope;
  r.cache.resize(static_cast<size_t>((length + 300) * r.key_row));
  for (auto& x : r.cache) {
    x = quant::fp32_to_fp16(std::uniform_real_distribution<float>(-kValueAmplitude, kValueAmplitude)(rng));
  }
  r.q_latent = random_floats(static_cast<size_t>(c.n * c.heads * c.rank), c.query_amplitude, rng);
  r.q_rope = random_floats(static_cast<size_t>(c.n * c.heads * c.rope), c.query_amplitude, rng);
  for (int64_t i = 0; i < c.n; ++i) r.positions.push_back(static_cast<int32_t>(c.first + i));
  return r;
}

// The scale of a head of rank + rope dims, as DeepSeek's (whose YaRN mscale is near 1).
float latent_scale(const LatentCase& c) { return 1.0f / std::sqrt(static_cast<float>(c.rank + c.rope)); }

std::vector<float> gpu_latent(const LatentCase& c, const LatentRun& r, const cuda::Stream& stream) {
  const int64_t capacity = static_cast<int64_t>(r.cache.size()) / r.key_row;
  const auto dql = upload(r.q_latent), dqr = upload(r.q_rope), dc = upload(r.cache), dp = upload(r.positions);
  const auto ds = upload(r.selected);
  cuda::DeviceBuffer out(static_cast<size_t>(c.n * c.heads * c.rank) * sizeof(float), "out");
  cuda::DeviceBuffer scratch(cuda::latent_attention_scratch_bytes(c.heads, c.rank, capacity, c.n), "scratch");
  cuda::prepare_latent_attention(c.rank, c.rope);
  cuda::LatentAttention a;
  a.q_latent = dql.as<float>();
  a.q_rope = dqr.as<float>();
  a.positions = dp.as<int32_t>();
  a.cache = dc.as<uint16_t>();
  a.key_row = r.key_row;
  if (r.top_k > 0) {
    a.selected = ds.as<int32_t>();
    a.top_k = r.top_k;
  }
  a.n = c.n;
  a.heads = c.heads;
  a.rank = c.rank;
  a.rope = c.rope;
  a.scale = latent_scale(c);
  a.cache_positions = capacity;
  a.out = out.as<float>();
  cuda::latent_attention(a, scratch.data(), stream.handle());
  cuda::check_launch("latent attention test");
  return download<float>(out, static_cast<size_t>(c.n * c.heads * c.rank), stream);
}

std::vector<float> cpu_latent(const LatentCase& c, const LatentRun& r, cpu::ThreadPool& pool) {
  const int64_t key = c.rank + c.rope;
  std::vector<float> q(static_cast<size_t>(c.n * c.heads * key));
  for (int64_t row = 0; row < c.n * c.heads; ++row) {
    std::copy_n(r.q_latent.data() + row * c.rank, c.rank, q.data() + row * key);
    std::copy_n(r.q_rope.data() + row * c.rope, c.rope, q.data() + row * key + c.rank);
  }
  std::vector<float> out(static_cast<size_t>(c.n * c.heads * c.rank));
  cpu::AttentionShape shape{c.heads, 1, key, c.rank, latent_scale(c), r.key_row, r.key_row};
  if (r.top_k > 0) {
    shape.selected = r.selected.data();
    shape.selected_count = r.top_k;
  }
  cpu::causal_attention(q.data(), c.n, c.first, r.cache.data(), r.cache.data(), shape, out.data(), pool);
  return out;
}

// As cuda_attention_test.cc bounds the tiled kernels against the exact one: the order of float
// sums may move a probability's f16 rounding by one ulp where a score sits within float noise of
// a rounding boundary, so the largest difference is max|v| (2^-10 + 3 length 2^-24), and
// (row, head) outputs more than 2^-12 max|v| away are rare.
void check_case(const LatentCase& c, std::mt19937& rng, const cuda::Stream& stream, cpu::ThreadPool& pool) {
  const LatentRun r = random_run(c, rng);
  const auto got = gpu_latent(c, r, stream);
  const auto want = cpu_latent(c, r, pool);
  const int64_t length = c.first + c.n;
  const double bound =
      kValueAmplitude * (std::ldexp(1.0, -10) + 3.0 * static_cast<double>(length) * std::ldexp(1.0, -24));
  const double far = kValueAmplitude * std::ldexp(1.0, -12);
  double largest = 0.0;
  int64_t beyond = 0;
  for (int64_t h = 0; h < c.n * c.heads; ++h) {
    bool away = false;
    for (int64_t i = h * c.rank; i < (h + 1) * c.rank; ++i) {
      const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
      largest = std::isnan(diff) ? INFINITY : std::max(largest, diff);
      away = away || !(diff <= far);
    }
    beyond += away;
  }
  CHECK(largest <= bound) << "rank " << c.rank << ", " << c.heads << " heads, " << c.n << " rows from " << c.first
                          << ", amplitude " << c.query_amplitude << ": largest difference " << largest
                          << " over the bound " << bound;
  CHECK(beyond <= 1 + c.n * c.heads / 100) << "rank " << c.rank << ", " << c.n << " rows from " << c.first << ": "
                                           << beyond << " (row, head) outputs differ by more than " << far;
}

}  // namespace

TEST(cuda_latent_attention_matches_cpu) {
  if (!device_ready("cuda_latent_attention_matches_cpu")) return;
  std::mt19937 rng(71);
  const cuda::Stream stream;
  cpu::ThreadPool pool(4);
  for (const auto& [rank, rope] : {std::pair<int64_t, int64_t>{512, 64}, std::pair<int64_t, int64_t>{128, 32}}) {
    for (const int64_t heads : {4, 16, 128}) {
      for (const int64_t context : {1, 70, 3000}) {
        for (const float amplitude : {1.5f, 40.0f})
          check_case({rank, rope, heads, context - 1, 1, amplitude}, rng, stream, pool);
      }
      check_case({rank, rope, heads, 0, 37, 1.5f}, rng, stream, pool);
      check_case({rank, rope, heads, 200, 90, 1.5f}, rng, stream, pool);
    }
  }
}

// A prompt's rows and the same rows decoded one at a time over the same cache: the same floats.
TEST(cuda_latent_attention_rows_do_not_depend_on_the_batch) {
  if (!device_ready("cuda_latent_attention_rows_do_not_depend_on_the_batch")) return;
  std::mt19937 rng(72);
  const cuda::Stream stream;
  for (const int64_t heads : {4, 128}) {
    const LatentCase prompt{512, 64, heads, 100, 140, 1.5f};
    const LatentRun r = random_run(prompt, rng);
    const auto all = gpu_latent(prompt, r, stream);
    for (const int64_t i : {0, 63, 64, 139}) {
      LatentRun one = r;
      one.q_latent.assign(r.q_latent.begin() + i * heads * 512, r.q_latent.begin() + (i + 1) * heads * 512);
      one.q_rope.assign(r.q_rope.begin() + i * heads * 64, r.q_rope.begin() + (i + 1) * heads * 64);
      one.positions = {r.positions[i]};
      const auto alone = gpu_latent({512, 64, heads, prompt.first + i, 1, 1.5f}, one, stream);
      CHECK(std::memcmp(alone.data(), all.data() + i * heads * 512, alone.size() * sizeof(float)) == 0)
          << heads << " heads, row " << i << ": decoded alone it differs from the prompt's row";
    }
  }
}

// Sparse latent attention (a lightning indexer's choice) against cpu::causal_attention with the
// same choice: each token attends top_k positions listed in no particular order (all it sees, then
// -1, where they are fewer), over cache rows wider than [latent, rope] (the indexer's key follows);
// heads fewer than a group's 16 rows, 16, a part of a batch block's 64, and several batch blocks a
// token; decode rows alone and prompts.
TEST(cuda_sparse_latent_attention_matches_cpu) {
  if (!device_ready("cuda_sparse_latent_attention_matches_cpu")) return;
  std::mt19937 rng(74);
  const cuda::Stream stream;
  cpu::ThreadPool pool(4);
  for (const auto& [rank, rope] : {std::pair<int64_t, int64_t>{512, 64}, std::pair<int64_t, int64_t>{128, 32}}) {
    for (const int64_t heads : {4, 16, 40, 128}) {
      for (const auto& [first, n, top_k] :
           {std::tuple<int64_t, int64_t, int64_t>{9, 1, 16}, std::tuple<int64_t, int64_t, int64_t>{2999, 1, 100},
            std::tuple<int64_t, int64_t, int64_t>{0, 37, 24}, std::tuple<int64_t, int64_t, int64_t>{300, 70, 130}}) {
        const LatentCase c{rank, rope, heads, first, n, 1.5f};
        LatentRun r = random_run(c, rng, rank + rope + 64);
        r.top_k = top_k;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t seen = first + i + 1;
          std::vector<int32_t> all(static_cast<size_t>(seen));
          std::iota(all.begin(), all.end(), 0);
          if (seen > top_k) std::shuffle(all.begin(), all.end(), rng);
          all.resize(static_cast<size_t>(top_k), -1);
          r.selected.insert(r.selected.end(), all.begin(), all.end());
        }
        const auto got = gpu_latent(c, r, stream);
        const auto want = cpu_latent(c, r, pool);
        // As check_case bounds the dense kernels, over top_k attended positions.
        const double bound =
            kValueAmplitude * (std::ldexp(1.0, -10) + 3.0 * static_cast<double>(top_k) * std::ldexp(1.0, -24));
        double largest = 0.0;
        for (size_t i = 0; i < got.size(); ++i) {
          const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
          largest = std::isnan(diff) ? INFINITY : std::max(largest, diff);
        }
        CHECK(largest <= bound) << "rank " << rank << ", " << heads << " heads, " << n << " rows from " << first
                                << ", top " << top_k << ": largest difference " << largest << " over " << bound;
      }
    }
  }
}

// split_latent_query and store_latent against the CPU's steps (engine/forward.cc's mla_attention:
// the query's rope part rotated, the latent RMS-normed, the key rotated), with YaRN; cos and sin
// may differ from the host's libm in the last bit on rare angles.
TEST(cuda_latent_heads_match_cpu) {
  if (!device_ready("cuda_latent_heads_match_cpu")) return;
  std::mt19937 rng(73);
  const cuda::Stream stream;
  const int64_t n = 5, heads = 3, nope = 64, rope_dims = 32, rank = 128, key = rank + rope_dims;
  const std::vector<int32_t> positions = {0, 1, 2, 900, 4095};
  cpu::RopeParams params;
  params.dims = rope_dims;
  params.freq_base = 10000.0f;
  params.freq_scale = 0.25f;
  params.ext_factor = 1.0f;
  params.original_context = 512;
  params.attn_factor = 1.0f / (1.0f + 0.1f * std::log(4.0f));
  const cpu::RopeConstants k = cpu::rope_constants(params);
  const cuda::RopeShape shape{false,         rope_dims,  params.freq_scale, nullptr, params.ext_factor,
                              k.theta_scale, k.ramp_low, k.ramp_high,       k.mscale};
  const auto q = random_floats(static_cast<size_t>(n * heads * (nope + rope_dims)), 3.0f, rng);
  const auto kv = random_floats(static_cast<size_t>(n * key), 3.0f, rng);
  const auto norm = random_floats(static_cast<size_t>(rank), 1.0f, rng);
  const auto dq = upload(q), dkv = upload(kv), dnorm = upload(norm), dpos = upload(positions);
  cuda::DeviceBuffer nope_out(static_cast<size_t>(n * heads * nope) * sizeof(float), "nope");
  cuda::DeviceBuffer rope_out(static_cast<size_t>(n * heads * rope_dims) * sizeof(float), "rope");
  const auto cache = upload(std::vector<uint16_t>(static_cast<size_t>(4096 * key), 0));
  cuda::split_latent_query(dq.as<float>(), n, heads, nope, dpos.as<int32_t>(), shape, nope_out.as<float>(),
                           rope_out.as<float>(), stream.handle());
  cuda::KvSegments segments;
  segments.count = 1;
  segments.first_row[1] = static_cast<int>(n);
  segments.keys[0] = cache.as<uint16_t>();
  cuda::store_latent(dkv.as<float>(), n, rank, dnorm.as<float>(), 1e-6f, dpos.as<int32_t>(), shape, segments, key,
                     stream.handle());
  const auto got_nope = download<float>(nope_out, static_cast<size_t>(n * heads * nope), stream);
  const auto got_rope = download<float>(rope_out, static_cast<size_t>(n * heads * rope_dims), stream);
  const auto got_cache = download<uint16_t>(cache, static_cast<size_t>(4096 * key), stream);

  std::vector<float> want_nope, want_rope, angles;
  std::vector<float> latent(static_cast<size_t>(key));
  int64_t cache_misses = 0;
  for (int64_t i = 0; i < n; ++i) {
    cpu::rope_angles(params, positions[i], angles);
    for (int64_t h = 0; h < heads; ++h) {
      const float* head = q.data() + (i * heads + h) * (nope + rope_dims);
      want_nope.insert(want_nope.end(), head, head + nope);
      std::vector<float> pe(head + nope, head + nope + rope_dims);
      cpu::rope_apply(pe.data(), 1, rope_dims, params, angles);
      want_rope.insert(want_rope.end(), pe.begin(), pe.end());
    }
    std::copy_n(kv.data() + i * key, key, latent.data());
    cpu::rms_norm(latent.data(), 1, rank, key, norm.data(), 1e-6f, latent.data(), key);
    cpu::rope_apply(latent.data() + rank, 1, rope_dims, params, angles);
    for (int64_t j = 0; j < key; ++j) {
      cache_misses += got_cache[positions[i] * key + j] != quant::fp32_to_fp16(latent[j]);
    }
  }
  CHECK(got_nope == want_nope) << "the unrotated query parts differ";
  CHECK(mismatches(got_rope, want_rope) <= want_rope.size() / 50 && relative_error(got_rope, want_rope) < 1e-6)
      << mismatches(got_rope, want_rope) << " rotated query values differ";
  CHECK(cache_misses <= n * key / 50) << cache_misses << " cached halves differ";
}

// DeepSeek-V4's key rows (normed and rotated by then) stored as f16 at their positions' cache rows,
// two sequences in one launch, the halves after each row's width untouched.
TEST(cuda_store_rows_writes_f16_rows_at_positions) {
  if (!device_ready("cuda_store_rows_writes_f16_rows_at_positions")) return;
  std::mt19937 rng(29);
  const cuda::Stream stream;
  const int64_t width = 128, key_row = 136, capacity = 64;
  const std::vector<int32_t> positions = {0, 1, 2, 3, 7, 8, 63};  // rows 0-3 of one sequence, 4-6 of another
  const auto n = static_cast<int64_t>(positions.size());
  const auto rows = random_floats(static_cast<size_t>(n * width), 3.0f, rng);
  const std::vector<uint16_t> blank(static_cast<size_t>(capacity * key_row), 0x7c01);  // a NaN pattern
  const auto first = upload(blank), second = upload(blank), drows = upload(rows), dpos = upload(positions);
  cuda::KvSegments segments;
  segments.count = 2;
  segments.first_row[1] = 4;
  segments.first_row[2] = static_cast<int>(n);
  segments.keys[0] = first.as<uint16_t>();
  segments.keys[1] = second.as<uint16_t>();
  cuda::store_rows(drows.as<float>(), n, width, dpos.as<int32_t>(), segments, key_row, stream.handle());
  std::vector<uint16_t> want_first = blank, want_second = blank;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<uint16_t>& want = i < 4 ? want_first : want_second;
    for (int64_t j = 0; j < width; ++j) {
      want[static_cast<size_t>(positions[i] * key_row + j)] = quant::fp32_to_fp16(rows[i * width + j]);
    }
  }
  CHECK(download<uint16_t>(first, blank.size(), stream) == want_first) << "the first sequence's rows differ";
  CHECK(download<uint16_t>(second, blank.size(), stream) == want_second) << "the second sequence's rows differ";
}

#else

TEST(cuda_latent_skipped) { std::printf("skip cuda_latent tests: this build has no CUDA\n"); }

#endif
