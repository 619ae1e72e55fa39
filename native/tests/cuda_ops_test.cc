// The GPU's float ops against the CPU path on random inputs: RMS norm (alone, and with the MoE
// sum it adds first and the blocks it quantizes for the next product), the heads' bias, norm
// and RoPE in one launch (both layouts, with and without frequency factors) and their KV cache
// writes, the exact causal attention kernel over an f16 cache (short rows held in shared memory,
// a long one recomputed), and the MoE routing (one launch for a single row), grouping and
// combination. Each is built to round as the CPU does, so the test counts floats that differ at all.
#include <cmath>
#include <cstdio>
#include <numeric>
#include <tuple>
#include <vector>

#include "tests/check.h"

#ifdef BLOOMERY_CUDA

#include "cpu/attention.h"
#include "cpu/moe.h"
#include "cpu/rms_norm.h"
#include "cpu/rope.h"
#include "cpu/thread_pool.h"
#include "cuda/ops.h"
#include "engine/gpu_rope.h"
#include "quant/float_formats.h"
#include "tests/cuda_test_util.h"

using namespace bloomery;
using namespace bloomery::tests::gpu;

namespace {

// The CPU's combine_experts: rows[i] += sum over k of weights[i, k] * expert_out[i * used + k],
// over the experts whose slot is not -1, in k order.
void add_expert_sum(const std::vector<float>& expert_out, const cpu::Routing& routing,
                    const std::vector<int32_t>& slots, int64_t n, int64_t width, std::vector<float>& rows) {
  const int64_t used = routing.used;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < width; ++j) {
      float o = 0.0f;
      for (int64_t k = 0; k < used; ++k) {
        if (slots[routing.experts[i * used + k]] < 0) continue;
        o += routing.weights[i * used + k] * expert_out[(i * used + k) * width + j];
      }
      rows[i * width + j] += o;
    }
  }
}

cpu::Routing random_routing(int64_t n, int64_t experts, int64_t used, std::mt19937& rng) {
  cpu::Routing routing;
  const auto logits = random_floats(static_cast<size_t>(n * experts), 4.0f, rng);
  cpu::route(logits.data(), n, experts, used, {.normalize = true}, nullptr, routing);
  return routing;
}

}  // namespace

TEST(cuda_rms_norm_matches_cpu) {
  if (!device_ready("cuda_rms_norm_matches_cpu")) return;
  std::mt19937 rng(3);
  const cuda::Stream stream;
  // Widths below, at and past one block's round of 2048 values, and odd ones.
  for (const int64_t width : {128, 256, 2048, 100, 4195}) {
    const int64_t rows = 9;
    const auto x = random_floats(static_cast<size_t>(rows * width), 40.0f, rng);
    const auto weight = random_floats(static_cast<size_t>(width), 2.0f, rng);
    const auto dx = upload(x), dw = upload(weight);
    cuda::DeviceBuffer out(x.size() * sizeof(float), "out");
    cuda::RmsNorm norm;
    norm.x = dx.as<float>();
    norm.rows = rows;
    norm.width = width;
    norm.weight = dw.as<float>();
    norm.eps = 1e-6f;
    norm.out = out.as<float>();
    cuda::rms_norm(norm, stream.handle());
    const auto got = download<float>(out, x.size(), stream);
    std::vector<float> want(x.size());
    cpu::rms_norm(x.data(), rows, width, width, weight.data(), 1e-6f, want.data(), width);
    CHECK(mismatches(got, want) == 0) << "width " << width << ": " << mismatches(got, want)
                                      << " differ, relative error " << relative_error(got, want);
    CHECK(mismatches(download<float>(dx, x.size(), stream), x) == 0) << "width " << width << ": the input changed";
  }
}

