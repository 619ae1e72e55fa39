// The tiled matrix-matrix products (cuda/mmq.cu) against the CPU's dots and the matvec
// kernels on random data, for every quantized type: dense products of 1 to 150 rows (partial
// tiles of rows and of weight rows, for types of 32-weight blocks a width that ends inside a
// step), accumulation, the
// gated SwiGLU product, and the expert products over a grouping with uneven loads (an expert
// with no rows, one with one, one with two tiles' worth) and experts left in host memory; and
// that the tiles outpace the matvec on prompt batches of the benchmark model's shapes (the
// times printed are what the threshold kMmqMinRows rests on). Skips, saying why, where there
// is no CUDA device.
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

cuda::DeviceBuffer quantized(const cuda::DeviceBuffer& x, int64_t n, int64_t cols, uint32_t type,
                             const cuda::Stream& stream) {
  cuda::DeviceBuffer blocks(static_cast<size_t>(n * cols / 32) * sizeof(cuda::ActivationBlock), "blocks");
  cuda::quantize_activations(x.as<float>(), n, cols, type, blocks.as<cuda::ActivationBlock>(), stream.handle());
  return blocks;
}

std::vector<float> swiglu(const std::vector<float>& gate, const std::vector<float>& up) {
  std::vector<float> out(gate.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  return out;
}

// The routing of the grouped test: n tokens, two experts each; expert 3 takes the first
// choice of the first 100 tokens (two tiles), expert 6 one slot, expert 5 none.
constexpr int64_t kExperts = 8, kUsed = 2, kTokens = 120;
std::vector<int32_t> uneven_routing() {
  const int32_t spread[] = {0, 1, 2, 4, 7};
  std::vector<int32_t> chosen(static_cast<size_t>(kTokens * kUsed));
  for (int64_t i = 0; i < kTokens; ++i) {
    chosen[i * kUsed] = i < 100 ? 3 : spread[i % 5];
    chosen[i * kUsed + 1] = i == 7 ? 6 : spread[(i + 1) % 5];
  }
  return chosen;
}

// Experts' matrices stacked by slot: slot s holds the expert whose table entry is s.
std::vector<uint8_t> stack(const std::vector<std::vector<uint8_t>>& experts, const std::vector<int32_t>& slot_of) {
  int64_t slots = 0;
  for (const int32_t s : slot_of) slots += s >= 0;
  const size_t bytes = experts[0].size();
  std::vector<uint8_t> out(static_cast<size_t>(slots) * bytes);
  for (size_t e = 0; e < experts.size(); ++e) {
    if (slot_of[e] >= 0) std::copy(experts[e].begin(), experts[e].end(), out.begin() + slot_of[e] * bytes);
  }
  return out;
}

// The rows of `rows` floats each of the routed slots whose expert is on the GPU.
std::vector<float> resident_rows(const std::vector<float>& all, int64_t rows, const std::vector<int32_t>& chosen,
                                 const std::vector<int32_t>& slot_of) {
  std::vector<float> out;
  for (size_t s = 0; s < chosen.size(); ++s) {
    if (slot_of[chosen[s]] >= 0) out.insert(out.end(), all.begin() + s * rows, all.begin() + (s + 1) * rows);
  }
  return out;
}

// Mean milliseconds of `launch` over a few runs, after one to warm up.
template <typename Launch>
double milliseconds(const cuda::Stream& stream, Launch launch) {
  constexpr int kRuns = 10;
  launch();
  stream.synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kRuns; ++i) launch();
  stream.synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / kRuns;
}

}  // namespace

TEST(cuda_mmq_threshold) {
  CHECK(!cuda::mmq_serves(quant::BlockQ4_K::kType, cuda::kMmqMinRows - 1));
  for (const uint32_t type : kQuantizedTypes) CHECK(cuda::mmq_serves(type, cuda::kMmqMinRows)) << "type " << type;
  CHECK(!cuda::mmq_serves(0, 512)) << "F32 weights take the float matvec";
}

