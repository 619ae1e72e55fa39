// The GPU's Gated DeltaNet ops (cuda/delta_net.cu) against the CPU path on random inputs: the
// causal convolution with SiLU and the q and k heads' L2 norm, with the convolution states it
// moves on (decode rows, segments shorter than the state, prompts, several sequences a launch);
// the gated delta rule over the recurrent states (both key head mappings, decode and prompt
// rows, several sequences); the gates; Qwen3-Next's projection splits, the gated query's split,
// the sigmoid gates; and the rotation of Qwen3.5's interleaved multi-axis rope (RopeShape's
// sections) in position_heads.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/check.h"

#ifdef BLOOMERY_CUDA

#include "cpu/causal_conv.h"
#include "cpu/delta_rule.h"
#include "cpu/rms_norm.h"
#include "cpu/rope.h"
#include "cpu/thread_pool.h"
#include "cuda/ops.h"
#include "engine/gpu_rope.h"
#include "tests/cuda_test_util.h"

using namespace bloomery;
using namespace bloomery::tests::gpu;

namespace {

// The segments of a launch: rows[s] rows each, one after another, each with its state in a device
// buffer of its own.
struct DeviceSegments {
  DeviceSegments(const std::vector<int>& rows, const std::vector<std::vector<float>>& states) {
    int first = 0;
    segments.count = static_cast<int>(rows.size());
    for (size_t s = 0; s < rows.size(); ++s) {
      buffers.push_back(upload(states[s]));
      segments.first_row[s] = first;
      segments.states[s] = buffers.back().as<float>();
      first += rows[s];
    }
    segments.first_row[rows.size()] = first;
  }
  std::vector<std::vector<float>> download_states(const std::vector<std::vector<float>>& like,
                                                  const cuda::Stream& stream) const {
    std::vector<std::vector<float>> out;
    for (size_t s = 0; s < buffers.size(); ++s) out.push_back(download<float>(buffers[s], like[s].size(), stream));
    return out;
  }
  std::vector<cuda::DeviceBuffer> buffers;
  cuda::RecurrentSegments segments;
};

int total_rows(const std::vector<int>& rows) {
  int n = 0;
  for (const int r : rows) n += r;
  return n;
}

std::vector<float> random_range(size_t count, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(count);
  for (auto& x : v) x = dist(rng);
  return v;
}

// A layer's state of one sequence (model::DeltaNetParams' layout): random held inputs, random rule states.
std::vector<float> random_state(const cuda::DeltaNetShape& shape, std::mt19937& rng) {
  auto state = random_floats(static_cast<size_t>(shape.conv_floats()), 2.0f, rng);
  const auto rule = random_floats(static_cast<size_t>(shape.v_heads * shape.head_dim * shape.head_dim), 0.5f, rng);
  state.insert(state.end(), rule.begin(), rule.end());
  return state;
}

// The largest distance in units in the last place between corresponding floats (of one sign).
int64_t max_ulps(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    int32_t x, y;
    std::memcpy(&x, &a[i], sizeof x);
    std::memcpy(&y, &b[i], sizeof y);
    if ((x < 0) != (y < 0)) {
      if (a[i] != b[i]) worst = INT64_MAX;  // +0 and -0 are equal
      continue;
    }
    worst = std::max(worst, std::abs(static_cast<int64_t>(x) - static_cast<int64_t>(y)));
  }
  return worst;
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }  // engine/forward.cc's

std::string join(const std::vector<int>& rows) {
  std::string text;
  for (const int r : rows) {
    if (!text.empty()) text += ',';
    text += std::to_string(r);
  }
  return text;
}

}  // namespace

