// The CPU ops against plain reference math: the thread pool covers every task once, matmul
// over quantized weights matches dequantize-then-dot, RoPE rotates by the right angles in
// both layouts, MoE routing picks and normalizes the top-k, and the grouped MoE matches
// running each row's experts one by one, and the gated delta rule's SIMD step rounds as its
// one-element-at-a-time form.
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/causal_conv.h"
#include "cpu/cpu_dispatch.h"
#include "cpu/delta_rule.h"
#include "cpu/matmul.h"
#include "cpu/moe.h"
#include "cpu/rope.h"
#include "cpu/softmax.h"
#include "cpu/swiglu.h"
#include "cpu/thread_pool.h"
#include "quant/ggml_types.h"
#include "tests/check.h"

using namespace bloomery;
using namespace bloomery::cpu;

namespace {

constexpr uint32_t kF32 = 0;

std::vector<float> random_floats(size_t n, std::mt19937& rng, float amplitude = 1.0f) {
  std::uniform_real_distribution<float> dist(-amplitude, amplitude);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

WeightMatrix f32_matrix(const std::vector<float>& values, int64_t cols, int64_t rows) {
  return {&host_quant_kernels(kF32), reinterpret_cast<const uint8_t*>(values.data()), cols, rows,
          static_cast<size_t>(cols) * sizeof(float)};
}

float dot(const float* a, const float* b, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(a[i]) * b[i];
  return static_cast<float>(sum);
}

}  // namespace

TEST(cpu_thread_pool_runs_every_task_once) {
  ThreadPool pool(4);
  for (const size_t tasks : {size_t{1}, size_t{7}, size_t{1000}}) {
    std::vector<std::atomic<int>> seen(tasks);
    pool.parallel_for(tasks, 3, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) seen[i].fetch_add(1);
    });
    for (size_t i = 0; i < tasks; ++i) CHECK(seen[i].load() == 1) << "task " << i << " of " << tasks;
  }
}

TEST(cpu_matmul_matches_dequantized_dot) {
  std::mt19937 rng(7);
  ThreadPool pool(3);
  const int64_t cols = 256, rows = 40, n = 5;
  const std::vector<float> weights = random_floats(static_cast<size_t>(cols * rows), rng);
  const std::vector<float> x = random_floats(static_cast<size_t>(cols * n), rng);
  const WeightMatrix w = f32_matrix(weights, cols, rows);
  std::vector<float> y(static_cast<size_t>(rows * n));
  MatmulInput input;
  input.reset(x.data(), n, cols);
  matmul(w, input, y.data(), pool);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t o = 0; o < rows; ++o) {
      const float expected = dot(weights.data() + o * cols, x.data() + i * cols, cols);
      CHECK(std::fabs(y[i * rows + o] - expected) < 1e-4f) << "row " << i << " out " << o;
    }
  }
}

TEST(cpu_rope_rotates_pairs_by_position_angles) {
  const int64_t dims = 8;
  for (const RopeStyle style : {RopeStyle::kNormal, RopeStyle::kNeox}) {
    RopeParams params{style, dims, 10000.0f, 1.0f, nullptr};
    std::vector<float> angles;
    rope_angles(params, 3, angles);
    std::vector<float> x(10);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i + 1);
    std::vector<float> y = x;
    rope_apply(y.data(), 1, 10, params, angles);
    for (int64_t pair = 0; pair < dims / 2; ++pair) {
      const double theta = 3.0 * std::pow(10000.0, -2.0 * pair / dims);
      const int64_t a = style == RopeStyle::kNeox ? pair : 2 * pair;
      const int64_t b = style == RopeStyle::kNeox ? pair + dims / 2 : 2 * pair + 1;
      CHECK(std::fabs(y[a] - (x[a] * std::cos(theta) - x[b] * std::sin(theta))) < 1e-4) << "pair " << pair;
      CHECK(std::fabs(y[b] - (x[a] * std::sin(theta) + x[b] * std::cos(theta))) < 1e-4) << "pair " << pair;
    }
    CHECK(y[8] == x[8] && y[9] == x[9]) << "elements past rope dims pass through";
  }
}

TEST(cpu_route_top_k_picks_and_normalizes) {
  const float logits[] = {0.1f, 2.0f, -1.0f, 1.5f};
  Routing routing;
  route(logits, 1, 4, 2, {.normalize = true}, nullptr, routing);
  CHECK(routing.experts[0] == 1 && routing.experts[1] == 3);
  CHECK(std::fabs(routing.weights[0] + routing.weights[1] - 1.0f) < 1e-6f);
  CHECK(std::fabs(routing.weights[0] / routing.weights[1] - std::exp(0.5f)) < 1e-5f);
  route(logits, 1, 4, 2, {}, nullptr, routing);
  CHECK(routing.weights[0] + routing.weights[1] < 0.99f) << "unnormalized weights keep the softmax's mass";
}

