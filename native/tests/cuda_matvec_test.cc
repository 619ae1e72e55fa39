// The GPU's quantized kernels against the CPU path on random inputs: the activation
// quantizers (the same codes and scales), the embedding lookup (the same floats), and the
// mat-vec products of every GPU weight type (plain, gated, dense batches of 1 to 13 rows,
// expert stacks in chunks of routed rows) within float rounding of the CPU's dots. Skips,
// saying why, where there is no CUDA device.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "tests/check.h"

#ifdef BLOOMERY_CUDA

#include "cpu/cpu_dispatch.h"
#include "cuda/ops.h"
#include "quant/kernels.h"
#include "tests/cuda_test_util.h"

using namespace bloomery;
using namespace bloomery::tests::gpu;

namespace {

constexpr uint32_t kFloatTypes[] = {0, 1, 30};  // F32, F16, BF16
constexpr uint32_t kQuantizedTypes[] = {quant::BlockQ4_0::kType, quant::BlockQ4_1::kType,   quant::BlockQ5_0::kType,
                                        quant::BlockQ5_1::kType, quant::BlockQ8_0::kType,   quant::BlockQ2_K::kType,
                                        quant::BlockQ3_K::kType, quant::BlockQ4_K::kType,   quant::BlockQ5_K::kType,
                                        quant::BlockQ6_K::kType, quant::BlockIQ4_NL::kType, quant::BlockIQ4_XS::kType,
                                        quant::BlockMXFP4::kType};

// Every weight type the GPU serves: each type with CPU kernels (quant_kernels_cover_gpu_types checks the two agree).
std::vector<uint32_t> gpu_types() {
  std::vector<uint32_t> types(std::begin(kFloatTypes), std::end(kFloatTypes));
  types.insert(types.end(), std::begin(kQuantizedTypes), std::end(kQuantizedTypes));
  return types;
}

const char* type_name(uint32_t type) { return quant::ggml_type(type)->name.data(); }

const quant::QuantKernels& cpu_kernels(uint32_t type) { return quant::quant_kernels(type, cpu::host_simd_tier()); }

cuda::DeviceMatrix device_matrix(uint32_t type, const cuda::DeviceBuffer& data, int64_t rows, int64_t cols) {
  cuda::DeviceMatrix m;
  m.type = type;
  m.data = data.as<uint8_t>();
  m.rows = rows;
  m.cols = cols;
  m.row_bytes = row_bytes(type, cols);
  m.matrix_bytes = m.row_bytes * static_cast<size_t>(rows);
  return m;
}

// CPU: y[i][r] = dot(row r, x[i]) through the CPU's activation quantizer and dot.
std::vector<float> cpu_matvec(uint32_t type, const std::vector<uint8_t>& w, int64_t rows, int64_t cols,
                              const std::vector<float>& x, int64_t n) {
  const quant::QuantKernels& k = cpu_kernels(type);
  const size_t a_bytes = row_bytes(k.activation_type, cols);
  std::vector<uint8_t> a(a_bytes);
  std::vector<float> y(static_cast<size_t>(n * rows));
  for (int64_t i = 0; i < n; ++i) {
    k.quantize_activations(x.data() + i * cols, a.data(), cols);
    for (int64_t r = 0; r < rows; ++r)
      y[i * rows + r] = k.vec_dot(w.data() + r * row_bytes(type, cols), a.data(), cols);
  }
  return y;
}

}  // namespace