// The convolution and the norms: segments of one row (a decode step), of fewer rows than the
// state holds (its held inputs shift and partly stay), of a prompt's rows, and several at once,
// each from a state of its own; kernels of 4 taps (the models') and of 2 and 8 (the ends of what
// the kernels serve). The states after must be the CPU's exactly (they are inputs moved along);
// the rows as well but for rare last bits of the norm (its double sum runs in another order),
// when the host's SiLU is the AVX-512 or AVX2 tier's (the GPU's exp is theirs). The GPU fuses each
// product into the sum in tap order, as the scalar tier's convolution (an AVX2 host's rounds them).
TEST(cuda_delta_net_conv_matches_cpu) {
  if (!device_ready("cuda_delta_net_conv_matches_cpu")) return;
  std::mt19937 rng(31);
  const cuda::Stream stream;
  const float eps = 1e-6f;
  struct Case {
    int64_t kernel;
    std::vector<int> rows;
  };
  const std::vector<Case> cases = {{4, {1}},       {4, {2}},         {4, {37}},        {4, {2, 37}},
                                   {4, {1, 1, 1}}, {4, {300, 2, 5}}, {2, {5, 1, 300}}, {8, {5, 1, 300}}};
  for (const Case& c : cases) {
    const cuda::DeltaNetShape shape{2, 4, 64, c.kernel, false};
    CHECK(cuda::delta_net_supports(shape));
    const int64_t channels = shape.channels();
    const int n = total_rows(c.rows);
    const auto mixed = random_floats(static_cast<size_t>(n * channels), 2.0f, rng);
    const auto taps = random_floats(static_cast<size_t>(channels * c.kernel), 0.7f, rng);
    std::vector<std::vector<float>> states;
    for (size_t s = 0; s < c.rows.size(); ++s) states.push_back(random_state(shape, rng));

    auto want = mixed;
    auto want_states = states;
    int first = 0;
    for (size_t s = 0; s < c.rows.size(); ++s) {
      float* rows = want.data() + first * channels;
      cpu::causal_conv_silu(rows, c.rows[s], channels, channels, c.kernel, taps.data(), want_states[s].data(),
                            cpu::conv_token_scalar);
      for (int t = 0; t < c.rows[s]; ++t) {
        cpu::l2_norm(rows + t * channels, 2 * shape.k_heads, shape.head_dim, shape.head_dim, eps);
      }
      first += c.rows[s];
    }

    const auto dmixed = upload(mixed), dtaps = upload(taps);
    const DeviceSegments segments(c.rows, states);
    cuda::delta_net_conv(dmixed.as<float>(), segments.segments, shape, dtaps.as<float>(), eps, stream.handle());
    const auto got = download<float>(dmixed, mixed.size(), stream);
    const auto got_states = segments.download_states(states, stream);
    CHECK(mismatches(got, want) <= want.size() / 100 && relative_error(got, want) < 1e-6)
        << "kernel " << c.kernel << " rows " << join(c.rows) << ": " << mismatches(got, want) << " of " << want.size()
        << " differ, relative error " << relative_error(got, want);
    for (size_t s = 0; s < c.rows.size(); ++s) {
      CHECK(mismatches(got_states[s], want_states[s]) == 0)
          << "kernel " << c.kernel << " rows " << join(c.rows) << ": the state of segment " << s << " differs in "
          << mismatches(got_states[s], want_states[s]) << " floats";
    }
  }
}