// DeepSeek-V3's router: sigmoid weights, a bias that only chooses, the best groups by their two
// best members, then the top k weighted by their unbiased sigmoids, normalized and scaled.
TEST(cpu_route_sigmoid_with_bias_groups_and_scale) {
  // 8 experts in 4 groups of 2. Biased selection values decide; group 0's top pair sums to
  // the most, group 3's next; expert 2 has the highest single value but its group ranks third.
  const float logits[] = {1.0f, 0.5f, 2.0f, -3.0f, -1.0f, -2.0f, 0.2f, 0.1f};
  const float bias[] = {0.0f, 0.3f, 0.0f, 0.0f, 0.0f, 0.0f, 0.6f, 0.1f};
  const RouterParams router{
      .gating = Gating::kSigmoid, .normalize = true, .scale = 2.5f, .groups = 4, .groups_used = 2};
  Routing routing;
  route(logits, 1, 8, 3, router, bias, routing);
  const auto sigmoid = [](float x) { return 1.0f / (1.0f + std::exp(-x)); };
  // Selection: 0.731, 0.922 | 0.881, 0.047 | 0.269, 0.119 | 1.150, 0.625. Groups 0 (1.653) and
  // 3 (1.775) compete; their best three are 6, 1 and 0.
  CHECK(routing.experts[0] == 6 && routing.experts[1] == 1 && routing.experts[2] == 0)
      << routing.experts[0] << " " << routing.experts[1] << " " << routing.experts[2];
  const double sum = double(sigmoid(0.2f)) + sigmoid(0.5f) + sigmoid(1.0f);
  for (int k = 0; k < 3; ++k) {
    const float want = sigmoid(logits[routing.experts[k]]) / static_cast<float>(sum) * 2.5f;
    CHECK(std::fabs(routing.weights[k] - want) < 1e-6f) << k << ": " << routing.weights[k] << " vs " << want;
  }
  route(logits, 1, 8, 3, {.gating = Gating::kSigmoid}, bias, routing);
  CHECK(routing.experts[0] == 6 && routing.experts[1] == 1 && routing.experts[2] == 2) << "no groups: 2 competes";
  CHECK(routing.weights[2] == sigmoid(2.0f)) << "the weight is the unbiased sigmoid";
}

TEST(cpu_grouped_moe_matches_rows_one_by_one) {
  std::mt19937 rng(11);
  ThreadPool pool(3);
  const int64_t width = 64, hidden = 48, experts = 5, used = 2, n = 6;
  const auto gate_w = random_floats(static_cast<size_t>(width * hidden * experts), rng);
  const auto up_w = random_floats(static_cast<size_t>(width * hidden * experts), rng);
  const auto down_w = random_floats(static_cast<size_t>(hidden * width * experts), rng);
  const ExpertMatrices gate{f32_matrix(gate_w, width, hidden), experts};
  const ExpertMatrices up{f32_matrix(up_w, width, hidden), experts};
  const ExpertMatrices down{f32_matrix(down_w, hidden, width), experts};
  const auto x = random_floats(static_cast<size_t>(width * n), rng);
  const auto router_logits = random_floats(static_cast<size_t>(experts * n), rng, 3.0f);
  Routing routing;
  route(router_logits.data(), n, experts, used, {.normalize = true}, nullptr, routing);
  std::vector<float> out(static_cast<size_t>(width * n));
  MoeScratch scratch;
  moe_swiglu(x.data(), n, routing, gate, up, down, {}, {}, out.data(), scratch, pool);

  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> expected(static_cast<size_t>(width), 0.0f);
    for (int64_t k = 0; k < used; ++k) {
      const int32_t e = routing.experts[i * used + k];
      std::vector<float> g(hidden), u(hidden), h(hidden);
      for (int64_t o = 0; o < hidden; ++o) {
        g[o] = dot(gate_w.data() + (e * hidden + o) * width, x.data() + i * width, width);
        u[o] = dot(up_w.data() + (e * hidden + o) * width, x.data() + i * width, width);
      }
      swiglu(g.data(), u.data(), hidden, h.data());
      for (int64_t o = 0; o < width; ++o) {
        expected[o] += routing.weights[i * used + k] * dot(down_w.data() + (e * width + o) * hidden, h.data(), hidden);
      }
    }
    for (int64_t o = 0; o < width; ++o) {
      CHECK(std::fabs(out[i * width + o] - expected[o]) < 1e-3f * (1.0f + std::fabs(expected[o])))
          << "row " << i << " out " << o << ": " << out[i * width + o] << " vs " << expected[o];
    }
  }
}