TEST(cuda_mmq_matches_cpu_and_matvec) {
  if (!device_ready("cuda_mmq_matches_cpu_and_matvec")) return;
  std::mt19937 rng(31);
  const int64_t rows = 67;
  const cuda::Stream stream;
  for (const uint32_t type : kQuantizedTypes) {
    // 800: the last step holds one block of 32.
    const int64_t cols = quant::ggml_type(type)->block_elements == 32 ? 800 : 768;
    const auto w = random_matrix(type, rows, cols, rng);
    const auto dw = upload(w);
    const cuda::DeviceMatrix m = device_matrix(type, dw, rows, cols);
    for (const int64_t n : {1, 64, 77, 150}) {
      const auto x = random_floats(static_cast<size_t>(n * cols), 2.0f, rng);
      const auto dx = upload(x);
      const auto blocks = quantized(dx, n, cols, type, stream);
      const size_t out = static_cast<size_t>(n * rows);
      cuda::DeviceBuffer y(out * sizeof(float), "y"), y_matvec(out * sizeof(float), "y matvec");
      cuda::mmq(m, blocks.as<cuda::ActivationBlock>(), n, y.as<float>(), false, stream.handle());
      cuda::matvec(m, {dx.as<float>(), blocks.as<cuda::ActivationBlock>()}, n, y_matvec.as<float>(), false,
                   stream.handle());
      const auto got = download<float>(y, out, stream);
      const auto want = cpu_matvec(type, w, rows, cols, x, n);
      const double error = relative_error(got, want);
      const double to_matvec = relative_error(got, download<float>(y_matvec, out, stream));
      std::printf("  mmq type %u n %lld: relative error %.3g (CPU), %.3g (matvec)\n", type, static_cast<long long>(n),
                  error, to_matvec);
      CHECK(error < 2e-5) << "type " << type << " n " << n << ": relative error " << error << " to the CPU";
      CHECK(to_matvec < 2e-5) << "type " << type << " n " << n << ": relative error " << to_matvec << " to the matvec";

      // Accumulating adds the same product to what y holds.
      const auto base = random_floats(out, 5.0f, rng);
      const auto dy = upload(base);
      cuda::mmq(m, blocks.as<cuda::ActivationBlock>(), n, dy.as<float>(), true, stream.handle());
      auto sum = base;
      for (size_t i = 0; i < out; ++i) sum[i] += want[i];
      const double accumulated = relative_error(download<float>(dy, out, stream), sum);
      CHECK(accumulated < 2e-5) << "type " << type << " n " << n << ": accumulated, relative error " << accumulated;
    }
  }
}