// The gated delta rule: each head_dim the kernels serve (32 to 256), value heads reading key
// heads grouped (Qwen3-Next) and tiled (Qwen3.5), which differ for 2 key heads and 4 value heads;
// decode rows, a prompt's, two sequences at once. The state's row dots sum per lane and then
// across the row's lanes, ggml_vec_dot_f32 in the CPU's SIMD order: each dot differs in its last
// bits, and the difference carries through the state from token to token (decays below 1 and
// normed keys keep it from growing), so outputs and states are compared to a relative 1e-5 of
// their largest magnitude (an H100 against an AVX-512 host measured at most 2.3e-7, over 512
// tokens too); a wrong key head, decay or state row moves them by the values' own size.
TEST(cuda_delta_net_rule_matches_cpu) {
  if (!device_ready("cuda_delta_net_rule_matches_cpu")) return;
  std::mt19937 rng(32);
  const cuda::Stream stream;
  cpu::ThreadPool pool(2);
  for (const int64_t dim : {int64_t{32}, int64_t{64}, int64_t{128}, int64_t{256}}) {
    for (const bool grouped : {false, true}) {
      for (const std::vector<int>& rows : {std::vector<int>{1}, std::vector<int>{50}, std::vector<int>{50, 1}}) {
        const cuda::DeltaNetShape shape{2, 4, dim, 4, grouped};
        const int64_t channels = shape.channels(), v_heads = shape.v_heads, value_width = shape.value_width();
        const int n = total_rows(rows);
        auto mixed = random_floats(static_cast<size_t>(n * channels), 1.0f, rng);
        // Normed q and k heads, as delta_net_conv leaves them.
        for (int t = 0; t < n; ++t) cpu::l2_norm(mixed.data() + t * channels, 2 * shape.k_heads, dim, dim, 1e-6f);
        const auto decay = random_range(static_cast<size_t>(n * v_heads), -2.0f, 0.0f, rng);
        const auto beta = random_range(static_cast<size_t>(n * v_heads), 0.0f, 1.0f, rng);
        std::vector<std::vector<float>> states;
        for (size_t s = 0; s < rows.size(); ++s) states.push_back(random_state(shape, rng));

        std::vector<float> want(static_cast<size_t>(n * value_width));
        auto want_states = states;
        const cpu::DeltaRuleShape rule{shape.k_heads, shape.v_heads, dim, grouped};
        int first = 0;
        for (size_t s = 0; s < rows.size(); ++s) {
          const float* m = mixed.data() + first * channels;
          cpu::gated_delta_rule(rule, rows[s], m, m + shape.key_width(), channels, m + 2 * shape.key_width(), channels,
                                decay.data() + first * v_heads, beta.data() + first * v_heads,
                                want_states[s].data() + shape.conv_floats(), want.data() + first * value_width,
                                value_width, pool);
          first += rows[s];
        }

        const auto dmixed = upload(mixed), ddecay = upload(decay), dbeta = upload(beta);
        cuda::DeviceBuffer dout(want.size() * sizeof(float), "out");
        const DeviceSegments segments(rows, states);
        cuda::delta_net_rule(dmixed.as<float>(), ddecay.as<float>(), dbeta.as<float>(), segments.segments, shape,
                             dout.as<float>(), stream.handle());
        const auto got = download<float>(dout, want.size(), stream);
        const auto got_states = segments.download_states(states, stream);
        CHECK(relative_error(got, want) < 1e-5) << "dim " << dim << " grouped " << grouped << " rows " << join(rows)
                                                << ": outputs' relative error " << relative_error(got, want);
        CHECK(mismatches(download<float>(dmixed, mixed.size(), stream), mixed) == 0)
            << "dim " << dim << ": the rows changed";
        for (size_t s = 0; s < rows.size(); ++s) {
          const auto conv_end = want_states[s].begin() + shape.conv_floats();
          const std::vector<float> got_conv(got_states[s].begin(), got_states[s].begin() + shape.conv_floats());
          const std::vector<float> got_rule(got_states[s].begin() + shape.conv_floats(), got_states[s].end());
          const std::vector<float> want_conv(want_states[s].begin(), conv_end);
          const std::vector<float> want_rule(conv_end, want_states[s].end());
          CHECK(mismatches(got_conv, want_conv) == 0)
              << "dim " << dim << " segment " << s << ": the convolution's state changed";
          CHECK(relative_error(got_rule, want_rule) < 1e-5)
              << "dim " << dim << " grouped " << grouped << " rows " << join(rows) << " segment " << s
              << ": states' relative error " << relative_error(got_rule, want_rule);
        }
      }
    }
  }
}