// A hybrid pass splits the experts between the GPU and the CPU: the two halves' sums must add
// up to the all-experts sum, and rows whose experts all run elsewhere get zeros.
TEST(cpu_moe_expert_subset_and_its_complement_add_up) {
  std::mt19937 rng(12);
  ThreadPool pool(3);
  const int64_t width = 64, hidden = 48, experts = 6, used = 2, n = 7;
  const auto gate_w = random_floats(static_cast<size_t>(width * hidden * experts), rng);
  const auto up_w = random_floats(static_cast<size_t>(width * hidden * experts), rng);
  const auto down_w = random_floats(static_cast<size_t>(hidden * width * experts), rng);
  const ExpertMatrices gate{f32_matrix(gate_w, width, hidden), experts};
  const ExpertMatrices up{f32_matrix(up_w, width, hidden), experts};
  const ExpertMatrices down{f32_matrix(down_w, hidden, width), experts};
  const auto x = random_floats(static_cast<size_t>(width * n), rng);
  const auto router_logits = random_floats(static_cast<size_t>(experts * n), rng, 3.0f);
  Routing routing;
  route(router_logits.data(), n, experts, used, {.normalize = true}, nullptr, routing);
  routing.experts[0] = 0;  // row 0 uses only even experts: the odd half gives it zeros
  routing.experts[1] = 2;
  const std::vector<uint8_t> even{1, 0, 1, 0, 1, 0}, odd{0, 1, 0, 1, 0, 1};
  std::vector<float> all(static_cast<size_t>(width * n)), a(all.size(), 7.0f), b(all.size(), 7.0f);
  MoeScratch scratch;
  moe_swiglu(x.data(), n, routing, gate, up, down, {}, {}, all.data(), scratch, pool);
  moe_swiglu(x.data(), n, routing, gate, up, down, {}, {}, a.data(), scratch, pool, even);
  moe_swiglu(x.data(), n, routing, gate, up, down, {}, {}, b.data(), scratch, pool, odd);
  for (int64_t o = 0; o < width; ++o) CHECK(b[o] == 0.0f) << "row 0 has no odd expert, out " << o;
  for (size_t i = 0; i < all.size(); ++i) {
    CHECK(std::fabs(a[i] + b[i] - all[i]) < 1e-4f * (1.0f + std::fabs(all[i])))
        << "element " << i << ": " << a[i] << " + " << b[i] << " vs " << all[i];
  }
}

// A sink takes its share of the row: the weights sum to 1 - e^(sink - max) / sum, as
// ggml_soft_max_ext with sinks gives.
TEST(cpu_softmax_sink_takes_its_share) {
  std::vector<float> x{0.5f, -1.0f, 2.0f, 0.25f, 1.5f};
  const float sink = 1.0f;
  std::vector<float> got = x;
  softmax(got.data(), static_cast<int64_t>(got.size()), SoftmaxTail::kPadded, &sink);
  double sum = 0.0, total = std::exp(static_cast<double>(sink) - 2.0);
  for (const float v : x) total += std::exp(static_cast<double>(v) - 2.0);
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]) - 2.0) / total;
    CHECK(std::fabs(got[i] - want) <= 1e-6 * want) << i << ": " << got[i] << " vs " << want;
    sum += got[i];
  }
  CHECK(std::fabs(sum - (1.0 - std::exp(static_cast<double>(sink) - 2.0) / total)) < 1e-6) << sum;
}

// The token step of this host's tier (vectors of the state's rows) against its scalar form (one
// element at a time, the host's float dot a row): the same floats, bit for bit, over several
// tokens, for head sizes with and without a partial last vector.
TEST(cpu_delta_rule_token_step_of_the_tier_is_the_scalar_one) {
  const quant::SimdTier tier = host_simd_tier();
  if (tier < quant::SimdTier::kAvx2) return;
  const auto step = tier >= quant::SimdTier::kAvx512 ? delta_rule_token_avx512 : delta_rule_token_avx2;
  std::mt19937 rng(7);
  for (const int64_t dim : {int64_t{64}, int64_t{72}, int64_t{128}}) {
    std::vector<float> simd = random_floats(static_cast<size_t>(dim * dim), rng, 0.5f), scalar = simd;
    std::vector<float> out_simd(static_cast<size_t>(dim)), out_scalar(static_cast<size_t>(dim));
    std::vector<float> delta(static_cast<size_t>(dim));
    for (int t = 0; t < 5; ++t) {
      const std::vector<float> q = random_floats(static_cast<size_t>(dim), rng);
      const std::vector<float> k = random_floats(static_cast<size_t>(dim), rng);
      const std::vector<float> v = random_floats(static_cast<size_t>(dim), rng);
      const float decay = std::exp(-0.1f * static_cast<float>(t + 1)), beta = 0.3f + 0.1f * static_cast<float>(t);
      const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
      step(simd.data(), dim, {q.data(), k.data(), v.data(), decay, beta, scale, out_simd.data()}, delta.data());
      delta_rule_token_scalar(scalar.data(), dim, {q.data(), k.data(), v.data(), decay, beta, scale, out_scalar.data()},
                              delta.data());
      CHECK(out_simd == out_scalar) << "head of " << dim << ", token " << t;
      CHECK(simd == scalar) << "head of " << dim << ", token " << t;
    }
  }
}