// Float weights (F16, BF16: gpt-oss's attention) in the float tiles: the CPU's products (the
// activations rounded to the weight type) and the float matvec's within float rounding, for
// batches of one partial tile to several, accumulating too; the same for matrices of at most 64
// rows (the narrow blocks, of 32 and 64 rows; a column count whose k16 steps the warps share
// unevenly), whose token rows also come out the same in a batch of 150 as in one of 77; and
// faster than the matvec at a prompt's batch on gpt-oss's q projection and DeepSeek-V4's
// hyper-connection mix.
TEST(cuda_float_mmq_matches_cpu_and_matvec) {
  if (!device_ready("cuda_float_mmq_matches_cpu_and_matvec")) return;
  std::mt19937 rng(37);
  const cuda::Stream stream;
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{67, 320}, {24, 1088}, {40, 1024}}) {
    for (const uint32_t type : {uint32_t{1}, uint32_t{30}}) {
      const auto w = random_matrix(type, rows, cols, rng);
      const auto dw = upload(w);
      const cuda::DeviceMatrix m = device_matrix(type, dw, rows, cols);
      CHECK(cuda::float_mmq_serves(m)) << "type " << type;
      for (const int64_t n : {1, 64, 77, 150}) {
        const auto x = random_floats(static_cast<size_t>(n * cols), 2.0f, rng);
        const auto dx = upload(x);
        const size_t out = static_cast<size_t>(n * rows);
        cuda::DeviceBuffer y(out * sizeof(float), "y"), y_matvec(out * sizeof(float), "y matvec");
        cuda::float_mmq(m, dx.as<float>(), n, y.as<float>(), false, stream.handle());
        cuda::matvec(m, {dx.as<float>(), nullptr}, n, y_matvec.as<float>(), false, stream.handle());
        const auto got = download<float>(y, out, stream);
        const auto want = cpu_matvec(type, w, rows, cols, x, n);
        const double error = relative_error(got, want);
        const double to_matvec = relative_error(got, download<float>(y_matvec, out, stream));
        std::printf("  float mmq type %u n %lld: relative error %.3g (CPU), %.3g (matvec)\n", type,
                    static_cast<long long>(n), error, to_matvec);
        CHECK(error < 2e-6) << "type " << type << " n " << n << ": relative error " << error << " to the CPU";
        CHECK(to_matvec < 2e-6) << "type " << type << " n " << n << ": relative error " << to_matvec
                                << " to the matvec";
        const auto base = random_floats(out, 5.0f, rng);
        const auto dy = upload(base);
        cuda::float_mmq(m, dx.as<float>(), n, dy.as<float>(), true, stream.handle());
        auto sum = base;
        for (size_t i = 0; i < out; ++i) sum[i] += want[i];
        const double accumulated = relative_error(download<float>(dy, out, stream), sum);
        CHECK(accumulated < 2e-6) << "type " << type << " n " << n << ": accumulated, relative error " << accumulated;
      }
      // A token's row does not depend on the rows beside it.
      const auto x = random_floats(static_cast<size_t>(150 * cols), 2.0f, rng);
      const auto dx = upload(x);
      cuda::DeviceBuffer wide(static_cast<size_t>(150 * rows) * sizeof(float), "wide"),
          narrow(static_cast<size_t>(77 * rows) * sizeof(float), "narrow");
      cuda::float_mmq(m, dx.as<float>(), 150, wide.as<float>(), false, stream.handle());
      cuda::float_mmq(m, dx.as<float>(), 77, narrow.as<float>(), false, stream.handle());
      const auto all = download<float>(wide, static_cast<size_t>(150 * rows), stream);
      const auto first = download<float>(narrow, static_cast<size_t>(77 * rows), stream);
      CHECK(std::equal(first.begin(), first.end(), all.begin()))
          << "type " << type << " rows " << rows << ": 77 tokens' rows differ in a batch of 150";
    }
  }
  const int64_t q_rows = 4096, q_cols = 2880, n = 512;
  const auto dw = upload(random_matrix(30, q_rows, q_cols, rng));
  const cuda::DeviceMatrix m = device_matrix(30, dw, q_rows, q_cols);
  const auto dx = upload(random_floats(static_cast<size_t>(n * q_cols), 2.0f, rng));
  cuda::DeviceBuffer y(static_cast<size_t>(n * q_rows) * sizeof(float), "y");
  const double tiles =
      milliseconds(stream, [&] { cuda::float_mmq(m, dx.as<float>(), n, y.as<float>(), false, stream.handle()); });
  const double matvec = milliseconds(stream, [&] {
    cuda::matvec(m, {dx.as<float>(), nullptr}, n, y.as<float>(), false, stream.handle());
  });
  std::printf("  BF16 %lld x %lld, n %lld: float mmq %.3f ms, matvec %.3f ms (%.2fx)\n", static_cast<long long>(q_rows),
              static_cast<long long>(q_cols), static_cast<long long>(n), tiles, matvec, matvec / tiles);
  CHECK(tiles < matvec) << "float mmq " << tiles << " ms, matvec " << matvec << " ms";
  const int64_t mix_rows = 24, mix_cols = 16384;
  const auto dmix = upload(random_matrix(1, mix_rows, mix_cols, rng));
  const cuda::DeviceMatrix mix = device_matrix(1, dmix, mix_rows, mix_cols);
  const auto dmix_x = upload(random_floats(static_cast<size_t>(n * mix_cols), 2.0f, rng));
  const double narrow =
      milliseconds(stream, [&] { cuda::float_mmq(mix, dmix_x.as<float>(), n, y.as<float>(), false, stream.handle()); });
  const double mix_matvec = milliseconds(stream, [&] {
    cuda::matvec(mix, {dmix_x.as<float>(), nullptr}, n, y.as<float>(), false, stream.handle());
  });
  std::printf("  F16 %lld x %lld, n %lld: float mmq %.3f ms, matvec %.3f ms (%.2fx)\n",
              static_cast<long long>(mix_rows), static_cast<long long>(mix_cols), static_cast<long long>(n), narrow,
              mix_matvec, mix_matvec / narrow);
  CHECK(narrow < mix_matvec) << "float mmq " << narrow << " ms, matvec " << mix_matvec << " ms";
}