// The norm that first adds the previous layer's expert sum (in place) and quantizes its output
// (in each activation format: Q8_K, Q8_0, Q8_1): the same rows as combine_experts then rms_norm
// on the CPU, the same blocks as quantize_activations of those floats (itself checked against
// the CPU in cuda_matvec_test).
TEST(cuda_rms_norm_with_expert_sum_and_blocks) {
  if (!device_ready("cuda_rms_norm_with_expert_sum_and_blocks")) return;
  std::mt19937 rng(4);
  const cuda::Stream stream;
  const int64_t experts = 16, used = 4;
  struct Case {
    int64_t width;
    uint32_t type;
  };
  for (const Case c :
       {Case{2048, quant::BlockQ4_K::kType}, Case{4352, quant::BlockQ6_K::kType}, Case{768, quant::BlockQ8_0::kType},
        Case{96, quant::BlockQ8_0::kType}, Case{2080, quant::BlockQ8_0::kType}, Case{2080, quant::BlockQ4_1::kType},
        Case{96, quant::BlockQ5_1::kType}, Case{768, quant::BlockIQ4_XS::kType}}) {
    for (const int64_t n : {1, 5}) {
      const int64_t width = c.width;
      const auto residual = random_floats(static_cast<size_t>(n * width), 3.0f, rng);
      const auto expert_out = random_floats(static_cast<size_t>(n * used * width), 3.0f, rng);
      const auto weight = random_floats(static_cast<size_t>(width), 2.0f, rng);
      const cpu::Routing routing = random_routing(n, experts, used, rng);
      std::vector<int32_t> slots(static_cast<size_t>(experts));
      for (int64_t e = 0; e < experts; ++e) slots[e] = e % 3 == 0 ? -1 : static_cast<int32_t>(e);
      const auto dr = upload(residual), de = upload(expert_out), dw = upload(weight), dc = upload(routing.experts),
                 dg = upload(routing.weights), ds = upload(slots);
      cuda::DeviceBuffer out(residual.size() * sizeof(float), "out");
      const size_t block_count = static_cast<size_t>(n * width / 32);
      cuda::DeviceBuffer blocks(block_count * sizeof(cuda::ActivationBlock), "blocks");
      cuda::DeviceBuffer want_blocks(block_count * sizeof(cuda::ActivationBlock), "want blocks");
      cuda::RmsNorm norm;
      norm.x = dr.as<float>();
      norm.rows = n;
      norm.width = width;
      norm.weight = dw.as<float>();
      norm.eps = 1e-6f;
      norm.out = out.as<float>();
      norm.pending = {de.as<float>(), dg.as<float>(), dc.as<int32_t>(), ds.as<int32_t>(), used};
      norm.blocks = blocks.as<cuda::ActivationBlock>();
      norm.blocks_for = c.type;
      cuda::rms_norm(norm, stream.handle());
      cuda::quantize_activations(out.as<float>(), n, width, c.type, want_blocks.as<cuda::ActivationBlock>(),
                                 stream.handle());
      auto want_residual = residual;
      add_expert_sum(expert_out, routing, slots, n, width, want_residual);
      std::vector<float> want(residual.size());
      cpu::rms_norm(want_residual.data(), n, width, width, weight.data(), 1e-6f, want.data(), width);
      const auto got_residual = download<float>(dr, residual.size(), stream);
      const auto got = download<float>(out, residual.size(), stream);
      const auto got_blocks = download<uint8_t>(blocks, block_count * sizeof(cuda::ActivationBlock), stream);
      const auto quantized = download<uint8_t>(want_blocks, block_count * sizeof(cuda::ActivationBlock), stream);
      CHECK(mismatches(got_residual, want_residual) == 0)
          << "width " << width << " n " << n << ": " << mismatches(got_residual, want_residual)
          << " residual values differ from combine_experts'";
      CHECK(mismatches(got, want) == 0) << "width " << width << " n " << n << ": " << mismatches(got, want)
                                        << " normed values differ, relative error " << relative_error(got, want);
      CHECK(got_blocks == quantized) << "width " << width << " n " << n << " type " << c.type
                                     << ": the norm's blocks differ from quantize_activations'";
    }
  }
}

namespace {

// The CPU path's steps for a layer's heads (engine/forward.cc): biases, per-head norms, rope.
void cpu_position_heads(std::vector<float>& x, int64_t n, int64_t heads, int64_t head_dim, const float* bias,
                        const float* norm, const cpu::RopeParams* rope, const std::vector<int32_t>& positions) {
  const int64_t width = heads * head_dim;
  if (bias) {
    for (int64_t i = 0; i < n * width; ++i) x[i] += bias[i % width];
  }
  if (norm) cpu::rms_norm(x.data(), n * heads, head_dim, head_dim, norm, 1e-6f, x.data(), head_dim);
  if (!rope) return;
  std::vector<float> angles;
  for (int64_t i = 0; i < n; ++i) {
    cpu::rope_angles(*rope, positions[i], angles);
    cpu::rope_apply(x.data() + i * width, heads, head_dim, *rope, angles);
  }
}

}  // namespace

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
        // YaRN (DeepSeek's: factor 2 over a 4096-token original context) where there are no factors.
        if (!with_factors && dims == 64) {
          params.ext_factor = 1.0f;
          params.original_context = 4096;
          params.attn_factor = 1.0f / (1.0f + 0.1f * std::log(2.0f));
        }
        const auto x = random_floats(static_cast<size_t>(n * heads * head_dim), 5.0f, rng);
        auto want = x;
        cpu_position_heads(want, n, heads, head_dim, nullptr, nullptr, &params, positions);
        const auto dx = upload(x);
        const cuda::RopeShape shape = engine::gpu_rope_shape(params, with_factors ? dfactors.as<float>() : nullptr);
        cuda::AttentionHeads h;
        h.q = dx.as<float>();
        h.heads = heads;
        h.head_dim = head_dim;
        cuda::position_heads(h, n, dpos.as<int32_t>(), shape, stream.handle());
        const auto got = download<float>(dx, x.size(), stream);
        // cos and sin may differ from the host's libm in the last bit on rare angles.
        CHECK(mismatches(got, want) <= want.size() / 50 && relative_error(got, want) < 1e-6)
            << "neox " << neox << " dims " << dims << " factors " << with_factors << " yarn " << params.ext_factor
            << ": " << mismatches(got, want) << " of " << want.size() << " differ, relative error "
            << relative_error(got, want);
      }
    }
  }
}