// beta's sigmoid and the decay's softplus (both of its branches: alphas past 20 too) times a, as
// forward.cc's delta_net_attention: libm's expf and logf there, their correctly rounded values
// here, so results agree to the last bit or two.
TEST(cuda_delta_net_gates_match_cpu) {
  if (!device_ready("cuda_delta_net_gates_match_cpu")) return;
  std::mt19937 rng(33);
  const cuda::Stream stream;
  const int64_t n = 5, v_heads = 32;
  const auto beta = random_floats(static_cast<size_t>(n * v_heads), 8.0f, rng);
  const auto alpha = random_floats(static_cast<size_t>(n * v_heads), 30.0f, rng);
  const auto dt_bias = random_floats(static_cast<size_t>(v_heads), 2.0f, rng);
  const auto a = random_range(static_cast<size_t>(v_heads), -3.0f, -0.1f, rng);
  auto want_beta = beta, want_decay = alpha;
  for (int64_t i = 0; i < n * v_heads; ++i) {
    const int64_t h = i % v_heads;
    want_beta[i] = sigmoid(want_beta[i]);
    const float x = want_decay[i] + dt_bias[h];
    want_decay[i] = (x > 20.0f ? x : std::log(1.0f + std::exp(x))) * a[h];
  }
  const auto dbeta = upload(beta), ddecay = upload(alpha), dbias = upload(dt_bias), da = upload(a);
  cuda::delta_net_gates(dbeta.as<float>(), ddecay.as<float>(), n, v_heads, dbias.as<float>(), da.as<float>(),
                        stream.handle());
  const auto got_beta = download<float>(dbeta, beta.size(), stream);
  const auto got_decay = download<float>(ddecay, alpha.size(), stream);
  CHECK(max_ulps(got_beta, want_beta) <= 2) << "beta: " << max_ulps(got_beta, want_beta) << " ulps apart";
  CHECK(max_ulps(got_decay, want_decay) <= 2) << "decay: " << max_ulps(got_decay, want_decay) << " ulps apart";
}

// Qwen3-Next's fused projections split as forward.cc's qkvz and beta_alpha branches (3 value
// heads per key head), and the gated query as gqa_attention splits it: copies, so exactly; every
// place of the outputs (filled with a mark first) must be written.
TEST(cuda_delta_net_splits_match_cpu) {
  if (!device_ready("cuda_delta_net_splits_match_cpu")) return;
  std::mt19937 rng(34);
  const cuda::Stream stream;
  const float mark = -777.0f;
  const int64_t n = 3;
  const cuda::DeltaNetShape shape{2, 6, 32, 4, true};
  const int64_t dim = shape.head_dim, group = shape.v_heads / shape.k_heads, channels = shape.channels();
  const int64_t value_width = shape.value_width(), values = group * dim;
  {
    const int64_t per_head = 2 * dim + 2 * values;
    const auto grouped = random_floats(static_cast<size_t>(n * shape.k_heads * per_head), 3.0f, rng);
    std::vector<float> want_mixed(static_cast<size_t>(n * channels), mark);
    std::vector<float> want_z(static_cast<size_t>(n * value_width), mark);
    for (int64_t i = 0; i < n; ++i) {
      float* row = want_mixed.data() + i * channels;
      for (int64_t h = 0; h < shape.k_heads; ++h) {
        const float* part = grouped.data() + (i * shape.k_heads + h) * per_head;
        std::copy_n(part, dim, row + h * dim);
        std::copy_n(part + dim, dim, row + shape.key_width() + h * dim);
        std::copy_n(part + 2 * dim, values, row + 2 * shape.key_width() + h * values);
        std::copy_n(part + 2 * dim + values, values, want_z.data() + i * value_width + h * values);
      }
    }
    const auto dgrouped = upload(grouped);
    const auto dmixed = upload(std::vector<float>(want_mixed.size(), mark));
    const auto dz = upload(std::vector<float>(want_z.size(), mark));
    cuda::delta_net_split_qkvz(dgrouped.as<float>(), n, shape, dmixed.as<float>(), dz.as<float>(), stream.handle());
    CHECK(download<float>(dmixed, want_mixed.size(), stream) == want_mixed) << "qkvz: the mixed rows differ";
    CHECK(download<float>(dz, want_z.size(), stream) == want_z) << "qkvz: the z rows differ";
  }
  {
    const auto grouped = random_floats(static_cast<size_t>(n * 2 * shape.v_heads), 3.0f, rng);
    std::vector<float> want_beta(static_cast<size_t>(n * shape.v_heads), mark), want_decay = want_beta;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t h = 0; h < shape.k_heads; ++h) {
        const float* part = grouped.data() + i * 2 * shape.v_heads + h * 2 * group;
        std::copy_n(part, group, want_beta.data() + i * shape.v_heads + h * group);
        std::copy_n(part + group, group, want_decay.data() + i * shape.v_heads + h * group);
      }
    }
    const auto dgrouped = upload(grouped);
    const auto dbeta = upload(std::vector<float>(want_beta.size(), mark));
    const auto ddecay = upload(std::vector<float>(want_decay.size(), mark));
    cuda::delta_net_split_beta_alpha(dgrouped.as<float>(), n, shape, dbeta.as<float>(), ddecay.as<float>(),
                                     stream.handle());
    CHECK(download<float>(dbeta, want_beta.size(), stream) == want_beta) << "beta_alpha: the betas differ";
    CHECK(download<float>(ddecay, want_decay.size(), stream) == want_decay) << "beta_alpha: the alphas differ";
  }
  {
    const int64_t heads = 4, head_dim = 64, q_width = heads * head_dim;
    const auto q_gated = random_floats(static_cast<size_t>(n * 2 * q_width), 3.0f, rng);
    std::vector<float> want_q(static_cast<size_t>(n * q_width), mark), want_gate = want_q;
    for (int64_t i = 0; i < n * heads; ++i) {
      const float* head = q_gated.data() + i * 2 * head_dim;
      std::copy_n(head, head_dim, want_q.data() + i * head_dim);
      std::copy_n(head + head_dim, head_dim, want_gate.data() + i * head_dim);
    }
    const auto dq_gated = upload(q_gated);
    const auto dq = upload(std::vector<float>(want_q.size(), mark));
    const auto dgate = upload(std::vector<float>(want_gate.size(), mark));
    cuda::split_gated_query(dq_gated.as<float>(), n, heads, head_dim, dq.as<float>(), dgate.as<float>(),
                            stream.handle());
    CHECK(download<float>(dq, want_q.size(), stream) == want_q) << "gated query: the queries differ";
    CHECK(download<float>(dgate, want_gate.size(), stream) == want_gate) << "gated query: the gates differ";
  }
}

