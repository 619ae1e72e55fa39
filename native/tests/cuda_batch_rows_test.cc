// A row's result on the GPU does not depend on the rows that share its launch: every mat-vec
// kernel (plain, gated, and the expert kernels over rows grouped by expert) gives each row of
// a batch the floats it gives that row alone, bit for bit. The batched pass relies on it
// (engine/gpu_forward.h): sequences decoded together give the tokens each gives alone.
// Skips, saying why, where there is no CUDA device.
#include <cstdio>
#include <vector>

#include "tests/check.h"

#ifdef BLOOMERY_CUDA

#include "cuda/ops.h"
#include "tests/cuda_test_util.h"

using namespace bloomery;
using namespace bloomery::tests::gpu;

namespace {

constexpr int64_t kRows = 13;                                       // rows of activations the batches are cut from
constexpr int64_t kBatches[][2] = {{0, 2}, {0, 3}, {0, 4}, {0, 5},  // {first row, rows}
                                   {0, 8}, {3, 8}, {0, 9}, {0, 13}, {11, 2}};

using Blocks = cuda::ActivationBlock;

// kRows rows of `cols` random floats, as floats and quantized for `type`'s kernels.
struct Activations {
  cuda::DeviceBuffer floats, blocks;
  int64_t cols;

  Activations(uint32_t type, int64_t cols, std::mt19937& rng, const cuda::Stream& stream)
      : floats(upload(random_floats(static_cast<size_t>(kRows * cols), 2.0f, rng))),
        blocks(static_cast<size_t>(kRows * cols / 32) * sizeof(Blocks), "blocks"),
        cols(cols) {
    if (!cuda::is_float_type(type)) {
      cuda::quantize_activations(floats.as<float>(), kRows, cols, type, blocks.as<Blocks>(), stream.handle());
    }
  }
  cuda::MatvecInput from(int64_t row) const {
    return {floats.as<float>() + row * cols, blocks.as<Blocks>() + row * cols / 32};
  }
};

// Runs `product(first, n, out)` for each row alone, then for each batch of kBatches, and counts
// the floats of every batch (`width` per row) that differ from the rows' own.
template <typename Product>
void expect_rows_alone(const char* what, uint32_t type, int64_t width, const cuda::Stream& stream, Product product) {
  cuda::DeviceBuffer y(static_cast<size_t>(kRows * width) * sizeof(float), "y");
  for (int64_t row = 0; row < kRows; ++row) product(row, 1, y.as<float>() + row * width);
  const auto alone = download<float>(y, static_cast<size_t>(kRows * width), stream);
  for (const auto& [first, n] : kBatches) {
    cuda::DeviceBuffer batch(static_cast<size_t>(n * width) * sizeof(float), "batch");
    product(first, n, batch.as<float>());
    const auto got = download<float>(batch, static_cast<size_t>(n * width), stream);
    const std::vector<float> want(alone.begin() + first * width, alone.begin() + (first + n) * width);
    CHECK(mismatches(got, want) == 0) << what << " " << type_name(type) << ", rows " << first << ".." << first + n - 1
                                      << ": " << mismatches(got, want) << " of " << want.size()
                                      << " floats differ from the rows run alone";
  }
}

}  // namespace

TEST(cuda_matvec_rows_do_not_depend_on_the_batch) {
  if (!device_ready("cuda_matvec_rows_do_not_depend_on_the_batch")) return;
  std::mt19937 rng(31);
  const int64_t rows = 67, cols = 768;
  const cuda::Stream stream;
  for (const uint32_t type : kGpuTypes) {
    const auto dw = upload(random_matrix(type, rows, cols, rng));
    const cuda::DeviceMatrix m = device_matrix(type, dw, rows, cols);
    const Activations x(type, cols, rng, stream);
    expect_rows_alone("matvec", type, rows, stream, [&](int64_t first, int64_t n, float* y) {
      cuda::matvec(m, x.from(first), n, y, false, stream.handle());
    });
  }
}