TEST(cuda_gated_mmq_matches_cpu_and_matvec) {
  if (!device_ready("cuda_gated_mmq_matches_cpu_and_matvec")) return;
  std::mt19937 rng(37);
  const int64_t rows = 45, cols = 512, n = 70;
  const size_t out = static_cast<size_t>(n * rows);
  const cuda::Stream stream;
  for (const uint32_t type : kQuantizedTypes) {
    const auto gate = random_matrix(type, rows, cols, rng), up = random_matrix(type, rows, cols, rng);
    const auto dg = upload(gate), du = upload(up);
    const cuda::DeviceMatrix mg = device_matrix(type, dg, rows, cols), mu = device_matrix(type, du, rows, cols);
    const auto x = random_floats(static_cast<size_t>(n * cols), 2.0f, rng);
    const auto dx = upload(x);
    const auto blocks = quantized(dx, n, cols, type, stream);
    cuda::DeviceBuffer y(out * sizeof(float), "y"), y_matvec(out * sizeof(float), "y matvec");
    cuda::gated_mmq(mg, mu, blocks.as<cuda::ActivationBlock>(), n, y.as<float>(), stream.handle());
    cuda::gated_matvec(mg, mu, blocks.as<cuda::ActivationBlock>(), n, y_matvec.as<float>(), stream.handle());
    const auto got = download<float>(y, out, stream);
    const auto want = swiglu(cpu_matvec(type, gate, rows, cols, x, n), cpu_matvec(type, up, rows, cols, x, n));
    const double error = relative_error(got, want);
    const double to_matvec = relative_error(got, download<float>(y_matvec, out, stream));
    std::printf("  gated mmq type %u: relative error %.3g (CPU), %.3g (matvec)\n", type, error, to_matvec);
    CHECK(error < 5e-5) << "type " << type << ": relative error " << error << " to the CPU";
    CHECK(to_matvec < 5e-5) << "type " << type << ": relative error " << to_matvec << " to the matvec";
  }
}