// A token's output of channel c as ggml_ssm_conv's loop sums it where the ggml build fuses the
// products of the taps from `rounded` on (conv_token_*): the first rounded products each rounded to
// float and added in order, then the rest fused into the sum.
namespace {
float conv_reference(const std::vector<const float*>& inputs, const float* taps_by_tap, int64_t kernel,
                     int64_t channels, int64_t c, int64_t rounded) {
  float sum = 0.0f;
  for (int64_t k = 0; k < rounded; ++k) {
    volatile float product = inputs[k][c] * taps_by_tap[k * channels + c];  // kept out of a fused multiply-add
    sum += product;
  }
  for (int64_t k = rounded; k < kernel; ++k) sum = std::fma(inputs[k][c], taps_by_tap[k * channels + c], sum);
  return sum;
}
}  // namespace

// The causal convolution: each tier this host runs sums a token's taps as the ggml build of its tier
// does (the scalar and AVX-512 ones every product fused, as ggml's AVX-512 builds with fewer than 8
// taps; AVX2 the products of the first kernel & ~3 taps rounded, so none of Qwen3.5's 4 fused), and
// rows convolved in one call are those convolved a few at a time (the state carried between calls,
// calls shorter than the kernel included).
TEST(cpu_causal_conv_tiers_round_as_ggml_and_split_calls_agree) {
  const quant::SimdTier tier = host_simd_tier();
  std::mt19937 rng(8);
  using ConvToken = void (*)(const float* const*, const float*, int64_t, int64_t, float*);
  struct Tier {
    quant::SimdTier tier;
    ConvToken step;
    int64_t lanes;  // the taps of a vector of ggml's loop: the products of the first kernel & ~(lanes - 1) round
    std::vector<int64_t> kernels;
    const char* name;
  };
  const Tier tiers[] = {{quant::SimdTier::kScalar, conv_token_scalar, 0, {4, 13}, "scalar"},
                        {quant::SimdTier::kAvx2, conv_token_avx2, 4, {4, 5, 13}, "avx2"},
                        {quant::SimdTier::kAvx512, conv_token_avx512, 0, {4}, "avx512"}};
  for (const Tier& t : tiers) {
    if (t.tier > tier) continue;
    for (const int64_t kernel : t.kernels) {
      const int64_t rounded = t.lanes == 0 ? 0 : kernel & ~(t.lanes - 1);
      for (const int64_t channels : {int64_t{72}, int64_t{768}}) {
        const std::vector<float> taps = random_floats(static_cast<size_t>(channels * kernel), rng);
        std::vector<std::vector<float>> rows;
        std::vector<const float*> inputs;
        for (int64_t k = 0; k < kernel; ++k) {
          rows.push_back(random_floats(static_cast<size_t>(channels), rng));
          inputs.push_back(rows.back().data());
        }
        std::vector<float> out(static_cast<size_t>(channels));
        t.step(inputs.data(), taps.data(), kernel, channels, out.data());
        int64_t differ = 0;
        for (int64_t c = 0; c < channels; ++c) {
          const float reference = conv_reference(inputs, taps.data(), kernel, channels, c, rounded);
          if (std::memcmp(&out[c], &reference, sizeof(float)) != 0) ++differ;
        }
        CHECK(differ == 0) << t.name << ", kernel " << kernel << ", " << channels << " channels: " << differ
                           << " outputs differ";
      }
    }
  }
  const int64_t kernel = 4, held = kernel - 1;
  for (const int64_t channels : {int64_t{72}, int64_t{768}}) {
    const std::vector<float> taps = random_floats(static_cast<size_t>(channels * kernel), rng);
    const int64_t n = 11;
    const std::vector<float> x = random_floats(static_cast<size_t>(n * channels), rng);
    const std::vector<float> start = random_floats(static_cast<size_t>(channels * held), rng);
    std::vector<float> whole = x, state_whole = start;
    causal_conv_silu(whole.data(), n, channels, channels, kernel, taps.data(), state_whole.data());
    std::vector<float> split = x, state_split = start;
    for (const auto& [first, count] : {std::pair<int64_t, int64_t>{0, 2}, {2, 1}, {3, 5}, {8, 3}}) {
      causal_conv_silu(split.data() + first * channels, count, channels, channels, kernel, taps.data(),
                       state_split.data());
    }
    CHECK(split == whole) << channels << " channels";
    CHECK(state_split == state_whole) << channels << " channels";
  }
}