// The gated attention's output gate (gqa_attention's x *= sigmoid(gate)) and the shared expert's
// (ffn_block: the row times sigmoid of its logit, then added to the residual): libm's expf on the
// CPU, its correctly rounded value here.
TEST(cuda_sigmoid_gates_match_cpu) {
  if (!device_ready("cuda_sigmoid_gates_match_cpu")) return;
  std::mt19937 rng(35);
  const cuda::Stream stream;
  {
    const int64_t count = 1000;
    const auto x = random_floats(static_cast<size_t>(count), 5.0f, rng);
    const auto gate = random_floats(static_cast<size_t>(count), 10.0f, rng);
    auto want = x;
    for (int64_t i = 0; i < count; ++i) want[i] *= sigmoid(gate[i]);
    const auto dx = upload(x), dgate = upload(gate);
    cuda::sigmoid_gate(dx.as<float>(), dgate.as<float>(), count, stream.handle());
    const auto got = download<float>(dx, x.size(), stream);
    CHECK(max_ulps(got, want) <= 2) << "sigmoid_gate: " << max_ulps(got, want) << " ulps apart";
  }
  {
    const int64_t n = 4, width = 300;
    const auto rows = random_floats(static_cast<size_t>(n * width), 3.0f, rng);
    const auto logits = random_floats(static_cast<size_t>(n), 6.0f, rng);
    const auto residual = random_floats(static_cast<size_t>(n * width), 3.0f, rng);
    auto want = residual;
    for (int64_t i = 0; i < n; ++i) {
      const float g = sigmoid(logits[i]);
      for (int64_t j = 0; j < width; ++j) {
        const float shared = rows[i * width + j] * g;
        want[i * width + j] += shared;
      }
    }
    const auto drows = upload(rows), dlogits = upload(logits), dresidual = upload(residual);
    cuda::add_sigmoid_gated(drows.as<float>(), dlogits.as<float>(), n, width, dresidual.as<float>(), stream.handle());
    const auto got = download<float>(dresidual, residual.size(), stream);
    // A sum near zero magnifies a last-bit difference of the product in ulps of the sum: bound it absolutely too.
    CHECK(mismatches(got, want) <= want.size() / 20 && relative_error(got, want) < 1e-6)
        << "add_sigmoid_gated: " << mismatches(got, want) << " of " << want.size() << " differ, relative error "
        << relative_error(got, want);
  }
}

namespace {

std::vector<float> cpu_rotated(std::vector<float> x, int64_t n, int64_t heads, int64_t head_dim,
                               const cpu::RopeParams& params, const std::vector<int32_t>& positions) {
  std::vector<float> angles;
  for (int64_t i = 0; i < n; ++i) {
    cpu::rope_angles(params, positions[i], angles);
    cpu::rope_apply(x.data() + i * heads * head_dim, heads, head_dim, params, angles);
  }
  return x;
}

}  // namespace

