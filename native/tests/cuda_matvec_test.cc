// The GPU's quantized kernels against the CPU path on random inputs: the activation
// quantizers (the same codes and scales), the embedding lookup (the same floats), and the
// mat-vec products of every GPU weight type (plain, gated, dense batches of 1 to 13 rows)
// within float rounding of the CPU's dots. Skips, saying why, where there is no CUDA device.
#include <cmath>
#include <cstdio>
#include <vector>

#include "tests/check.h"

#ifdef BLOOMERY_CUDA

#include "cuda/ops.h"
#include "tests/cuda_test_util.h"

using namespace bloomery;
using namespace bloomery::tests::gpu;

namespace {

constexpr uint32_t kGpuTypes[] = {0, 1, quant::BlockQ8_0::kType, quant::BlockQ4_K::kType, quant::BlockQ6_K::kType};

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
  for (const uint32_t type : {quant::BlockQ8_0::kType, quant::BlockQ4_K::kType}) {
    cuda::quantize_activations(dx.as<float>(), n, cols, type, blocks.as<cuda::ActivationBlock>(), stream.handle());
    const auto got = download<cuda::ActivationBlock>(blocks, static_cast<size_t>(n * cols / 32), stream);
    const quant::QuantKernels& k = cpu_kernels(type);
    std::vector<uint8_t> a(row_bytes(k.activation_type, cols));
    size_t code_diffs = 0, scale_diffs = 0;
    for (int64_t i = 0; i < n; ++i) {
      k.quantize_activations(x.data() + i * cols, a.data(), cols);
      for (int64_t b = 0; b < cols / 32; ++b) {
        const cuda::ActivationBlock& g = got[i * cols / 32 + b];
        const int8_t* qs;
        float d;
        if (type == quant::BlockQ8_0::kType) {
          const auto* y = reinterpret_cast<const quant::BlockQ8_0*>(a.data()) + b;
          qs = y->qs;
          d = quant::fp16_to_fp32(y->d);
        } else {
          const auto* y = reinterpret_cast<const quant::BlockQ8_K*>(a.data()) + b / 8;
          qs = y->qs + 32 * (b % 8);
          d = y->d;
        }
        scale_diffs += g.d != d;
        for (int j = 0; j < 32; ++j) code_diffs += g.qs[j] != qs[j];
      }
    }
    CHECK(code_diffs == 0 && scale_diffs == 0)
        << "type " << type << ": " << code_diffs << " codes, " << scale_diffs << " scales differ";
  }
}

TEST(cuda_embed_matches_cpu_dequantize) {
  if (!device_ready("cuda_embed_matches_cpu_dequantize")) return;
  std::mt19937 rng(11);
  const int64_t vocab = 37, cols = 512;
  const std::vector<int32_t> tokens = {0, 36, 5, 5, 17, 30};
  const cuda::Stream stream;
  const auto dt = upload(tokens);
  for (const uint32_t type : kGpuTypes) {
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
    CHECK(mismatches(got, want) == 0) << "type " << type << ": " << mismatches(got, want) << " of " << want.size()
                                      << " floats differ, relative error " << relative_error(got, want);
  }
}

TEST(cuda_matvec_matches_cpu_dot) {
  if (!device_ready("cuda_matvec_matches_cpu_dot")) return;
  std::mt19937 rng(13);
  const int64_t rows = 67, cols = 768;
  const cuda::Stream stream;
  for (const uint32_t type : kGpuTypes) {
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
      std::printf("  matvec type %u n %lld: relative error %.3g\n", type, static_cast<long long>(n), error);
      CHECK(error < 2e-5) << "type " << type << " n " << n << ": relative error " << error;
    }
  }
}

TEST(cuda_gated_matvec_matches_cpu) {
  if (!device_ready("cuda_gated_matvec_matches_cpu")) return;
  std::mt19937 rng(17);
  const int64_t rows = 45, cols = 512, n = 6;
  const cuda::Stream stream;
  for (const uint32_t type : {quant::BlockQ8_0::kType, quant::BlockQ4_K::kType, quant::BlockQ6_K::kType}) {
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
    std::printf("  gated matvec type %u: relative error %.3g\n", type, error);
    CHECK(error < 5e-5) << "type " << type << ": relative error " << error;
  }
}

#else

TEST(cuda_matvec_skipped) { std::printf("skip cuda_matvec tests: this build has no CUDA\n"); }

#endif