// q, k and v of a layer in one launch: biases, q and k head norms, rope of q and k (partly
// rotated heads too), v's bias only; against the CPU path's separate steps. The k and v rows
// also land in the KV caches of two sequences (row 0 the first's, rows 1 and 2 the second's),
// each value the f16 of what the launch left in k and v, at the row's position, nothing else.
TEST(cuda_position_heads_matches_cpu) {
  if (!device_ready("cuda_position_heads_matches_cpu")) return;
  std::mt19937 rng(6);
  const cuda::Stream stream;
  const int64_t n = 3, heads = 6, kv_heads = 2;
  const std::vector<int32_t> positions = {5, 6, 4097};
  const auto dpos = upload(positions);
  for (const int64_t head_dim : {int64_t{128}, int64_t{64}, int64_t{256}}) {
    for (const bool with_bias : {false, true}) {
      for (const bool neox : {true, false}) {
        // MiMo's layers: value heads half the keys' width, in cache rows holding one KV head more.
        const bool mimo = head_dim == 128 && with_bias;
        const int64_t value_dim = mimo ? head_dim / 2 : head_dim, row_heads = mimo ? kv_heads + 1 : kv_heads;
        const int64_t dims = neox ? head_dim : head_dim / 2;
        cpu::RopeParams params;
        params.style = neox ? cpu::RopeStyle::kNeox : cpu::RopeStyle::kNormal;
        params.dims = dims;
        params.freq_base = 1e6f;
        const int64_t q_width = heads * head_dim, kv_width = kv_heads * head_dim, v_width = kv_heads * value_dim;
        const auto q = random_floats(static_cast<size_t>(n * q_width), 5.0f, rng);
        const auto k = random_floats(static_cast<size_t>(n * kv_width), 5.0f, rng);
        const auto v = random_floats(static_cast<size_t>(n * v_width), 5.0f, rng);
        const auto q_bias = random_floats(static_cast<size_t>(q_width), 1.0f, rng);
        const auto k_bias = random_floats(static_cast<size_t>(kv_width), 1.0f, rng);
        const auto v_bias = random_floats(static_cast<size_t>(v_width), 1.0f, rng);
        const auto q_norm = random_floats(static_cast<size_t>(head_dim), 2.0f, rng);
        const auto k_norm = random_floats(static_cast<size_t>(head_dim), 2.0f, rng);
        auto want_q = q, want_k = k, want_v = v;
        cpu_position_heads(want_q, n, heads, head_dim, with_bias ? q_bias.data() : nullptr, q_norm.data(), &params,
                           positions);
        cpu_position_heads(want_k, n, kv_heads, head_dim, with_bias ? k_bias.data() : nullptr, k_norm.data(), &params,
                           positions);
        cpu_position_heads(want_v, n, kv_heads, value_dim, with_bias ? v_bias.data() : nullptr, nullptr, nullptr,
                           positions);
        const auto dq = upload(q), dk = upload(k), dv = upload(v), dqb = upload(q_bias), dkb = upload(k_bias),
                   dvb = upload(v_bias), dqn = upload(q_norm), dkn = upload(k_norm);
        cuda::AttentionHeads h;
        h.q = dq.as<float>();
        h.k = dk.as<float>();
        h.v = dv.as<float>();
        if (with_bias) {
          h.q_bias = dqb.as<float>();
          h.k_bias = dkb.as<float>();
          h.v_bias = dvb.as<float>();
        }
        h.q_norm = dqn.as<float>();
        h.k_norm = dkn.as<float>();
        h.eps = 1e-6f;
        h.heads = heads;
        h.kv_heads = kv_heads;
        h.head_dim = head_dim;
        h.value_dim = value_dim;
        h.key_row = row_heads * head_dim;
        h.value_row = row_heads * value_dim;
        const cuda::RopeShape shape = engine::gpu_rope_shape(params, nullptr);
        const size_t cache_values = static_cast<size_t>((positions.back() + 1) * row_heads * head_dim);
        const std::vector<uint16_t> empty(cache_values, 0);
        const cuda::DeviceBuffer caches[4] = {upload(empty), upload(empty), upload(empty), upload(empty)};
        h.cache.count = 2;
        h.cache.first_row[1] = 1;
        h.cache.first_row[2] = static_cast<int>(n);
        for (int i = 0; i < 2; ++i) {
          h.cache.keys[i] = caches[2 * i].as<uint16_t>();
          h.cache.values[i] = caches[2 * i + 1].as<uint16_t>();
        }
        cuda::position_heads(h, n, dpos.as<int32_t>(), shape, stream.handle());
        for (const auto& [buffer, first_cache, width, row, name] :
             {std::tuple{&dk, 0, kv_width, h.key_row, "k"}, std::tuple{&dv, 1, v_width, h.value_row, "v"}}) {
          const auto rows = download<float>(*buffer, static_cast<size_t>(n * width), stream);
          std::vector<uint16_t> want_caches[2] = {empty, empty};
          for (int64_t r = 0; r < n; ++r) {
            for (int64_t j = 0; j < width; ++j) {
              want_caches[r == 0 ? 0 : 1][positions[r] * row + j] = quant::fp32_to_fp16(rows[r * width + j]);
            }
          }
          for (int i = 0; i < 2; ++i) {
            CHECK(download<uint16_t>(caches[2 * i + first_cache], cache_values, stream) == want_caches[i])
                << name << " cache of sequence " << i << ", head_dim " << head_dim << " value_dim " << value_dim
                << " bias " << with_bias;
          }
        }
        for (const auto& [buffer, want, name] :
             {std::tuple{&dq, &want_q, "q"}, std::tuple{&dk, &want_k, "k"}, std::tuple{&dv, &want_v, "v"}}) {
          const auto got = download<float>(*buffer, want->size(), stream);
          // Rotated values may differ in their last bit (the H200 measured up to 4.6 % of them for
          // the normal style's partial rotation, at most 1.3e-7 relative); a wrong angle, norm or
          // bias moves them by far more than 1e-6.
          CHECK(mismatches(got, *want) <= want->size() / 10 && relative_error(got, *want) < 1e-6)
              << name << " head_dim " << head_dim << " bias " << with_bias << " neox " << neox << ": "
              << mismatches(got, *want) << " of " << want->size() << " differ, relative error "
              << relative_error(got, *want);
        }
      }
    }
  }
}