TEST(cuda_quantize_activations_match_cpu) {
  if (!device_ready("cuda_quantize_activations_match_cpu")) return;
  std::mt19937 rng(7);
  const int64_t n = 5, cols = 768;
  auto x = random_floats(static_cast<size_t>(n * cols), 3.0f, rng);
  x[100] = 0.0f;
  for (int64_t j = 256; j < 512; ++j) x[j] = 0.0f;  // an all-zero super-block
  const cuda::Stream stream;
  const auto dx = upload(x);
  cuda::DeviceBuffer blocks(static_cast<size_t>(n * cols / 32) * sizeof(cuda::ActivationBlock), "blocks");
  // Weight types reading Q8_0, Q8_1 and Q8_K activations.
  for (const uint32_t type : {quant::BlockQ8_0::kType, quant::BlockQ4_1::kType, quant::BlockQ4_K::kType}) {
    cuda::quantize_activations(dx.as<float>(), n, cols, type, blocks.as<cuda::ActivationBlock>(), stream.handle());
    const auto got = download<cuda::ActivationBlock>(blocks, static_cast<size_t>(n * cols / 32), stream);
    const quant::QuantKernels& k = cpu_kernels(type);
    std::vector<uint8_t> a(row_bytes(k.activation_type, cols));
    size_t code_diffs = 0, scale_diffs = 0, sum_diffs = 0;
    for (int64_t i = 0; i < n; ++i) {
      k.quantize_activations(x.data() + i * cols, a.data(), cols);
      for (int64_t b = 0; b < cols / 32; ++b) {
        const cuda::ActivationBlock& g = got[i * cols / 32 + b];
        const int8_t* qs;
        float d;
        if (k.activation_type == quant::BlockQ8_0::kType) {
          const auto* y = reinterpret_cast<const quant::BlockQ8_0*>(a.data()) + b;
          qs = y->qs;
          d = quant::fp16_to_fp32(y->d);
        } else if (k.activation_type == quant::BlockQ8_1::kType) {
          const auto* y = reinterpret_cast<const quant::BlockQ8_1*>(a.data()) + b;
          // Q8_1 packs its scale and sum as halves: compared bit for bit.
          sum_diffs += (g.d_and_sum >> 16) != y->s;
          scale_diffs += (g.d_and_sum & 0xffff) != y->d;
          for (int j = 0; j < 32; ++j) code_diffs += g.qs[j] != y->qs[j];
          continue;
        } else {
          const auto* y = reinterpret_cast<const quant::BlockQ8_K*>(a.data()) + b / 8;
          qs = y->qs + 32 * (b % 8);
          d = y->d;
        }
        scale_diffs += g.d != d;
        for (int j = 0; j < 32; ++j) code_diffs += g.qs[j] != qs[j];
      }
    }
    CHECK(code_diffs == 0 && scale_diffs == 0 && sum_diffs == 0)
        << type_name(type) << ": " << code_diffs << " codes, " << scale_diffs << " scales, " << sum_diffs
        << " sums differ";
  }
}

TEST(cuda_embed_matches_cpu_dequantize) {
  if (!device_ready("cuda_embed_matches_cpu_dequantize")) return;
  std::mt19937 rng(11);
  const int64_t vocab = 37, cols = 512;
  const std::vector<int32_t> tokens = {0, 36, 5, 5, 17, 30};
  const cuda::Stream stream;
  const auto dt = upload(tokens);
  for (const uint32_t type : gpu_types()) {
    CHECK(cuda::embedding_supports(type)) << type_name(type);
    const auto table = random_matrix(type, vocab, cols, rng);
    const auto dtable = upload(table);
    cuda::DeviceBuffer out(tokens.size() * cols * sizeof(float), "out");
    cuda::embed(device_matrix(type, dtable, vocab, cols), dt.as<int32_t>(), static_cast<int64_t>(tokens.size()),
                out.as<float>(), stream.handle());
    const auto got = download<float>(out, tokens.size() * cols, stream);
    std::vector<float> want(got.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      cpu_kernels(type).dequantize_row(table.data() + tokens[i] * row_bytes(type, cols), want.data() + i * cols, cols);
    }
    CHECK(mismatches(got, want) == 0) << type_name(type) << ": " << mismatches(got, want) << " of " << want.size()
                                      << " floats differ, relative error " << relative_error(got, want);
  }
}

TEST(cuda_matvec_matches_cpu_dot) {
  if (!device_ready("cuda_matvec_matches_cpu_dot")) return;
  std::mt19937 rng(13);
  const int64_t rows = 67, cols = 768;
  const cuda::Stream stream;
  for (const uint32_t type : gpu_types()) {
    CHECK(cuda::matvec_supports(type)) << type_name(type);
    const auto w = random_matrix(type, rows, cols, rng);
    const auto dw = upload(w);
    const cuda::DeviceMatrix m = device_matrix(type, dw, rows, cols);
    for (const int64_t n : {1, 2, 3, 8, 13}) {
      const auto x = random_floats(static_cast<size_t>(n * cols), 2.0f, rng);
      const auto dx = upload(x);
      cuda::DeviceBuffer blocks(static_cast<size_t>(n * cols / 32) * sizeof(cuda::ActivationBlock), "blocks");
      cuda::DeviceBuffer y(static_cast<size_t>(n * rows) * sizeof(float), "y");
      cuda::MatvecInput input{dx.as<float>(), nullptr};
      if (!cuda::is_float_type(type)) {
        cuda::quantize_activations(dx.as<float>(), n, cols, type, blocks.as<cuda::ActivationBlock>(), stream.handle());
        input.blocks = blocks.as<cuda::ActivationBlock>();
      }
      cuda::matvec(m, input, n, y.as<float>(), false, stream.handle());
      const auto got = download<float>(y, static_cast<size_t>(n * rows), stream);
      const auto want = cpu_matvec(type, w, rows, cols, x, n);
      const double error = relative_error(got, want);
      std::printf("  matvec %s n %lld: relative error %.3g\n", type_name(type), static_cast<long long>(n), error);
      CHECK(error < 2e-5) << type_name(type) << " n " << n << ": relative error " << error;
    }
  }
}

