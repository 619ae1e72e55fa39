// The GPU's float ops against the CPU path on random inputs: RMS norm, RoPE (both layouts,
// with and without frequency factors), causal attention over an f16 cache (short rows held
// in shared memory, a long one recomputed), and the MoE routing and combination. Each is
// built to round as the CPU does, so the test counts floats that differ at all.
#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

#include "tests/check.h"

#ifdef BLOOMERY_CUDA

#include "cpu/attention.h"
#include "cpu/moe.h"
#include "cpu/rms_norm.h"
#include "cpu/rope.h"
#include "cpu/thread_pool.h"
#include "cuda/ops.h"
#include "tests/cuda_test_util.h"

using namespace bloomery;
using namespace bloomery::tests::gpu;

TEST(cuda_rms_norm_matches_cpu) {
  if (!device_ready("cuda_rms_norm_matches_cpu")) return;
  std::mt19937 rng(3);
  const cuda::Stream stream;
  for (const int64_t width : {128, 256, 2048}) {
    const int64_t rows = 9;
    const auto x = random_floats(static_cast<size_t>(rows * width), 40.0f, rng);
    const auto weight = random_floats(static_cast<size_t>(width), 2.0f, rng);
    const auto dx = upload(x), dw = upload(weight);
    cuda::DeviceBuffer out(x.size() * sizeof(float), "out");
    cuda::rms_norm(dx.as<float>(), rows, width, dw.as<float>(), 1e-6f, out.as<float>(), stream.handle());
    const auto got = download<float>(out, x.size(), stream);
    std::vector<float> want(x.size());
    cpu::rms_norm(x.data(), rows, width, width, weight.data(), 1e-6f, want.data(), width);
    CHECK(mismatches(got, want) == 0) << "width " << width << ": " << mismatches(got, want)
                                      << " differ, relative error " << relative_error(got, want);
  }
}

TEST(cuda_rope_matches_cpu) {
  if (!device_ready("cuda_rope_matches_cpu")) return;
  std::mt19937 rng(5);
  const cuda::Stream stream;
  const int64_t heads = 3, head_dim = 128, n = 4;
  const std::vector<int32_t> positions = {0, 1, 777, 31000};
  const auto dpos = upload(positions);
  std::vector<float> factors(32);
  for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + static_cast<float>(i) * 0.37f;
  const auto dfactors = upload(factors);
  for (const bool neox : {false, true}) {
    for (const int64_t dims : {int64_t{128}, int64_t{64}}) {
      for (const bool with_factors : {false, true}) {
        if (with_factors && dims != 64) continue;
        cpu::RopeParams params;
        params.style = neox ? cpu::RopeStyle::kNeox : cpu::RopeStyle::kNormal;
        params.dims = dims;
        params.freq_base = 1e6f;
        params.freq_scale = 0.5f;
        params.freq_factors = with_factors ? factors.data() : nullptr;
        const auto x = random_floats(static_cast<size_t>(n * heads * head_dim), 5.0f, rng);
        auto want = x;
        std::vector<float> angles;
        for (int64_t i = 0; i < n; ++i) {
          cpu::rope_angles(params, positions[i], angles);
          cpu::rope_apply(want.data() + i * heads * head_dim, heads, head_dim, params, angles);
        }
        const auto dx = upload(x);
        const cuda::RopeShape shape{neox, dims, params.freq_base, params.freq_scale,
                                    with_factors ? dfactors.as<float>() : nullptr};
        cuda::rope(dx.as<float>(), n, heads, head_dim, dpos.as<int32_t>(), shape, stream.handle());
        const auto got = download<float>(dx, x.size(), stream);
        // cos and sin may differ from the host's libm in the last bit on rare angles.
        CHECK(mismatches(got, want) <= want.size() / 50 && relative_error(got, want) < 1e-6)
            << "neox " << neox << " dims " << dims << " factors " << with_factors << ": " << mismatches(got, want)
            << " of " << want.size() << " differ, relative error " << relative_error(got, want);
      }
    }
  }
}