// Also MiMo's shapes: value heads narrower than the keys, and a layer of fewer KV heads than the
// cache's rows hold (the rows sized for the model's most).
TEST(cuda_exact_attention_matches_cpu) {
  if (!device_ready("cuda_exact_attention_matches_cpu")) return;
  std::mt19937 rng(9);
  const cuda::Stream stream;
  cpu::ThreadPool pool(2);
  struct Case {
    int64_t heads, kv_heads, head_dim, first, n;
    int64_t window = 0;        // gpt-oss's sliding window
    bool sinks = false;        // and its sinks
    int64_t value_dim = 0;     // MiMo's narrower value heads (0: head_dim)
    int64_t row_kv_heads = 0;  // the KV heads the cache's rows hold (0: kv_heads)
  };
  for (const Case& c :
       {Case{4, 2, 64, 3, 5}, Case{8, 2, 128, 0, 17}, Case{4, 4, 256, 40, 2}, Case{2, 1, 64, 2100, 2},
        Case{8, 2, 64, 100, 40, 32, true}, Case{4, 2, 64, 0, 20, 8, false}, Case{4, 1, 128, 3000, 3, 128, true},
        Case{4, 2, 64, 10, 6, 0, true}, Case{2, 1, 64, 2100, 2, 0, true}, Case{4, 1, 128, 0, 9, 0, false, 64, 2},
        Case{4, 2, 128, 60, 7, 32, true, 64}, Case{8, 4, 192, 300, 3, 128, true, 128, 8}}) {
    const int64_t value_dim = c.value_dim > 0 ? c.value_dim : c.head_dim;
    const int64_t row_heads = c.row_kv_heads > 0 ? c.row_kv_heads : c.kv_heads;
    const int64_t key_row = row_heads * c.head_dim, value_row = row_heads * value_dim;
    const int64_t q_width = c.heads * c.head_dim, out_width = c.heads * value_dim;
    const int64_t length = c.first + c.n;
    std::vector<uint16_t> keys(static_cast<size_t>(length * key_row)), values(static_cast<size_t>(length * value_row));
    // Scores of a few units, as the sharp attention of the fixtures gives.
    for (auto& k : keys) k = quant::fp32_to_fp16(std::uniform_real_distribution<float>(-1.5f, 1.5f)(rng));
    for (auto& v : values) v = quant::fp32_to_fp16(std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng));
    const auto q = random_floats(static_cast<size_t>(c.n * q_width), 1.5f, rng);
    const auto sinks = random_floats(static_cast<size_t>(c.heads), 2.0f, rng);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    std::vector<float> want(static_cast<size_t>(c.n * out_width));
    cpu::AttentionShape cpu_shape{c.heads, c.kv_heads, c.head_dim, value_dim, scale, key_row, value_row};
    cpu_shape.window = c.window;
    cpu_shape.sinks = c.sinks ? sinks.data() : nullptr;
    cpu::causal_attention(q.data(), c.n, c.first, keys.data(), values.data(), cpu_shape, want.data(), pool);
    std::vector<int32_t> positions(static_cast<size_t>(c.n));
    for (int64_t i = 0; i < c.n; ++i) positions[i] = static_cast<int32_t>(c.first + i);
    const auto dq = upload(q), dk = upload(keys), dv = upload(values), dpos = upload(positions), dsinks = upload(sinks);
    cuda::DeviceBuffer out(want.size() * sizeof(float), "out");
    cuda::AttentionShape shape{c.heads, c.kv_heads, c.head_dim, scale, length};
    shape.window = c.window;
    shape.sinks = c.sinks ? dsinks.as<float>() : nullptr;
    shape.value_dim = value_dim;
    shape.key_row = key_row;
    shape.value_row = value_row;
    // The dispatcher takes the exact kernel for narrower values too.
    cuda::DeviceBuffer scratch(std::max<size_t>(cuda::attention_scratch_bytes(shape, c.n), 1), "scratch");
    const auto attend = [&](bool dispatched) {
      if (dispatched) {
        cuda::causal_attention(dq.as<float>(), c.n, dpos.as<int32_t>(), dk.as<uint16_t>(), dv.as<uint16_t>(), shape,
                               scratch.data(), out.as<float>(), stream.handle());
      } else {
        cuda::exact_causal_attention(dq.as<float>(), c.n, dpos.as<int32_t>(), dk.as<uint16_t>(), dv.as<uint16_t>(),
                                     shape, out.as<float>(), stream.handle());
      }
      return download<float>(out, want.size(), stream);
    };
    // The CPU sums its dots and outputs in ggml's SIMD order, the kernel in sequence: most values
    // part in their last bits (a probability's f16 rounding can move with them), on the H200 by
    // at most 6e-6 relative without a window or sinks, 5.6e-5 with a window of 32 and sinks (a
    // few large weights, outputs shrunk by the sink); a wrong score, mask, window edge, sink or
    // cache row moves them by 1e-2 and more.
    for (const bool dispatched : {false, true}) {
      if (dispatched && value_dim == c.head_dim) continue;
      const auto got = attend(dispatched);
      CHECK(relative_error(got, want) < 1e-4)
          << "heads " << c.heads << " head_dim " << c.head_dim << " value_dim " << value_dim << " row heads "
          << row_heads << " length " << length << " window " << c.window << " sinks " << c.sinks << ": "
          << mismatches(got, want) << " of " << want.size() << " differ, relative error " << relative_error(got, want);
    }
  }
}