// Qwen3.5's interleaved multi-axis rope at text positions (RopeShape::sections): its own sections
// [11, 11, 10, 0] over 64 rotated dims (of 256-wide heads) leave no pair of the 32 to the fourth
// axis (every sector below 32 falls in the first three), so it is the plain rope there; sections
// [2, 2, 2, 2] over 32 dims and [4, 2, 2, 0] over 128 do give pairs the fourth axis (sectors 6 and 7
// of every 8, and 7 of every 8), which must not rotate at any position. Each as the CPU rotates it,
// in both layouts.
TEST(cuda_rope_sections_match_cpu) {
  if (!device_ready("cuda_rope_sections_match_cpu")) return;
  std::mt19937 rng(36);
  const cuda::Stream stream;
  const int64_t n = 4, heads = 3;
  const std::vector<int32_t> positions = {0, 1, 777, 31000};
  const auto dpos = upload(positions);
  struct Case {
    int64_t head_dim, dims;
    std::array<int32_t, 4> sections;
    std::vector<int64_t> fourth;  // the pairs of the fourth axis, by ggml's imrope rule
  };
  std::vector<int64_t> every_eighth;
  for (int64_t i = 7; i < 64; i += 8) every_eighth.push_back(i);
  const std::vector<Case> cases = {
      {256, 64, {11, 11, 10, 0}, {}}, {64, 32, {2, 2, 2, 2}, {6, 7, 14, 15}}, {128, 128, {4, 2, 2, 0}, every_eighth}};
  for (const Case& c : cases) {
    for (const bool neox : {true, false}) {
      cpu::RopeParams params;
      params.style = neox ? cpu::RopeStyle::kNeox : cpu::RopeStyle::kNormal;
      params.dims = c.dims;
      params.freq_base = 1e7f;
      params.sections = c.sections;
      cpu::RopeParams plain = params;
      plain.sections = {};
      const auto x = random_floats(static_cast<size_t>(n * heads * c.head_dim), 5.0f, rng);
      const auto want = cpu_rotated(x, n, heads, c.head_dim, params, positions);
      const auto want_plain = cpu_rotated(x, n, heads, c.head_dim, plain, positions);
      if (c.fourth.empty()) {
        CHECK(want == want_plain) << "sections " << c.sections[0] << "," << c.sections[1] << "," << c.sections[2] << ","
                                  << c.sections[3] << ": the CPU's rotation is not the plain rope's";
      } else {
        CHECK(want != want_plain) << "dims " << c.dims << ": the CPU's rotation is the plain rope's";
      }
      const auto dx = upload(x);
      cuda::AttentionHeads h;
      h.q = dx.as<float>();
      h.heads = heads;
      h.head_dim = c.head_dim;
      cuda::position_heads(h, n, dpos.as<int32_t>(), engine::gpu_rope_shape(params, nullptr), stream.handle());
      const auto got = download<float>(dx, x.size(), stream);
      // As cuda_position_heads_matches_cpu: cos and sin may differ from the host's libm in the last bit.
      CHECK(mismatches(got, want) <= want.size() / 10 && relative_error(got, want) < 1e-6)
          << "dims " << c.dims << " neox " << neox << ": " << mismatches(got, want) << " of " << want.size()
          << " differ, relative error " << relative_error(got, want);
      size_t moved = 0;
      for (int64_t i = 0; i < n * heads; ++i) {
        for (const int64_t pair : c.fourth) {
          for (const int64_t j : {neox ? pair : 2 * pair, neox ? pair + c.dims / 2 : 2 * pair + 1}) {
            const size_t at = static_cast<size_t>(i * c.head_dim + j);
            moved += got[at] != x[at] || want[at] != x[at];
          }
        }
      }
      CHECK(moved == 0) << "dims " << c.dims << " neox " << neox << ": " << moved
                        << " values of fourth-axis pairs rotated";
    }
  }
}

#else

TEST(cuda_delta_net_skipped) { std::printf("skip cuda_delta_net tests: this build has no CUDA\n"); }

#endif