TEST(cuda_attention_matches_cpu) {
  if (!device_ready("cuda_attention_matches_cpu")) return;
  std::mt19937 rng(9);
  const cuda::Stream stream;
  cpu::ThreadPool pool(2);
  struct Case {
    int64_t heads, kv_heads, head_dim, first, n;
  };
  for (const Case c : {Case{4, 2, 64, 3, 5}, Case{8, 2, 128, 0, 17}, Case{4, 4, 256, 40, 2}, Case{2, 1, 64, 2100, 2}}) {
    const int64_t kv_width = c.kv_heads * c.head_dim, q_width = c.heads * c.head_dim;
    const int64_t length = c.first + c.n;
    std::vector<uint16_t> keys(static_cast<size_t>(length * kv_width)), values(keys.size());
    // Scores of a few units, as the sharp attention of the fixtures gives.
    for (auto& k : keys) k = quant::fp32_to_fp16(std::uniform_real_distribution<float>(-1.5f, 1.5f)(rng));
    for (auto& v : values) v = quant::fp32_to_fp16(std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng));
    const auto q = random_floats(static_cast<size_t>(c.n * q_width), 1.5f, rng);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    std::vector<float> want(q.size());
    cpu::causal_attention(q.data(), c.n, c.first, keys.data(), values.data(),
                          cpu::AttentionShape{c.heads, c.kv_heads, c.head_dim, scale}, want.data(), pool);
    std::vector<int32_t> positions(static_cast<size_t>(c.n));
    for (int64_t i = 0; i < c.n; ++i) positions[i] = static_cast<int32_t>(c.first + i);
    const auto dq = upload(q), dk = upload(keys), dv = upload(values), dpos = upload(positions);
    cuda::DeviceBuffer out(q.size() * sizeof(float), "out");
    cuda::causal_attention(dq.as<float>(), c.n, dpos.as<int32_t>(), dk.as<uint16_t>(), dv.as<uint16_t>(),
                           cuda::AttentionShape{c.heads, c.kv_heads, c.head_dim, scale}, out.as<float>(),
                           stream.handle());
    const auto got = download<float>(out, q.size(), stream);
    // An exp one bit off the host's can move one probability's f16 rounding: rare, and small.
    CHECK(mismatches(got, want) <= want.size() / 100 && relative_error(got, want) < 1e-3)
        << "heads " << c.heads << " head_dim " << c.head_dim << " length " << length << ": " << mismatches(got, want)
        << " of " << want.size() << " differ, relative error " << relative_error(got, want);
  }
}