namespace {

// Whether the groups hold every routed slot of a GPU-resident expert once, in a chunk naming its
// slot, in chunks of 1 to `per_chunk` slots, and no slot of a host expert (table entry -1).
bool groups_consistent(const cuda::DeviceBuffer& order, const cuda::DeviceBuffer& chunks,
                       const cuda::DeviceBuffer& chunk_count, int64_t n, int64_t used, int64_t max_chunks,
                       int per_chunk, const std::vector<int32_t>& chosen, const std::vector<int32_t>& table,
                       const cuda::Stream& stream) {
  const auto got_order = download<int32_t>(order, static_cast<size_t>(n * used), stream);
  const auto got_chunks = download<int32_t>(chunks, static_cast<size_t>(3 * max_chunks), stream);
  const int count = download<int32_t>(chunk_count, 1, stream)[0];
  std::vector<int> seen(static_cast<size_t>(n * used), 0);
  bool consistent = count <= max_chunks;
  for (int c = 0; c < count && consistent; ++c) {
    const int slot = got_chunks[3 * c], first = got_chunks[3 * c + 1], size = got_chunks[3 * c + 2];
    consistent = size >= 1 && size <= per_chunk && first >= 0 && first + size <= n * used;
    for (int i = first; i < first + size && consistent; ++i) {
      consistent = table[chosen[got_order[i]]] == slot;
      ++seen[got_order[i]];
    }
  }
  for (size_t i = 0; i < seen.size(); ++i) consistent = consistent && seen[i] == (table[chosen[i]] >= 0);
  return consistent;
}

}  // namespace

