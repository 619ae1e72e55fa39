// The GPU's quantized kernels against the CPU path on random inputs: the activation
// quantizers (the same codes and scales), the embedding lookup (the same floats), and the
// mat-vec products of every GPU weight type (plain, gated, dense batches of 1 to 13 rows, and
// expert stacks over routed groups) within float rounding of the CPU's dots. Skips, saying
// why, where there is no CUDA device.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "tests/check.h"

#ifdef BLOOMERY_CUDA

#include "cpu/swiglu.h"
#include "cuda/ops.h"
#include "tests/cuda_test_util.h"

using namespace bloomery;
using namespace bloomery::tests::gpu;

TEST(cuda_quantize_activations_match_cpu) {
  if (!device_ready("cuda_quantize_activations_match_cpu")) return;
  std::mt19937 rng(7);
  const int64_t n = 5;
  const cuda::Stream stream;
  // Rows of whole super-blocks, and (Q8_0, Q8_1) rows of 5 blocks, which a warp's 256 values straddle.
  for (const int64_t cols : {768, 160}) {
    auto x = random_floats(static_cast<size_t>(n * cols), 3.0f, rng);
    x[100] = 0.0f;
    for (int64_t j = 256; j < std::min<int64_t>(512, n * cols); ++j) x[j] = 0.0f;  // an all-zero super-block
    const auto dx = upload(x);
    cuda::DeviceBuffer blocks(static_cast<size_t>(n * cols / 32) * sizeof(cuda::ActivationBlock), "blocks");
    // Weight types reading Q8_0, Q8_1 and Q8_K activations.
    for (const uint32_t type : {quant::BlockQ8_0::kType, quant::BlockQ4_1::kType, quant::BlockQ4_K::kType}) {
      if (cols % 256 != 0 && type == quant::BlockQ4_K::kType) continue;
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
            // Q8_1 packs its scale and sum as halves: compared bit for bit.
            const auto* y = reinterpret_cast<const quant::BlockQ8_1*>(a.data()) + b;
            scale_diffs += (g.d_and_sum & 0xffff) != y->d;
            sum_diffs += (g.d_and_sum >> 16) != y->s;
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
          << type_name(type) << " cols " << cols << ": " << code_diffs << " codes, " << scale_diffs << " scales, "
          << sum_diffs << " sums differ";
    }
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

// Rows not a multiple of a block's warps; widths of one round of a lane's loads (half a warp
// per row) and of several with a partial last one (for the types of 32-value blocks, one of 25
// blocks, which the kernels' warps of 256 values straddle when they quantize a row; for the
// float types, one not a multiple of 4). A batch's first row sums exactly as that row alone
// (what batched decoding relies on). MXFP4's rows of up to 8,192 weights are staged in shared
// memory, rows of 25 blocks at odd addresses; 8,224 is also run for MXFP4, past that bound.
TEST(cuda_matvec_matches_cpu_dot) {
  if (!device_ready("cuda_matvec_matches_cpu_dot")) return;
  std::mt19937 rng(13);
  const int64_t rows = 67;
  const cuda::Stream stream;
  for (const uint32_t type : kGpuTypes) {
    for (const int64_t cols : {768, 4352, 800, 771, 8224}) {
      if (cols % quant::ggml_type(type)->block_elements != 0) continue;
      if (cols == 8224 && type != quant::BlockMXFP4::kType) continue;
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
          cuda::quantize_activations(dx.as<float>(), n, cols, type, blocks.as<cuda::ActivationBlock>(),
                                     stream.handle());
          input.blocks = blocks.as<cuda::ActivationBlock>();
        }
        cuda::matvec(m, input, n, y.as<float>(), false, stream.handle());
        const auto got = download<float>(y, static_cast<size_t>(n * rows), stream);
        const auto want = cpu_matvec(type, w, rows, cols, x, n);
        const double error = relative_error(got, want);
        std::printf("  matvec %s cols %lld n %lld: relative error %.3g\n", type_name(type),
                    static_cast<long long>(cols), static_cast<long long>(n), error);
        CHECK(error < 2e-5) << type_name(type) << " cols " << cols << " n " << n << ": relative error " << error;
        if (n > 1) {
          cuda::DeviceBuffer one(static_cast<size_t>(rows) * sizeof(float), "one row");
          cuda::matvec(m, input, 1, one.as<float>(), false, stream.handle());
          const auto alone = download<float>(one, static_cast<size_t>(rows), stream);
          const std::vector<float> first(got.begin(), got.begin() + rows);
          CHECK(mismatches(first, alone) == 0) << type_name(type) << " cols " << cols << " n " << n << ": "
                                               << mismatches(first, alone) << " sums of the first row differ alone";
        }
        if (input.blocks && cuda::quantizes_input(n, cols)) {
          // The same product from the float row, quantized by the kernel: the very same sums.
          cuda::matvec(m, {dx.as<float>(), nullptr}, n, y.as<float>(), false, stream.handle());
          const auto from_floats = download<float>(y, static_cast<size_t>(n * rows), stream);
          CHECK(mismatches(from_floats, got) == 0)
              << type_name(type) << " cols " << cols << ": " << mismatches(from_floats, got)
              << " sums differ when the kernel quantizes its input";
        }
      }
    }
  }
}