TEST(cuda_moe_routing_matches_cpu) {
  if (!device_ready("cuda_moe_routing_matches_cpu")) return;
  std::mt19937 rng(21);
  const cuda::Stream stream;
  for (const auto& [experts, used, normalize] :
       {std::tuple{int64_t{8}, int64_t{2}, true}, std::tuple{int64_t{128}, int64_t{8}, true},
        std::tuple{int64_t{60}, int64_t{4}, false}}) {
    const int64_t n = 11, width = 96;
    const auto logits = random_floats(static_cast<size_t>(n * experts), 4.0f, rng);
    cpu::Routing routing;
    cpu::route_top_k(logits.data(), n, experts, used, normalize, routing);
    const auto dl = upload(logits);
    cuda::DeviceBuffer chosen(static_cast<size_t>(n * used) * sizeof(int32_t), "chosen");
    cuda::DeviceBuffer weights(static_cast<size_t>(n * used) * sizeof(float), "weights");
    cuda::route_top_k(dl.as<float>(), n, experts, used, normalize, chosen.as<int32_t>(), weights.as<float>(),
                      stream.handle());
    const auto got_chosen = download<int32_t>(chosen, static_cast<size_t>(n * used), stream);
    const auto got_weights = download<float>(weights, static_cast<size_t>(n * used), stream);
    CHECK(got_chosen == routing.experts) << experts << " experts: chosen experts differ";
    CHECK(mismatches(got_weights, routing.weights) == 0)
        << experts << " experts: " << mismatches(got_weights, routing.weights) << " weights differ, relative error "
        << relative_error(got_weights, routing.weights);

    // Grouping: every routed slot of a GPU-resident expert once, in a chunk naming its slot,
    // in chunks of at most tokens_per_chunk; slots of host experts (-1) in none. Then the
    // combined sum over the resident experts, in k order. First every expert in slot e, then
    // the odd experts in host memory and the even ones in reversed slots.
    const int per_chunk = cuda::tokens_per_expert_chunk(n);
    const int64_t max_chunks = cuda::max_expert_chunks(n, experts, used, per_chunk);
    std::vector<int32_t> identity(static_cast<size_t>(experts)), split(static_cast<size_t>(experts), -1);
    std::iota(identity.begin(), identity.end(), 0);
    for (int64_t e = experts - 1, slot = 0; e >= 0; --e) {
      if (e % 2 == 0) split[e] = static_cast<int32_t>(slot++);
    }
    const auto expert_out = random_floats(static_cast<size_t>(n * used * width), 3.0f, rng);
    const auto residual = random_floats(static_cast<size_t>(n * width), 3.0f, rng);
    for (const auto& table : {identity, split}) {
      const char* what = table == identity ? "all on the GPU" : "odd experts on the host";
      const auto slots = upload(table);
      cuda::DeviceBuffer order(static_cast<size_t>(n * used) * sizeof(int32_t), "order");
      cuda::DeviceBuffer chunks(static_cast<size_t>(3 * max_chunks) * sizeof(int32_t), "chunks");
      cuda::DeviceBuffer chunk_count(sizeof(int32_t), "chunk count");
      cuda::group_by_expert(chosen.as<int32_t>(), n, experts, used, slots.as<int32_t>(), per_chunk, order.as<int32_t>(),
                            chunks.as<int32_t>(), chunk_count.as<int32_t>(), stream.handle());
      const auto got_order = download<int32_t>(order, static_cast<size_t>(n * used), stream);
      const auto got_chunks = download<int32_t>(chunks, static_cast<size_t>(3 * max_chunks), stream);
      const int count = download<int32_t>(chunk_count, 1, stream)[0];
      std::vector<int> seen(static_cast<size_t>(n * used), 0);
      bool consistent = count <= max_chunks;
      for (int c = 0; c < count && consistent; ++c) {
        const int slot = got_chunks[3 * c], first = got_chunks[3 * c + 1], size = got_chunks[3 * c + 2];
        consistent = size >= 1 && size <= per_chunk;
        for (int i = first; i < first + size && consistent; ++i) {
          consistent = table[routing.experts[got_order[i]]] == slot;
          ++seen[got_order[i]];
        }
      }
      for (size_t i = 0; i < seen.size(); ++i) consistent = consistent && seen[i] == (table[routing.experts[i]] >= 0);
      CHECK(consistent) << experts << " experts, " << what << ": the grouping misses, repeats or misfiles a slot";

      const auto de = upload(expert_out), dr = upload(residual);
      cuda::combine_experts(de.as<float>(), weights.as<float>(), chosen.as<int32_t>(), slots.as<int32_t>(), n, used,
                            width, dr.as<float>(), stream.handle());
      const auto got = download<float>(dr, residual.size(), stream);
      auto want = residual;
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < width; ++j) {
          float o = 0.0f;
          for (int64_t k = 0; k < used; ++k) {
            if (table[routing.experts[i * used + k]] < 0) continue;
            o += routing.weights[i * used + k] * expert_out[(i * used + k) * width + j];
          }
          want[i * width + j] += o;
        }
      }
      CHECK(mismatches(got, want) == 0) << experts << " experts, " << what << ": combined rows differ in "
                                        << mismatches(got, want);
    }
  }
}

#else

TEST(cuda_ops_skipped) { std::printf("skip cuda_ops tests: this build has no CUDA\n"); }

#endif