TEST(cuda_moe_routing_matches_cpu) {
  if (!device_ready("cuda_moe_routing_matches_cpu")) return;
  std::mt19937 rng(21);
  const cuda::Stream stream;
  // Qwen3's softmax (normalized or not), DeepSeek-V3's router: sigmoid, a selection bias, 8
  // groups of which 4 compete, normalized and scaled weights; gpt-oss's: biased logits choose, a
  // softmax over the chosen weights them; DeepSeek-V4's: the square root of softplus with a
  // selection bias, and in its first layers each token's experts from a table (hash routing).
  const cpu::RouterParams deepseek{
      .gating = cpu::Gating::kSigmoid, .normalize = true, .scale = 2.5f, .groups = 8, .groups_used = 4};
  const cpu::RouterParams deepseek4{.gating = cpu::Gating::kSqrtSoftplus, .normalize = true, .scale = 1.5f};
  const auto gpu_gating = [](cpu::Gating g) {
    switch (g) {
      case cpu::Gating::kSoftmax:
        break;
      case cpu::Gating::kSigmoid:
        return cuda::RouterSpec::Gating::kSigmoid;
      case cpu::Gating::kSoftmaxSelected:
        return cuda::RouterSpec::Gating::kSoftmaxSelected;
      case cpu::Gating::kSqrtSoftplus:
        return cuda::RouterSpec::Gating::kSqrtSoftplus;
    }
    return cuda::RouterSpec::Gating::kSoftmax;
  };
  for (const auto& [experts, used, router, hashed] :
       {std::tuple{int64_t{8}, int64_t{2}, cpu::RouterParams{.normalize = true}, false},
        std::tuple{int64_t{128}, int64_t{8}, cpu::RouterParams{.normalize = true}, false},
        std::tuple{int64_t{60}, int64_t{4}, cpu::RouterParams{}, false},
        std::tuple{int64_t{256}, int64_t{8}, deepseek, false},
        std::tuple{int64_t{128}, int64_t{4}, cpu::RouterParams{.gating = cpu::Gating::kSoftmaxSelected}, false},
        std::tuple{int64_t{256}, int64_t{6}, deepseek4, false},
        std::tuple{int64_t{256}, int64_t{6}, deepseek4, true}}) {
    const int64_t n = 11, width = 96, vocab = 17;
    const auto logits = random_floats(static_cast<size_t>(n * experts), 4.0f, rng);
    const auto bias = random_floats(static_cast<size_t>(experts), 0.5f, rng);
    const bool biased = router.gating == cpu::Gating::kSigmoid || router.gating == cpu::Gating::kSqrtSoftplus;
    const float* selection_bias = biased ? bias.data() : nullptr;
    // Hash routing: a table of `used` distinct experts per token id, and each row's token.
    std::vector<int32_t> token_experts, tokens, table_choice;
    if (hashed) {
      for (int64_t t = 0; t < vocab; ++t) {
        std::vector<int32_t> all(static_cast<size_t>(experts));
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng);
        token_experts.insert(token_experts.end(), all.begin(), all.begin() + used);
      }
      for (int64_t i = 0; i < n; ++i) {
        tokens.push_back(static_cast<int32_t>(rng() % vocab));
        table_choice.insert(table_choice.end(), token_experts.begin() + tokens.back() * used,
                            token_experts.begin() + (tokens.back() + 1) * used);
      }
    }
    // gpt-oss's router bias joins the logits (forward.cc adds it before cpu::route; the GPU in the route).
    const bool gpt_oss = router.gating == cpu::Gating::kSoftmaxSelected;
    std::vector<float> routed = logits;
    if (gpt_oss) {
      for (size_t i = 0; i < routed.size(); ++i) routed[i] += bias[i % static_cast<size_t>(experts)];
    }
    cpu::Routing routing;
    cpu::route(routed.data(), n, experts, used, router, selection_bias, routing,
               hashed ? table_choice.data() : nullptr);
    const auto dl = upload(logits), dbias = upload(bias), dtable = upload(token_experts), dtokens = upload(tokens);
    cuda::RouterSpec spec{gpu_gating(router.gating),
                          router.normalize,
                          router.scale,
                          static_cast<int>(router.groups),
                          static_cast<int>(router.groups_used),
                          selection_bias ? dbias.as<float>() : nullptr,
                          gpt_oss ? dbias.as<float>() : nullptr};
    if (hashed) {
      spec.token_experts = dtable.as<int32_t>();
      spec.tokens = dtokens.as<int32_t>();
    }
    cuda::DeviceBuffer chosen(static_cast<size_t>(n * used) * sizeof(int32_t), "chosen");
    cuda::DeviceBuffer weights(static_cast<size_t>(n * used) * sizeof(float), "weights");
    cuda::route_top_k(dl.as<float>(), n, experts, used, spec, chosen.as<int32_t>(), weights.as<float>(),
                      stream.handle());
    const auto got_chosen = download<int32_t>(chosen, static_cast<size_t>(n * used), stream);
    const auto got_weights = download<float>(weights, static_cast<size_t>(n * used), stream);
    CHECK(got_chosen == routing.experts) << experts << " experts" << (hashed ? ", hash-routed" : "")
                                         << ": chosen experts differ";
    CHECK(mismatches(got_weights, routing.weights) == 0)
        << experts << " experts" << (hashed ? ", hash-routed" : "") << ": " << mismatches(got_weights, routing.weights)
        << " weights differ, relative error " << relative_error(got_weights, routing.weights);

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
      const DeviceGroups grouping(n, experts, used, per_chunk);
      grouping.group(chosen.as<int32_t>(), n, experts, used, slots.as<int32_t>(), stream);
      const bool consistent = groups_consistent(grouping.order, grouping.chunks, grouping.chunk_count, n, used,
                                                max_chunks, per_chunk, routing.experts, table, stream);
      CHECK(consistent) << experts << " experts, " << what << ": the grouping misses, repeats or misfiles a slot";

      const auto de = upload(expert_out), dr = upload(residual);
      cuda::combine_experts(de.as<float>(), weights.as<float>(), chosen.as<int32_t>(), slots.as<int32_t>(), n, used,
                            width, dr.as<float>(), stream.handle());
      const auto got = download<float>(dr, residual.size(), stream);
      auto want = residual;
      add_expert_sum(expert_out, routing, table, n, width, want);
      CHECK(mismatches(got, want) == 0) << experts << " experts, " << what << ": combined rows differ in "
                                        << mismatches(got, want);
    }
  }
}