TEST(cuda_expert_mmq_matches_cpu_and_matvec) {
  if (!device_ready("cuda_expert_mmq_matches_cpu_and_matvec")) return;
  std::mt19937 rng(41);
  const int64_t width = 512, ff = 256, slots = kTokens * kUsed;
  const float kUntouched = 12345.0f;  // rows of host experts keep it
  const cuda::Stream stream;
  const auto chosen = uneven_routing();
  const auto dchosen = upload(chosen);
  const auto x = random_floats(static_cast<size_t>(kTokens * width), 2.0f, rng);
  const auto dx = upload(x);
  std::vector<int32_t> all_resident(kExperts);
  for (int64_t e = 0; e < kExperts; ++e) all_resident[e] = static_cast<int32_t>(e);
  const std::vector<int32_t> some_on_host = {2, -1, 0, 3, 1, -1, 4, -1};
  for (const uint32_t type : kQuantizedTypes) {
    std::vector<std::vector<uint8_t>> gates, ups, downs;
    for (int64_t e = 0; e < kExperts; ++e) {
      gates.push_back(random_matrix(type, ff, width, rng));
      ups.push_back(random_matrix(type, ff, width, rng));
      downs.push_back(random_matrix(type, width, ff, rng));
    }
    // CPU: each slot's hidden row through its expert.
    std::vector<float> want_hidden(static_cast<size_t>(slots * ff));
    for (int64_t s = 0; s < slots; ++s) {
      const std::vector<float> row(x.begin() + (s / kUsed) * width, x.begin() + (s / kUsed + 1) * width);
      const int32_t e = chosen[s];
      const auto h = swiglu(cpu_matvec(type, gates[e], ff, width, row, 1), cpu_matvec(type, ups[e], ff, width, row, 1));
      std::copy(h.begin(), h.end(), want_hidden.begin() + s * ff);
    }
    const auto blocks = quantized(dx, kTokens, width, type, stream);
    for (const auto& slot_of : {all_resident, some_on_host}) {
      const char* what = slot_of == all_resident ? "all on the GPU" : "some in host memory";
      const auto dslots = upload(slot_of);
      const auto dgate = upload(stack(gates, slot_of)), dup = upload(stack(ups, slot_of));
      const auto ddown = upload(stack(downs, slot_of));
      cuda::DeviceMatrix mg = device_matrix(type, dgate, ff, width), mu = device_matrix(type, dup, ff, width);
      cuda::DeviceMatrix md = device_matrix(type, ddown, width, ff);

      // The grouping in tiles, and the matvec's grouping beside it.
      const DeviceGroups tiled(kTokens, kExperts, kUsed, cuda::kMmqTileTokens);
      const DeviceGroups by_rows(kTokens, kExperts, kUsed, cuda::tokens_per_expert_chunk(kTokens));
      for (const DeviceGroups* g : {&tiled, &by_rows})
        g->group(dchosen.as<int32_t>(), kTokens, kExperts, kUsed, dslots.as<int32_t>(), stream);
      const cuda::ExpertGroups& tiles = tiled.groups;
      const cuda::ExpertGroups& small = by_rows.groups;

      const std::vector<float> untouched_hidden(static_cast<size_t>(slots * ff), kUntouched);
      const auto dhidden = upload(untouched_hidden), dhidden_mv = upload(untouched_hidden);
      cuda::expert_gated_mmq(mg, mu, blocks.as<cuda::ActivationBlock>(), kUsed, tiles, dhidden.as<float>(),
                             stream.handle());
      cuda::expert_gated_matvec(mg, mu, {nullptr, blocks.as<cuda::ActivationBlock>()}, kUsed, small,
                                dhidden_mv.as<float>(), stream.handle());
      const auto hidden = download<float>(dhidden, untouched_hidden.size(), stream);
      const auto hidden_mv = download<float>(dhidden_mv, untouched_hidden.size(), stream);
      size_t host_rows_written = 0;
      for (int64_t s = 0; s < slots; ++s) {
        if (slot_of[chosen[s]] >= 0) continue;
        for (int64_t j = 0; j < ff; ++j) host_rows_written += hidden[s * ff + j] != kUntouched;
      }
      CHECK(host_rows_written == 0) << "type " << type << ", " << what << ": " << host_rows_written
                                    << " values of host experts' rows written";
      const auto got_hidden = resident_rows(hidden, ff, chosen, slot_of);
      const double hidden_error = relative_error(got_hidden, resident_rows(want_hidden, ff, chosen, slot_of));
      const double hidden_to_matvec = relative_error(got_hidden, resident_rows(hidden_mv, ff, chosen, slot_of));
      std::printf("  expert gated mmq type %u, %s: relative error %.3g (CPU), %.3g (matvec)\n", type, what,
                  hidden_error, hidden_to_matvec);
      CHECK(hidden_error < 5e-5) << "type " << type << ", " << what << ": hidden, relative error " << hidden_error;
      CHECK(hidden_to_matvec < 5e-5) << "type " << type << ", " << what << ": hidden, relative error "
                                     << hidden_to_matvec << " to the matvec";

      // Down, from the GPU's hidden rows (host experts' rows hold kUntouched: quantized, never read).
      const auto hidden_blocks = quantized(dhidden, slots, ff, type, stream);
      const std::vector<float> untouched_out(static_cast<size_t>(slots * width), kUntouched);
      const auto dout = upload(untouched_out), dout_mv = upload(untouched_out);
      cuda::expert_mmq(md, hidden_blocks.as<cuda::ActivationBlock>(), tiles, dout.as<float>(), stream.handle());
      cuda::expert_matvec(md, {nullptr, hidden_blocks.as<cuda::ActivationBlock>()}, small, dout_mv.as<float>(),
                          stream.handle());
      const auto out = download<float>(dout, untouched_out.size(), stream);
      const auto out_mv = download<float>(dout_mv, untouched_out.size(), stream);
      std::vector<float> want_out(untouched_out.size(), kUntouched);
      for (int64_t s = 0; s < slots; ++s) {
        if (slot_of[chosen[s]] < 0) continue;
        const std::vector<float> row(hidden.begin() + s * ff, hidden.begin() + (s + 1) * ff);
        const auto o = cpu_matvec(type, downs[chosen[s]], width, ff, row, 1);
        std::copy(o.begin(), o.end(), want_out.begin() + s * width);
      }
      size_t host_out_written = 0;
      for (int64_t s = 0; s < slots; ++s) {
        if (slot_of[chosen[s]] >= 0) continue;
        for (int64_t j = 0; j < width; ++j) host_out_written += out[s * width + j] != kUntouched;
      }
      CHECK(host_out_written == 0) << "type " << type << ", " << what << ": " << host_out_written
                                   << " values of host experts' outputs written";
      const auto got_out = resident_rows(out, width, chosen, slot_of);
      const double out_error = relative_error(got_out, resident_rows(want_out, width, chosen, slot_of));
      const double out_to_matvec = relative_error(got_out, resident_rows(out_mv, width, chosen, slot_of));
      std::printf("  expert mmq type %u, %s: relative error %.3g (CPU), %.3g (matvec)\n", type, what, out_error,
                  out_to_matvec);
      CHECK(out_error < 2e-5) << "type " << type << ", " << what << ": down, relative error " << out_error;
      CHECK(out_to_matvec < 2e-5) << "type " << type << ", " << what << ": down, relative error " << out_to_matvec
                                  << " to the matvec";
    }
  }
}