TEST(cuda_gated_matvec_matches_cpu) {
  if (!device_ready("cuda_gated_matvec_matches_cpu")) return;
  std::mt19937 rng(17);
  const int64_t rows = 45, cols = 512, n = 6;
  const cuda::Stream stream;
  for (const uint32_t type : kQuantizedTypes) {
    const auto gate = random_matrix(type, rows, cols, rng), up = random_matrix(type, rows, cols, rng);
    const auto dg = upload(gate), du = upload(up);
    const auto x = random_floats(static_cast<size_t>(n * cols), 2.0f, rng);
    const auto dx = upload(x);
    cuda::DeviceBuffer blocks(static_cast<size_t>(n * cols / 32) * sizeof(cuda::ActivationBlock), "blocks");
    cuda::DeviceBuffer y(static_cast<size_t>(n * rows) * sizeof(float), "y");
    cuda::quantize_activations(dx.as<float>(), n, cols, type, blocks.as<cuda::ActivationBlock>(), stream.handle());
    cuda::gated_matvec(device_matrix(type, dg, rows, cols), device_matrix(type, du, rows, cols),
                       blocks.as<cuda::ActivationBlock>(), n, y.as<float>(), stream.handle());
    const auto got = download<float>(y, static_cast<size_t>(n * rows), stream);
    const auto g = cpu_matvec(type, gate, rows, cols, x, n), u = cpu_matvec(type, up, rows, cols, x, n);
    std::vector<float> want(g.size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    const double error = relative_error(got, want);
    std::printf("  gated matvec %s: relative error %.3g\n", type_name(type), error);
    CHECK(error < 5e-5) << type_name(type) << ": relative error " << error;
  }
}

// Expert stacks of every type: rows routed to `used` of `experts` experts each, grouped by expert
// in chunks of two rows (the last chunk of an expert short), through the fused gate/up product
// and the down product, against the CPU's dots of each routed row with its expert's matrices.
TEST(cuda_expert_matvec_matches_cpu) {
  if (!device_ready("cuda_expert_matvec_matches_cpu")) return;
  std::mt19937 rng(19);
  const int64_t experts = 5, used = 2, n = 7, width = 512, hidden = 256;
  const int per_chunk = 2;
  const cuda::Stream stream;
  std::vector<int32_t> chosen(static_cast<size_t>(n * used));
  for (int64_t i = 0; i < n; ++i) {
    const auto first = static_cast<int32_t>(rng() % experts);
    chosen[i * used] = first;
    chosen[i * used + 1] = static_cast<int32_t>((first + 1 + rng() % (experts - 1)) % experts);
  }
  std::vector<int32_t> order, chunks;
  for (int32_t e = 0; e < experts; ++e) {
    const auto begin = static_cast<int32_t>(order.size());
    for (int32_t s = 0; s < n * used; ++s) {
      if (chosen[s] == e) order.push_back(s);
    }
    for (int32_t first = begin; first < static_cast<int32_t>(order.size()); first += per_chunk) {
      chunks.insert(chunks.end(), {e, first, std::min(per_chunk, static_cast<int32_t>(order.size()) - first)});
    }
  }
  const std::vector<int32_t> chunk_count = {static_cast<int32_t>(chunks.size() / 3)};
  const auto d_order = upload(order), d_chunks = upload(chunks), d_count = upload(chunk_count);
  cuda::ExpertGroups groups;
  groups.order = d_order.as<int32_t>();
  groups.chunks = d_chunks.as<int32_t>();
  groups.chunk_count = d_count.as<int32_t>();
  groups.max_chunks = chunk_count[0];
  groups.tokens_per_chunk = per_chunk;
  const auto stack = [&](uint32_t type, int64_t rows, int64_t cols, const cuda::DeviceBuffer& data) {
    cuda::DeviceMatrix m = device_matrix(type, data, rows, cols);
    m.count = experts;
    return m;
  };
  for (const uint32_t type : gpu_types()) {
    const auto gate = random_matrix(type, experts * hidden, width, rng);
    const auto up = random_matrix(type, experts * hidden, width, rng);
    const auto down = random_matrix(type, experts * width, hidden, rng);
    const auto dg = upload(gate), du = upload(up), dd = upload(down);
    const auto x = random_floats(static_cast<size_t>(n * width), 2.0f, rng);
    const auto dx = upload(x);
    const bool floats = cuda::is_float_type(type);
    cuda::DeviceBuffer blocks(
        static_cast<size_t>(n * used * std::max(width, hidden) / 32) * sizeof(cuda::ActivationBlock), "blocks");
    cuda::DeviceBuffer h(static_cast<size_t>(n * used * hidden) * sizeof(float), "hidden");
    cuda::DeviceBuffer out(static_cast<size_t>(n * used * width) * sizeof(float), "out");
    // Float stacks read the float rows, quantized ones the rows' blocks.
    const auto input = [&](const cuda::DeviceBuffer& rows, int64_t count, int64_t cols) {
      if (floats) return cuda::MatvecInput{rows.as<float>(), nullptr};
      cuda::quantize_activations(rows.as<float>(), count, cols, type, blocks.as<cuda::ActivationBlock>(),
                                 stream.handle());
      return cuda::MatvecInput{rows.as<float>(), blocks.as<cuda::ActivationBlock>()};
    };
    cuda::expert_gated_matvec(stack(type, hidden, width, dg), stack(type, hidden, width, du), input(dx, n, width), used,
                              groups, h.as<float>(), stream.handle());
    const auto got_hidden = download<float>(h, static_cast<size_t>(n * used * hidden), stream);
    // The down product reads the GPU's hidden rows (the CPU's too, below), so each half is checked on its own.
    cuda::expert_matvec(stack(type, width, hidden, dd), input(h, n * used, hidden), groups, out.as<float>(),
                        stream.handle());
    const auto got_out = download<float>(out, static_cast<size_t>(n * used * width), stream);

    const size_t gate_bytes = row_bytes(type, width) * hidden, down_bytes = row_bytes(type, hidden) * width;
    std::vector<float> want_hidden(got_hidden.size()), want_out(got_out.size());
    for (int64_t s = 0; s < n * used; ++s) {
      const auto e = static_cast<size_t>(chosen[s]);
      const std::vector<float> row(x.begin() + (s / used) * width, x.begin() + (s / used + 1) * width);
      const auto slice = [](const std::vector<uint8_t>& m, size_t bytes, size_t e) {
        return std::vector<uint8_t>(m.begin() + e * bytes, m.begin() + (e + 1) * bytes);
      };
      const auto g = cpu_matvec(type, slice(gate, gate_bytes, e), hidden, width, row, 1);
      const auto u = cpu_matvec(type, slice(up, gate_bytes, e), hidden, width, row, 1);
      for (int64_t r = 0; r < hidden; ++r) want_hidden[s * hidden + r] = g[r] / (1.0f + std::exp(-g[r])) * u[r];
      const std::vector<float> h_row(got_hidden.begin() + s * hidden, got_hidden.begin() + (s + 1) * hidden);
      const auto o = cpu_matvec(type, slice(down, down_bytes, e), width, hidden, h_row, 1);
      std::copy(o.begin(), o.end(), want_out.begin() + s * width);
    }
    const double hidden_error = relative_error(got_hidden, want_hidden), out_error = relative_error(got_out, want_out);
    std::printf("  expert matvec %s: gated relative error %.3g, down %.3g\n", type_name(type), hidden_error, out_error);
    CHECK(hidden_error < 5e-5 && out_error < 2e-5)
        << type_name(type) << ": gated relative error " << hidden_error << ", down " << out_error;
  }
}

// The GPU serves exactly the weight types the CPU has kernels for, so a model that loads runs on either.
TEST(cuda_types_match_cpu_types) {
  const auto cpu = quant::cpu_weight_types();
  std::vector<uint32_t> gpu = gpu_types();
  std::sort(gpu.begin(), gpu.end());
  CHECK(std::vector<uint32_t>(cpu.begin(), cpu.end()) == gpu) << cpu.size() << " CPU types, " << gpu.size() << " GPU";
  for (const uint32_t type : gpu) {
    CHECK(cuda::matvec_supports(type) && cuda::embedding_supports(type)) << type_name(type);
  }
}

#else

TEST(cuda_matvec_skipped) { std::printf("skip cuda_matvec tests: this build has no CUDA\n"); }

#endif