// route_and_group: a single row (a decode step: top-k and groups in one launch) and a batch,
// with every expert on the GPU and with a third of them on the host; the routing counters it
// adds to start from a value of their own per expert.
TEST(cuda_route_and_group_matches_cpu) {
  if (!device_ready("cuda_route_and_group_matches_cpu")) return;
  std::mt19937 rng(23);
  const cuda::Stream stream;
  const int64_t experts = 128, used = 8;
  for (const int64_t n : {1, 11}) {
    const auto logits = random_floats(static_cast<size_t>(n * experts), 4.0f, rng);
    cpu::Routing routing;
    cpu::route(logits.data(), n, experts, used, {.normalize = true}, nullptr, routing);
    std::vector<int32_t> identity(static_cast<size_t>(experts)), split(static_cast<size_t>(experts), -1);
    std::iota(identity.begin(), identity.end(), 0);
    for (int64_t e = 0, slot = 0; e < experts; ++e) {
      if (e % 3 != 1) split[e] = static_cast<int32_t>(slot++);
    }
    for (const auto& table : {identity, split}) {
      const auto dl = upload(logits), slots = upload(table);
      std::vector<uint32_t> counts(static_cast<size_t>(experts));
      for (int64_t e = 0; e < experts; ++e) counts[e] = static_cast<uint32_t>(1000 * e);
      const auto device_counts = upload(counts);
      for (const int32_t e : routing.experts) ++counts[e];
      cuda::DeviceBuffer chosen(static_cast<size_t>(n * used) * sizeof(int32_t), "chosen");
      cuda::DeviceBuffer weights(static_cast<size_t>(n * used) * sizeof(float), "weights");
      const DeviceGroups grouping(n, experts, used, cuda::tokens_per_expert_chunk(n));
      cuda::route_and_group(dl.as<float>(), n, experts, used, {.normalize = true}, slots.as<int32_t>(),
                            cuda::tokens_per_expert_chunk(n), chosen.as<int32_t>(), weights.as<float>(),
                            device_counts.as<uint32_t>(), grouping.order.as<int32_t>(), grouping.chunks.as<int32_t>(),
                            grouping.chunk_count.as<int32_t>(), stream.handle());
      const auto got_chosen = download<int32_t>(chosen, static_cast<size_t>(n * used), stream);
      CHECK(download<uint32_t>(device_counts, counts.size(), stream) == counts)
          << "n " << n << ": the routing counters did not gain each choice once";
      const auto got_weights = download<float>(weights, static_cast<size_t>(n * used), stream);
      const char* what = table == identity ? "all on the GPU" : "a third on the host";
      CHECK(got_chosen == routing.experts) << "n " << n << ", " << what << ": chosen experts differ";
      CHECK(mismatches(got_weights, routing.weights) == 0) << "n " << n << ", " << what << ": weights differ";
      CHECK(groups_consistent(grouping.order, grouping.chunks, grouping.chunk_count, n, used,
                              grouping.groups.max_chunks, cuda::tokens_per_expert_chunk(n), routing.experts, table,
                              stream))
          << "n " << n << ", " << what << ": the grouping misses, repeats or misfiles a slot";
    }
  }
}