// Several matrices of one input in shared launches (two Q4_K of row counts not multiples of a
// block's warps, one Q6_K, one F16; one product accumulating): each output as matvec alone gives it.
TEST(cuda_matvecs_equal_single_products) {
  if (!device_ready("cuda_matvecs_equal_single_products")) return;
  std::mt19937 rng(29);
  const int64_t cols = 768;
  const cuda::Stream stream;
  struct Spec {
    uint32_t type;
    int64_t rows;
    bool accumulate;
  };
  const Spec specs[] = {{quant::BlockQ4_K::kType, 67, false},
                        {quant::BlockQ6_K::kType, 33, false},
                        {quant::BlockQ4_K::kType, 5, true},
                        {1, 9, false}};
  std::vector<cuda::DeviceBuffer> weights;
  std::vector<cuda::DeviceMatrix> matrices;
  for (const Spec& spec : specs) {
    weights.push_back(upload(random_matrix(spec.type, spec.rows, cols, rng)));
    matrices.push_back(device_matrix(spec.type, weights.back(), spec.rows, cols));
  }
  for (const int64_t n : {1, 3, 9}) {
    const auto x = random_floats(static_cast<size_t>(n * cols), 2.0f, rng);
    const auto dx = upload(x);
    cuda::DeviceBuffer blocks(static_cast<size_t>(n * cols / 32) * sizeof(cuda::ActivationBlock), "blocks");
    cuda::quantize_activations(dx.as<float>(), n, cols, quant::BlockQ4_K::kType, blocks.as<cuda::ActivationBlock>(),
                               stream.handle());
    const cuda::MatvecInput input{dx.as<float>(), blocks.as<cuda::ActivationBlock>()};
    std::vector<std::vector<float>> start;
    std::vector<cuda::DeviceBuffer> together, alone;
    std::vector<cuda::MatvecProduct> products;
    for (size_t i = 0; i < matrices.size(); ++i) {
      start.push_back(random_floats(static_cast<size_t>(n * specs[i].rows), 1.0f, rng));
      together.push_back(upload(start.back()));
      alone.push_back(upload(start.back()));
      products.push_back({&matrices[i], together.back().as<float>(), specs[i].accumulate});
      cuda::matvec(matrices[i], input, n, alone.back().as<float>(), specs[i].accumulate, stream.handle());
    }
    cuda::matvecs(products, input, n, stream.handle());
    for (size_t i = 0; i < matrices.size(); ++i) {
      const size_t count = static_cast<size_t>(n * specs[i].rows);
      const auto got = download<float>(together[i], count, stream), want = download<float>(alone[i], count, stream);
      CHECK(mismatches(got, want) == 0) << "n " << n << ", product " << i << ": " << mismatches(got, want) << " of "
                                        << count << " outputs differ from matvec's";
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

// The GPU serves exactly the weight types the CPU has kernels for, so a model that loads runs on either.
TEST(cuda_types_match_cpu_types) {
  const auto cpu = quant::cpu_weight_types();
  std::vector<uint32_t> gpu(kGpuTypes.begin(), kGpuTypes.end());
  std::sort(gpu.begin(), gpu.end());
  CHECK(std::vector<uint32_t>(cpu.begin(), cpu.end()) == gpu) << cpu.size() << " CPU types, " << gpu.size() << " GPU";
  for (const uint32_t type : gpu) {
    CHECK(cuda::matvec_supports(type) && cuda::embedding_supports(type)) << type_name(type);
  }
}

// A one-row product quantizes its row in its blocks while it is small (a decode step's q, k and v
// of a 2,048-wide model), and takes a quantize launch's blocks where its blocks' reads of the float
// row would pass its weights' (GLM-5's output projection of 16,384 columns, eight experts' gate
// and up of 6,144); float weights read floats either way.
TEST(cuda_one_row_products_quantize_while_small) {
  const uint32_t q4k = quant::BlockQ4_K::kType;
  CHECK(cuda::quantizes_one_row(q4k, 2048, 5120));
  CHECK(cuda::quantizes_one_row(q4k, 4096, 2048));
  CHECK(!cuda::quantizes_one_row(q4k, 16384, 6144));
  CHECK(!cuda::quantizes_one_row(q4k, 6144, 8 * 2048));
  for (const uint32_t type : kFloatTypes) CHECK(!cuda::quantizes_one_row(type, 2048, 16)) << type_name(type);
  // Past the shared memory a block's row takes, never.
  CHECK(!cuda::quantizes_one_row(q4k, 65536, 4));
}
// The expert kernels over route_and_group's groups (a decode step's single row, and a batch):
// each routed slot's SwiGLU of its expert's gate and up, then its expert's down product of the
// GPU's hidden row, against the CPU's dots of the same expert's rows; for stacks of every GPU
// type (float ones in float_experts.cu), and for gate/up and down of different types.
TEST(cuda_expert_matvec_matches_cpu) {
  if (!device_ready("cuda_expert_matvec_matches_cpu")) return;
  std::mt19937 rng(19);
  const cuda::Stream stream;
  const int64_t experts = 6, used = 3, width = 512, ff = 256;
  std::vector<std::pair<uint32_t, uint32_t>> pairs = {
      {quant::BlockQ4_K::kType, quant::BlockQ6_K::kType},     {quant::BlockQ4_K::kType, quant::BlockMXFP4::kType},
      {quant::BlockQ5_1::kType, quant::BlockIQ4_XS::kType},   {1, quant::BlockQ4_1::kType},
      {quant::BlockIQ1_S::kType, quant::BlockIQ2_XXS::kType}, {quant::BlockIQ2_XXS::kType, quant::BlockIQ3_S::kType}};
  for (const uint32_t type : kGpuTypes) pairs.emplace_back(type, type);
  for (const auto& [up_type, down_type] : pairs) {
    const auto gate = random_matrix(up_type, experts * ff, width, rng),
               up = random_matrix(up_type, experts * ff, width, rng);
    const auto down = random_matrix(down_type, experts * width, ff, rng);
    const auto dg = upload(gate), du = upload(up), dd = upload(down);
    cuda::DeviceMatrix mg = device_matrix(up_type, dg, ff, width), mu = device_matrix(up_type, du, ff, width);
    cuda::DeviceMatrix md = device_matrix(down_type, dd, width, ff);
    mg.count = mu.count = md.count = experts;
    const auto slice = [](const std::vector<uint8_t>& stack, size_t bytes, int32_t e) {
      return std::vector<uint8_t>(stack.begin() + e * bytes, stack.begin() + (e + 1) * bytes);
    };
    std::vector<int32_t> identity(static_cast<size_t>(experts));
    for (int64_t e = 0; e < experts; ++e) identity[e] = static_cast<int32_t>(e);
    const auto slots = upload(identity);
    for (const int64_t n : {1, 4}) {
      const auto logits = random_floats(static_cast<size_t>(n * experts), 4.0f, rng);
      const auto x = random_floats(static_cast<size_t>(n * width), 2.0f, rng);
      const auto dl = upload(logits), dx = upload(x);
      cuda::DeviceBuffer chosen(static_cast<size_t>(n * used) * sizeof(int32_t), "chosen");
      cuda::DeviceBuffer weights(static_cast<size_t>(n * used) * sizeof(float), "weights");
      const DeviceGroups grouping(n, experts, used, cuda::tokens_per_expert_chunk(n));
      cuda::route_and_group(dl.as<float>(), n, experts, used, {.normalize = true}, slots.as<int32_t>(),
                            cuda::tokens_per_expert_chunk(n), chosen.as<int32_t>(), weights.as<float>(), nullptr,
                            grouping.order.as<int32_t>(), grouping.chunks.as<int32_t>(),
                            grouping.chunk_count.as<int32_t>(), stream.handle());
      const cuda::ExpertGroups& groups = grouping.groups;
      cuda::DeviceBuffer x_blocks(static_cast<size_t>(n * width / 32) * sizeof(cuda::ActivationBlock), "x blocks");
      cuda::DeviceBuffer hidden(static_cast<size_t>(n * used * ff) * sizeof(float), "hidden");
      cuda::DeviceBuffer h_blocks(static_cast<size_t>(n * used * ff / 32) * sizeof(cuda::ActivationBlock), "blocks");
      cuda::DeviceBuffer out(static_cast<size_t>(n * used * width) * sizeof(float), "out");
      // Float stacks read the float rows, quantized ones the rows' blocks.
      cuda::expert_gated_matvec(mg, mu, product_input(up_type, dx, n, width, x_blocks, stream), used, groups,
                                hidden.as<float>(), stream.handle());
      cuda::expert_matvec(md, product_input(down_type, hidden, n * used, ff, h_blocks, stream), groups, out.as<float>(),
                          stream.handle());
      const auto routed = download<int32_t>(chosen, static_cast<size_t>(n * used), stream);
      const auto got_hidden = download<float>(hidden, static_cast<size_t>(n * used * ff), stream);
      const auto got_out = download<float>(out, static_cast<size_t>(n * used * width), stream);
      std::vector<float> want_hidden(got_hidden.size()), want_out(got_out.size());
      for (int64_t s = 0; s < n * used; ++s) {
        const int32_t e = routed[s];
        const std::vector<float> row(x.begin() + (s / used) * width, x.begin() + (s / used + 1) * width);
        const auto g = cpu_matvec(up_type, slice(gate, mg.matrix_bytes, e), ff, width, row, 1);
        const auto u = cpu_matvec(up_type, slice(up, mu.matrix_bytes, e), ff, width, row, 1);
        for (int64_t j = 0; j < ff; ++j) want_hidden[s * ff + j] = g[j] / (1.0f + std::exp(-g[j])) * u[j];
        const std::vector<float> h(got_hidden.begin() + s * ff, got_hidden.begin() + (s + 1) * ff);
        const auto d = cpu_matvec(down_type, slice(down, md.matrix_bytes, e), width, ff, h, 1);
        std::copy(d.begin(), d.end(), want_out.begin() + s * width);
      }
      const double hidden_error = relative_error(got_hidden, want_hidden),
                   out_error = relative_error(got_out, want_out);
      std::printf("  expert matvec %s/%s n %lld: relative error %.3g (gate/up), %.3g (down)\n", type_name(up_type),
                  type_name(down_type), static_cast<long long>(n), hidden_error, out_error);
      CHECK(hidden_error < 5e-5) << type_name(up_type) << " n " << n << ": gate/up relative error " << hidden_error;
      CHECK(out_error < 2e-5) << type_name(down_type) << " n " << n << ": down relative error " << out_error;
      if (!cuda::is_float_type(down_type) && cuda::quantizes_input(groups.tokens_per_chunk, ff)) {
        // A decode step's down product takes the hidden rows as floats: the very same sums.
        cuda::expert_matvec(md, {hidden.as<float>(), nullptr}, groups, out.as<float>(), stream.handle());
        const auto from_floats = download<float>(out, got_out.size(), stream);
        CHECK(mismatches(from_floats, got_out) == 0)
            << type_name(down_type) << " n " << n << ": " << mismatches(from_floats, got_out)
            << " down sums differ when the kernel quantizes its input";
      }
    }
  }
}

// gpt-oss's experts (ExpertEpilogue): each product's per-expert bias, found through the slot's
// expert although the stack holds the experts in another order (slot = experts - 1 - expert, as
// residency may seat them), and the clamped SwiGLU, against the CPU's dots, add_bias and
// clamped_swiglu; DeepSeek-V4's limited SwiGLU against limited_swiglu (the same biases, which its
// experts lack, checked once); in the matvec (a decode step's row and a batch), the float stacks
// and the tiles.
TEST(cuda_expert_epilogue_matches_cpu) {
  if (!device_ready("cuda_expert_epilogue_matches_cpu")) return;
  std::mt19937 rng(23);
  const cuda::Stream stream;
  const int64_t experts = 8, used = 4, width = 256, ff = 256;
  const float alpha = 1.702f, limit = 7.0f;
  std::vector<int32_t> slot_of_expert(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e) slot_of_expert[e] = static_cast<int32_t>(experts - 1 - e);
  const auto slots = upload(slot_of_expert);
  const auto gate_bias = random_floats(static_cast<size_t>(experts * ff), 2.0f, rng);
  const auto up_bias = random_floats(static_cast<size_t>(experts * ff), 2.0f, rng);
  const auto down_bias = random_floats(static_cast<size_t>(experts * width), 2.0f, rng);
  const auto dgb = upload(gate_bias), dub = upload(up_bias), ddb = upload(down_bias);
  for (const auto kind : {cuda::GatedActivation::Kind::kClamped, cuda::GatedActivation::Kind::kLimited})
    for (const uint32_t type : {quant::BlockMXFP4::kType, quant::BlockQ8_0::kType, uint32_t{1}}) {
      const bool limited = kind == cuda::GatedActivation::Kind::kLimited;
      const auto gate = random_matrix(type, experts * ff, width, rng),
                 up = random_matrix(type, experts * ff, width, rng);
      const auto down = random_matrix(type, experts * width, ff, rng);
      const auto dg = upload(gate), du = upload(up), dd = upload(down);
      cuda::DeviceMatrix mg = device_matrix(type, dg, ff, width), mu = device_matrix(type, du, ff, width);
      cuda::DeviceMatrix md = device_matrix(type, dd, width, ff);
      mg.count = mu.count = md.count = experts;
      // Expert e's matrix sits at slot experts - 1 - e of its stack.
      const auto expert_matrix = [&](const std::vector<uint8_t>& stack, size_t bytes, int32_t e) {
        const int32_t slot = slot_of_expert[e];
        return std::vector<uint8_t>(stack.begin() + slot * bytes, stack.begin() + (slot + 1) * bytes);
      };
      std::vector<int64_t> batches = {1, 5};
      if (cuda::mmq_serves(type, cuda::kMmqMinRows)) batches.push_back(cuda::kMmqMinRows);
      for (const int64_t n : batches) {
        const bool tiled = n >= cuda::kMmqMinRows;
        std::vector<int32_t> routed(static_cast<size_t>(n * used));
        for (int64_t i = 0; i < n; ++i) {
          std::vector<int32_t> all(static_cast<size_t>(experts));
          for (int64_t e = 0; e < experts; ++e) all[e] = static_cast<int32_t>(e);
          std::shuffle(all.begin(), all.end(), rng);
          std::copy_n(all.begin(), used, routed.begin() + i * used);
        }
        const auto chosen = upload(routed);
        const DeviceGroups grouping(n, experts, used, tiled ? cuda::kMmqTileTokens : cuda::tokens_per_expert_chunk(n));
        grouping.group(chosen.as<int32_t>(), n, experts, used, slots.as<int32_t>(), stream);
        const cuda::ExpertEpilogue epilogue{
            chosen.as<int32_t>(), dgb.as<float>(), dub.as<float>(), ddb.as<float>(), {kind, alpha, limit}};
        const auto x = random_floats(static_cast<size_t>(n * width), 2.0f, rng);
        const auto dx = upload(x);
        cuda::DeviceBuffer x_blocks(static_cast<size_t>(n * width / 32) * sizeof(cuda::ActivationBlock), "x blocks");
        cuda::DeviceBuffer hidden(static_cast<size_t>(n * used * ff) * sizeof(float), "hidden");
        cuda::DeviceBuffer h_blocks(static_cast<size_t>(n * used * ff / 32) * sizeof(cuda::ActivationBlock), "blocks");
        cuda::DeviceBuffer out(static_cast<size_t>(n * used * width) * sizeof(float), "out");
        const cuda::MatvecInput x_in = product_input(type, dx, n, width, x_blocks, stream);
        if (tiled) {
          cuda::expert_gated_mmq(mg, mu, x_in.blocks, used, grouping.groups, hidden.as<float>(), stream.handle(),
                                 epilogue);
        } else {
          cuda::expert_gated_matvec(mg, mu, x_in, used, grouping.groups, hidden.as<float>(), stream.handle(), epilogue);
        }
        const cuda::MatvecInput h_in = product_input(type, hidden, n * used, ff, h_blocks, stream);
        if (tiled) {
          cuda::expert_mmq(md, h_in.blocks, grouping.groups, out.as<float>(), stream.handle(), epilogue);
        } else {
          cuda::expert_matvec(md, h_in, grouping.groups, out.as<float>(), stream.handle(), epilogue);
        }
        const auto got_hidden = download<float>(hidden, static_cast<size_t>(n * used * ff), stream);
        const auto got_out = download<float>(out, static_cast<size_t>(n * used * width), stream);
        std::vector<float> want_hidden(got_hidden.size()), want_out(got_out.size());
        for (int64_t s = 0; s < n * used; ++s) {
          const int32_t e = routed[s];
          const std::vector<float> row(x.begin() + (s / used) * width, x.begin() + (s / used + 1) * width);
          auto g = cpu_matvec(type, expert_matrix(gate, mg.matrix_bytes, e), ff, width, row, 1);
          auto u = cpu_matvec(type, expert_matrix(up, mu.matrix_bytes, e), ff, width, row, 1);
          for (int64_t j = 0; j < ff; ++j) {
            g[j] += gate_bias[e * ff + j];
            u[j] += up_bias[e * ff + j];
          }
          if (limited) {
            cpu::limited_swiglu(g.data(), u.data(), ff, limit, want_hidden.data() + s * ff);
          } else {
            cpu::clamped_swiglu(g.data(), u.data(), ff, alpha, limit, want_hidden.data() + s * ff);
          }
          const std::vector<float> h(got_hidden.begin() + s * ff, got_hidden.begin() + (s + 1) * ff);
          const auto d = cpu_matvec(type, expert_matrix(down, md.matrix_bytes, e), width, ff, h, 1);
          for (int64_t j = 0; j < width; ++j) want_out[s * width + j] = d[j] + down_bias[e * width + j];
        }
        const double hidden_error = relative_error(got_hidden, want_hidden),
                     out_error = relative_error(got_out, want_out);
        std::printf("  expert epilogue (%s) %s n %lld%s: relative error %.3g (gate/up), %.3g (down)\n",
                    limited ? "limited" : "clamped", type_name(type), static_cast<long long>(n),
                    tiled ? " (tiles)" : "", hidden_error, out_error);
        CHECK(hidden_error < 5e-5) << type_name(type) << " n " << n << ": gate/up relative error " << hidden_error;
        CHECK(out_error < 2e-5) << type_name(type) << " n " << n << ": down relative error " << out_error;
      }
    }
}

#else

TEST(cuda_matvec_skipped) { std::printf("skip cuda_matvec tests: this build has no CUDA\n"); }

#endif