TEST(cuda_gated_matvec_rows_do_not_depend_on_the_batch) {
  if (!device_ready("cuda_gated_matvec_rows_do_not_depend_on_the_batch")) return;
  std::mt19937 rng(37);
  const int64_t rows = 45, cols = 512;
  const cuda::Stream stream;
  for (const uint32_t type : kQuantizedTypes) {
    const auto dg = upload(random_matrix(type, rows, cols, rng)), du = upload(random_matrix(type, rows, cols, rng));
    const cuda::DeviceMatrix gate = device_matrix(type, dg, rows, cols), up = device_matrix(type, du, rows, cols);
    const Activations x(type, cols, rng, stream);
    expect_rows_alone("gated matvec", type, rows, stream, [&](int64_t first, int64_t n, float* y) {
      cuda::gated_matvec(gate, up, x.from(first).blocks, n, y, stream.handle());
    });
  }
}

// The MoE layer's expert kernels (float stacks: float_experts.cu): a row's `used` routed slots
// through gate/up (fused) and down, grouped by expert with the chunking of a pass of n rows (one
// row per chunk alone, eight in a batch), each in its batch-mates' chunks or not.
TEST(cuda_expert_rows_do_not_depend_on_the_batch) {
  if (!device_ready("cuda_expert_rows_do_not_depend_on_the_batch")) return;
  std::mt19937 rng(41);
  const int64_t experts = 6, used = 3, width = 256, feed_forward = 256;
  // Every row picks `used` different experts of few, so batch-mates share experts (and chunks).
  std::vector<int32_t> chosen;
  for (int64_t row = 0; row < kRows; ++row) {
    const auto first = static_cast<int32_t>(rng() % experts);
    for (int32_t k = 0; k < used; ++k) chosen.push_back((first + k * (1 + row % 2)) % experts);
  }
  std::vector<int32_t> identity(static_cast<size_t>(experts));
  for (int32_t e = 0; e < experts; ++e) identity[e] = e;
  const auto dchosen = upload(chosen), slots = upload(identity);
  const cuda::Stream stream;
  for (const uint32_t type : kGpuTypes) {
    const auto dg = upload(random_matrix(type, experts * feed_forward, width, rng));
    const auto du = upload(random_matrix(type, experts * feed_forward, width, rng));
    const auto dd = upload(random_matrix(type, experts * width, feed_forward, rng));
    const cuda::DeviceMatrix gate = device_matrix(type, dg, feed_forward, width, experts);
    const cuda::DeviceMatrix up = device_matrix(type, du, feed_forward, width, experts);
    const cuda::DeviceMatrix down = device_matrix(type, dd, width, feed_forward, experts);
    const Activations x(type, width, rng, stream);
    cuda::DeviceBuffer hidden(static_cast<size_t>(kRows * used * feed_forward) * sizeof(float), "hidden");
    cuda::DeviceBuffer hidden_blocks(static_cast<size_t>(kRows * used * feed_forward / 32) * sizeof(Blocks), "blocks");
    // Writes the rows' `used` slots of down's output (width floats each), or of gate/up's.
    const auto experts_of = [&](bool down_too) {
      return [&, down_too](int64_t first, int64_t n, float* out) {
        const DeviceGroups grouping(n, experts, used, cuda::tokens_per_expert_chunk(n));
        grouping.group(dchosen.as<int32_t>() + first * used, n, experts, used, slots.as<int32_t>(), stream);
        const cuda::ExpertGroups& groups = grouping.groups;
        float* gated = down_too ? hidden.as<float>() : out;
        cuda::expert_gated_matvec(gate, up, x.from(first), used, groups, gated, stream.handle());
        if (!down_too) return;
        if (cuda::is_float_type(type)) {
          cuda::expert_matvec(down, {gated, nullptr}, groups, out, stream.handle());
          return;
        }
        cuda::quantize_activations(gated, n * used, feed_forward, type, hidden_blocks.as<Blocks>(), stream.handle());
        cuda::expert_matvec(down, {nullptr, hidden_blocks.as<Blocks>()}, groups, out, stream.handle());
      };
    };
    expect_rows_alone("expert gate/up", type, used * feed_forward, stream, experts_of(false));
    expect_rows_alone("expert down", type, used * width, stream, experts_of(true));
  }
}

#else

TEST(cuda_batch_rows_skipped) { std::printf("skip cuda_batch_rows tests: this build has no CUDA\n"); }

#endif