// route_decode (a decode step's router product and routing in one launch, the last block
// routing and grouping) against the router's matvec then route_and_group: the same logits,
// choices, weights and counts, bit for bit, for 1, 3 and 8 rows, F32 and F16 routers and experts
// split between GPU and host; a single row's groups the same too (in k order), several rows'
// each slot once in its expert's chunk (their order within an expert is free). Launched again
// on the same ticket, the same once more (the launch leaves it zero).
TEST(cuda_route_decode_equals_matvec_then_route_and_group) {
  if (!device_ready("cuda_route_decode_equals_matvec_then_route_and_group")) return;
  std::mt19937 rng(41);
  const cuda::Stream stream;
  const int64_t experts = 128, used = 8, cols = 2048;
  std::vector<int32_t> split(static_cast<size_t>(experts), -1);
  for (int64_t e = 0, slot = 0; e < experts; ++e) {
    if (e % 3 != 1) split[e] = static_cast<int32_t>(slot++);
  }
  const auto slots = upload(split);
  for (const uint32_t type : {0u, 1u}) {
    const auto w = random_matrix(type, experts, cols, rng);
    const auto dw = upload(w);
    const cuda::DeviceMatrix router = device_matrix(type, dw, experts, cols);
    for (const int64_t n : {int64_t{1}, int64_t{3}, cuda::kMaxRouteDecodeRows}) {
      const auto x = upload(random_floats(static_cast<size_t>(n * cols), 2.0f, rng));
      const int per_chunk = cuda::tokens_per_expert_chunk(n);
      const auto run = [&](bool fused, const cuda::DeviceBuffer& ticket) {
        cuda::DeviceBuffer logits(static_cast<size_t>(n * experts) * sizeof(float), "logits");
        cuda::DeviceBuffer chosen(static_cast<size_t>(n * used) * sizeof(int32_t), "chosen");
        cuda::DeviceBuffer weights(static_cast<size_t>(n * used) * sizeof(float), "weights");
        const auto counts = upload(std::vector<uint32_t>(static_cast<size_t>(experts), 7u));
        const DeviceGroups grouping(n, experts, used, per_chunk);
        if (fused) {
          cuda::route_decode(router, x.as<float>(), n, experts, used, {.normalize = true}, slots.as<int32_t>(),
                             per_chunk, logits.as<float>(), chosen.as<int32_t>(), weights.as<float>(),
                             counts.as<uint32_t>(), grouping.order.as<int32_t>(), grouping.chunks.as<int32_t>(),
                             grouping.chunk_count.as<int32_t>(), ticket.as<uint32_t>(), stream.handle());
        } else {
          cuda::matvec(router, {x.as<float>(), nullptr}, n, logits.as<float>(), false, stream.handle());
          cuda::route_and_group(logits.as<float>(), n, experts, used, {.normalize = true}, slots.as<int32_t>(),
                                per_chunk, chosen.as<int32_t>(), weights.as<float>(), counts.as<uint32_t>(),
                                grouping.order.as<int32_t>(), grouping.chunks.as<int32_t>(),
                                grouping.chunk_count.as<int32_t>(), stream.handle());
        }
        const auto got_chosen = download<int32_t>(chosen, static_cast<size_t>(n * used), stream);
        const int count = download<int32_t>(grouping.chunk_count, 1, stream)[0];
        const bool consistent = groups_consistent(grouping.order, grouping.chunks, grouping.chunk_count, n, used,
                                                  grouping.groups.max_chunks, per_chunk, got_chosen, split, stream);
        return std::tuple{download<float>(logits, static_cast<size_t>(n * experts), stream),
                          got_chosen,
                          download<float>(weights, static_cast<size_t>(n * used), stream),
                          download<uint32_t>(counts, static_cast<size_t>(experts), stream),
                          download<int32_t>(grouping.chunks, static_cast<size_t>(3 * count), stream),
                          download<int32_t>(grouping.order, static_cast<size_t>(n * used), stream),
                          consistent};
      };
      const auto ticket = upload(std::vector<uint32_t>{0u});
      const auto want = run(false, ticket);
      for (int launch = 0; launch < 2; ++launch) {
        const auto got = run(true, ticket);
        const std::string what = "type " + std::to_string(type) + ", " + std::to_string(n) + " rows";
        CHECK(mismatches(std::get<0>(got), std::get<0>(want)) == 0) << what << ": logits differ";
        CHECK(std::get<1>(got) == std::get<1>(want)) << what << ": chosen experts differ";
        CHECK(mismatches(std::get<2>(got), std::get<2>(want)) == 0) << what << ": weights differ";
        CHECK(std::get<3>(got) == std::get<3>(want)) << what << ": routing counts differ";
        CHECK(std::get<6>(got)) << what << ": the grouping misses, repeats or misfiles a slot";
        if (n == 1) {
          const size_t chunks = std::get<4>(want).size() / 3;
          CHECK(std::get<4>(got) == std::get<4>(want) &&
                std::vector(std::get<5>(got).begin(), std::get<5>(got).begin() + chunks) ==
                    std::vector(std::get<5>(want).begin(), std::get<5>(want).begin() + chunks))
              << what << ": groups differ";
        } else {
          CHECK(std::get<4>(got).size() == std::get<4>(want).size()) << what << ": chunk counts differ";
        }
        CHECK(download<uint32_t>(ticket, 1, stream)[0] == 0u) << what << ": the ticket is left nonzero";
      }
    }
  }
}

#else

TEST(cuda_ops_skipped) { std::printf("skip cuda_ops tests: this build has no CUDA\n"); }

#endif