TEST(cuda_mmq_outpaces_matvec_on_prompt_batches) {
  if (!device_ready("cuda_mmq_outpaces_matvec_on_prompt_batches")) return;
  std::mt19937 rng(43);
  const cuda::Stream stream;
  // Dense: attn_q's shape in the 30B benchmark model (Q4_K), the output projection's as Q6_K,
  // Q8_0 and IQ2_XXS (decoded through units), and a GLM-4.5-Air expert's down projection as
  // Q5_0 (its rows of 1,408 fit no 256-weight block).
  for (const auto& [type, rows, cols] : {std::tuple{quant::BlockQ4_K::kType, int64_t{4096}, int64_t{2048}},
                                         std::tuple{quant::BlockQ6_K::kType, int64_t{2048}, int64_t{4096}},
                                         std::tuple{quant::BlockQ8_0::kType, int64_t{2048}, int64_t{4096}},
                                         std::tuple{quant::BlockIQ2_XXS::kType, int64_t{2048}, int64_t{4096}},
                                         std::tuple{quant::BlockQ5_0::kType, int64_t{4096}, int64_t{1408}}}) {
    const auto dw = upload(random_matrix(type, rows, cols, rng));
    const cuda::DeviceMatrix m = device_matrix(type, dw, rows, cols);
    for (const int64_t n : {32, 64, 128, 512}) {
      const auto dx = upload(random_floats(static_cast<size_t>(n * cols), 2.0f, rng));
      const auto blocks = quantized(dx, n, cols, type, stream);
      cuda::DeviceBuffer y(static_cast<size_t>(n * rows) * sizeof(float), "y");
      const double tiles = milliseconds(
          stream, [&] { cuda::mmq(m, blocks.as<cuda::ActivationBlock>(), n, y.as<float>(), false, stream.handle()); });
      const double matvec = milliseconds(stream, [&] {
        cuda::matvec(m, {dx.as<float>(), blocks.as<cuda::ActivationBlock>()}, n, y.as<float>(), false, stream.handle());
      });
      std::printf("  %lld x %lld type %u, n %lld: mmq %.3f ms, matvec %.3f ms (%.2fx)\n", static_cast<long long>(rows),
                  static_cast<long long>(cols), type, static_cast<long long>(n), tiles, matvec, matvec / tiles);
      if (n == 512) {
        CHECK(tiles < matvec) << "type " << type << ": mmq " << tiles << " ms, matvec " << matvec << " ms";
      }
    }
  }
  // Experts: a layer's gate/up (Q4_K) and down (Q6_K) of 32 experts of 768 x 2048, 8 of them
  // routed per row at random: about the benchmark's rows per expert at a 128-row prompt.
  const int64_t experts = 32, used = 8, width = 2048, ff = 768;
  const uint32_t gate_type = quant::BlockQ4_K::kType, down_type = quant::BlockQ6_K::kType;
  const auto dgate = upload(random_matrix(gate_type, experts * ff, width, rng));
  const auto dup = upload(random_matrix(gate_type, experts * ff, width, rng));
  const auto ddown = upload(random_matrix(down_type, experts * width, ff, rng));
  cuda::DeviceMatrix mg = device_matrix(gate_type, dgate, ff, width), mu = device_matrix(gate_type, dup, ff, width);
  cuda::DeviceMatrix md = device_matrix(down_type, ddown, width, ff);
  std::vector<int32_t> identity(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e) identity[e] = static_cast<int32_t>(e);
  const auto dslots = upload(identity);
  for (const int64_t n : {128, 512}) {
    std::vector<int32_t> chosen(static_cast<size_t>(n * used));
    for (int64_t i = 0; i < n; ++i) {
      std::vector<int32_t> pool = identity;
      std::shuffle(pool.begin(), pool.end(), rng);
      std::copy(pool.begin(), pool.begin() + used, chosen.begin() + i * used);
    }
    const auto dchosen = upload(chosen);
    const auto dx = upload(random_floats(static_cast<size_t>(n * width), 2.0f, rng));
    const auto dh = upload(random_floats(static_cast<size_t>(n * used * ff), 0.5f, rng));
    const auto x_blocks = quantized(dx, n, width, gate_type, stream);
    const auto h_blocks = quantized(dh, n * used, ff, down_type, stream);
    cuda::DeviceBuffer hidden(static_cast<size_t>(n * used * ff) * sizeof(float), "hidden");
    cuda::DeviceBuffer out(static_cast<size_t>(n * used * width) * sizeof(float), "out");
    double times[2][2];  // [tiles, matvec][gate/up, down]
    for (const bool tiled : {true, false}) {
      const DeviceGroups grouping(n, experts, used, tiled ? cuda::kMmqTileTokens : cuda::tokens_per_expert_chunk(n));
      grouping.group(dchosen.as<int32_t>(), n, experts, used, dslots.as<int32_t>(), stream);
      const cuda::ExpertGroups& g = grouping.groups;
      const auto* xb = x_blocks.as<cuda::ActivationBlock>();
      const auto* hb = h_blocks.as<cuda::ActivationBlock>();
      times[tiled ? 0 : 1][0] = milliseconds(stream, [&] {
        if (tiled) {
          cuda::expert_gated_mmq(mg, mu, xb, used, g, hidden.as<float>(), stream.handle());
        } else {
          cuda::expert_gated_matvec(mg, mu, {nullptr, xb}, used, g, hidden.as<float>(), stream.handle());
        }
      });
      times[tiled ? 0 : 1][1] = milliseconds(stream, [&] {
        if (tiled) {
          cuda::expert_mmq(md, hb, g, out.as<float>(), stream.handle());
        } else {
          cuda::expert_matvec(md, {nullptr, hb}, g, out.as<float>(), stream.handle());
        }
      });
    }
    std::printf(
        "  %lld experts, n %lld: gate/up mmq %.3f ms, matvec %.3f ms (%.2fx); down mmq %.3f ms, matvec %.3f ms "
        "(%.2fx)\n",
        static_cast<long long>(experts), static_cast<long long>(n), times[0][0], times[1][0], times[1][0] / times[0][0],
        times[0][1], times[1][1], times[1][1] / times[0][1]);
    if (n == 512) {
      CHECK(times[0][0] < times[1][0]) << "gate/up: mmq " << times[0][0] << " ms, matvec " << times[1][0] << " ms";
      CHECK(times[0][1] < times[1][1]) << "down: mmq " << times[0][1] << " ms, matvec " << times[1][1] << " ms";
    }
  }
}

#else

TEST(cuda_mmq_skipped) { std::printf("skip cuda_mmq tests: this build has no CUDA\n"); }

#endif
