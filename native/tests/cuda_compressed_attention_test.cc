// DeepSeek-V4's blocks on the GPU: the compressors (fed a sequence over several passes, a prompt
// then decode steps then another prompt, so blocks complete from rows of this pass and of the ring)
// against the compression in double (per element a softmax over the block's positions, and the
// block before's where blocks overlap, weighting the values; RMS norm; rotation of the last rope
// dims at the block's first position; the indexer's keys through the Hadamard matrix); and the
// attention over a window's raw rows and the compressed rows (all seen, or an indexer's choice)
// with sinks, against cpu::compressed_attention, decoded and as prompts.
// Skips, saying why, where there is no CUDA device.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <tuple>
#include <vector>

#include "tests/check.h"

#ifdef BLOOMERY_CUDA

#include "cpu/compressed_attention.h"
#include "cpu/lightning_indexer.h"
#include "cpu/rope.h"
#include "cpu/thread_pool.h"
#include "cuda/ops.h"
#include "engine/gpu_rope.h"
#include "tests/cuda_test_util.h"

using namespace bloomery;
using namespace bloomery::tests::gpu;

namespace {

cpu::RopeParams tail_rope() {
  cpu::RopeParams rope;
  rope.dims = 32;
  rope.freq_base = 160000.0f;
  rope.style = cpu::RopeStyle::kNormal;
  return rope;
}

// The compressed row of `block` from every position's values and scores (rows of width), in double.
std::vector<float> reference_row(const std::vector<float>& values, const std::vector<float>& scores, int64_t block,
                                 int64_t ratio, int64_t dim, bool overlap, bool hadamard,
                                 const std::vector<float>& norm, float eps) {
  const int64_t width = (overlap ? 2 : 1) * dim, count = (overlap ? 2 : 1) * ratio;
  std::vector<float> row(static_cast<size_t>(dim));
  for (int64_t j = 0; j < dim; ++j) {
    std::vector<double> s, v;
    for (int64_t e = 0; e < count; ++e) {
      const bool earlier = overlap && e < ratio;
      const int64_t position = earlier ? (block - 1) * ratio + e : block * ratio + (e - (overlap ? ratio : 0));
      if (position < 0) continue;
      const int64_t at = position * width + j + (overlap && !earlier ? dim : 0);
      s.push_back(scores[at]);
      v.push_back(values[at]);
    }
    const double max = *std::max_element(s.begin(), s.end());
    double sum = 0.0, weighted = 0.0;
    for (size_t e = 0; e < s.size(); ++e) sum += std::exp(s[e] - max);
    for (size_t e = 0; e < s.size(); ++e) weighted += v[e] * std::exp(s[e] - max) / sum;
    row[j] = static_cast<float>(weighted);
  }
  double squares = 0.0;
  for (const float x : row) squares += double(x) * x;
  const double scale = 1.0 / std::sqrt(squares / double(dim) + eps);
  for (int64_t j = 0; j < dim; ++j) row[j] = static_cast<float>(row[j] * scale * norm[j]);
  const cpu::RopeParams rope = tail_rope();
  std::vector<float> angles;
  cpu::rope_angles(rope, block * ratio, angles);
  cpu::rope_apply(row.data() + dim - rope.dims, 1, rope.dims, rope, angles);
  if (hadamard) {
    const std::vector<float> h = cpu::hadamard_matrix(dim);
    std::vector<float> out(static_cast<size_t>(dim));
    for (int64_t i = 0; i < dim; ++i) {
      double sum = 0.0;
      for (int64_t k = 0; k < dim; ++k) sum += double(h[i * dim + k]) * row[k];
      out[i] = static_cast<float>(sum);
    }
    row = out;
  }
  return row;
}

}  // namespace

TEST(cuda_compressor_matches_the_compression) {
  if (!device_ready("cuda_compressor_matches_the_compression")) return;
  std::mt19937 rng(101);
  const cuda::Stream stream;
  for (const auto& [ratio, dim, overlap, hadamard] :
       {std::tuple<int64_t, int64_t, bool, bool>{4, 128, true, false},
        std::tuple<int64_t, int64_t, bool, bool>{4, 64, true, true},
        std::tuple<int64_t, int64_t, bool, bool>{128, 128, false, false}}) {
    const int64_t width = (overlap ? 2 : 1) * dim, slots = (overlap ? 2 : 1) * ratio;
    const int64_t total = 37 + 9 + 300, offset = 16, stride = offset + dim + 8;
    const auto values = random_floats(static_cast<size_t>(total * width), 2.0f, rng);
    const auto scores = random_floats(static_cast<size_t>(total * width), 3.0f, rng);
    const auto norm = random_floats(static_cast<size_t>(dim), 1.0f, rng);
    cuda::CompressorShape shape;
    shape.ratio = ratio;
    shape.dim = dim;
    shape.overlap = overlap;
    shape.offset = offset;
    shape.row_stride = stride;
    shape.hadamard = hadamard;
    shape.rope = engine::gpu_rope_shape(tail_rope(), nullptr);
    shape.eps = 1e-6f;
    CHECK(cuda::compressor_supports(shape)) << "the test's shape";
    const auto dnorm = upload(norm);
    cuda::DeviceBuffer ring(static_cast<size_t>(slots * 2 * width) * sizeof(float), "ring");
    const int64_t blocks = total / ratio + 1;
    cuda::DeviceBuffer compressed(static_cast<size_t>(blocks * stride) * sizeof(uint16_t), "compressed");
    // Passes of 37 rows, 9 single rows, then 300 rows.
    std::vector<std::pair<int64_t, int64_t>> passes = {{0, 37}};
    for (int64_t i = 0; i < 9; ++i) passes.emplace_back(37 + i, 1);
    passes.emplace_back(46, 300);
    for (const auto& [first, n] : passes) {
      const std::vector<float> v(values.begin() + first * width, values.begin() + (first + n) * width);
      const std::vector<float> s(scores.begin() + first * width, scores.begin() + (first + n) * width);
      std::vector<int32_t> positions(static_cast<size_t>(n));
      std::iota(positions.begin(), positions.end(), static_cast<int32_t>(first));
      const auto dv = upload(v), ds = upload(s), dp = upload(positions);
      cuda::compress_rows(dv.as<float>(), ds.as<float>(), n, dp.as<int32_t>(), shape, dnorm.as<float>(),
                          ring.as<float>(), compressed.as<uint16_t>(), stream.handle());
      stream.synchronize();
    }
    cuda::check_launch("compressor test");
    const auto got = download<uint16_t>(compressed, static_cast<size_t>(blocks * stride), stream);
    int64_t misses = 0;
    double worst = 0.0;
    for (int64_t b = 0; b < total / ratio; ++b) {
      const auto want = reference_row(values, scores, b, ratio, dim, overlap, hadamard, norm, 1e-6f);
      for (int64_t j = 0; j < dim; ++j) {
        const float g = quant::fp16_to_fp32(got[b * stride + offset + j]);
        const double diff = std::fabs(double(g) - want[j]);
        worst = std::max(worst, diff);
        misses += diff > std::ldexp(std::fabs(want[j]), -9) + 1e-5;
      }
      CHECK(got[b * stride + offset - 1] == 0) << "block " << b << " wrote before its offset";
    }
    CHECK(misses == 0) << "ratio " << ratio << ", dim " << dim << (hadamard ? " (Hadamard)" : "") << ": " << misses
                       << " compressed values differ by over two f16 ulps, the worst by " << worst;
  }
}

// rotate_tails against cpu::rope_apply over each head's last dims, and its inverse against the
// angles with their sines negated (compressed_attention.cc's rotate_tails, back): 64 heads of 512
// with 64 rotated, positions up to a million.
TEST(cuda_rotate_tails_matches_cpu) {
  if (!device_ready("cuda_rotate_tails_matches_cpu")) return;
  std::mt19937 rng(103);
  const cuda::Stream stream;
  const int64_t n = 4, heads = 64, d = 512;
  cpu::RopeParams rope = tail_rope();
  rope.dims = 64;
  const std::vector<int32_t> positions = {0, 7, 4095, 1'000'000};
  const auto x = random_floats(static_cast<size_t>(n * heads * d), 2.0f, rng);
  for (const bool inverse : {false, true}) {
    const auto dx = upload(x), dp = upload(positions);
    cuda::rotate_tails(dx.as<float>(), n, heads, d, dp.as<int32_t>(), engine::gpu_rope_shape(rope, nullptr), inverse,
                       stream.handle());
    const auto got = download<float>(dx, x.size(), stream);
    std::vector<float> want = x, angles;
    for (int64_t i = 0; i < n; ++i) {
      cpu::rope_angles(rope, positions[i], angles);
      if (inverse) {
        for (size_t k = 1; k < angles.size(); k += 2) angles[k] = -angles[k];
      }
      cpu::rope_apply(want.data() + i * heads * d + d - rope.dims, heads, rope.dims, rope, angles, d);
    }
    // cos and sin may part from the host's libm in a last bit on rare angles.
    CHECK(mismatches(got, want) <= want.size() / 500 && relative_error(got, want) < 1e-6)
        << (inverse ? "inverse: " : "") << mismatches(got, want) << " values differ";
    size_t moved = 0;
    for (int64_t i = 0; i < n * heads; ++i) {
      for (int64_t j = 0; j < d - rope.dims; ++j) moved += got[i * d + j] != x[i * d + j];
    }
    CHECK(moved == 0) << moved << " values before the rotated tail changed";
  }
}

TEST(cuda_compressed_attention_matches_cpu) {
  if (!device_ready("cuda_compressed_attention_matches_cpu")) return;
  std::mt19937 rng(102);
  const cuda::Stream stream;
  cpu::ThreadPool pool(4);
  cuda::prepare_compressed_attention();  // the prompts' kernel takes more shared memory than a launch may by default
  constexpr float kAmplitude = 1.5f;
  for (const int64_t d : {128, 512}) {
    for (const auto& [heads, window, ratio, top_k] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{4, 32, 0, 0},
                                                      std::tuple<int64_t, int64_t, int64_t, int64_t>{6, 32, 4, 8},
                                                      std::tuple<int64_t, int64_t, int64_t, int64_t>{16, 128, 128, 0},
                                                      std::tuple<int64_t, int64_t, int64_t, int64_t>{8, 128, 4, 64},
                                                      std::tuple<int64_t, int64_t, int64_t, int64_t>{8, 128, 4, 0},
                                                      std::tuple<int64_t, int64_t, int64_t, int64_t>{140, 32, 4, 8}}) {
      // Decode steps take a head a block, and so do 15 rows but of 140 heads (4 a block); passes of 70
      // and 130 rows take the tensor-core blocks of 64 heads (of 140 heads: three blocks a token).
      // Ratio 4 with no indexer at 3,000 positions: 878 cells, several chunks of the decode kernel.
      for (const auto& [first, n] : {std::pair<int64_t, int64_t>{9, 1}, std::pair<int64_t, int64_t>{2999, 1},
                                     std::pair<int64_t, int64_t>{300, 15}, std::pair<int64_t, int64_t>{500, 70},
                                     std::pair<int64_t, int64_t>{700, 130}}) {
        const int64_t length = first + n, stride = d + 64, blocks = ratio > 0 ? length / ratio + 1 : 1;
        std::vector<uint16_t> raw(static_cast<size_t>(length * d)), compressed(static_cast<size_t>(blocks * stride));
        std::uniform_real_distribution<float> uniform(-kAmplitude, kAmplitude);
        for (auto& x : raw) x = quant::fp32_to_fp16(uniform(rng));
        for (auto& x : compressed) x = quant::fp32_to_fp16(uniform(rng));
        const auto q = random_floats(static_cast<size_t>(n * heads * d), 0.2f, rng);
        const auto sinks = random_floats(static_cast<size_t>(heads), 2.0f, rng);
        std::vector<int32_t> positions(static_cast<size_t>(n)), selected;
        std::iota(positions.begin(), positions.end(), static_cast<int32_t>(first));
        if (top_k > 0) {
          for (int64_t i = 0; i < n; ++i) {
            const int64_t seen = (first + i + 1) / ratio;
            std::vector<int32_t> all(static_cast<size_t>(seen));
            std::iota(all.begin(), all.end(), 0);
            std::shuffle(all.begin(), all.end(), rng);
            all.resize(static_cast<size_t>(top_k), -1);
            selected.insert(selected.end(), all.begin(), all.end());
          }
        }
        const float scale = 1.0f / std::sqrt(static_cast<float>(d));
        cpu::CompressedAttentionShape shape;
        shape.heads = heads;
        shape.head_dim = d;
        shape.scale = scale;
        shape.window = window;
        shape.ratio = ratio;
        shape.compressed_stride = stride;
        shape.sinks = sinks.data();
        shape.selected = top_k > 0 ? selected.data() : nullptr;
        shape.selected_count = top_k;
        std::vector<float> want(static_cast<size_t>(n * heads * d));
        cpu::compressed_attention(q.data(), n, first, raw.data(), compressed.data(), shape, want.data(), pool);

        const auto dq = upload(q), draw = upload(raw), dc = upload(compressed), dpos = upload(positions);
        const auto dsinks = upload(sinks), dsel = upload(selected);
        cuda::DeviceBuffer out(want.size() * sizeof(float), "out");
        cuda::CompressedAttention a;
        a.q = dq.as<float>();
        a.n = n;
        a.heads = heads;
        a.head_dim = d;
        a.positions = dpos.as<int32_t>();
        a.scale = scale;
        a.raw = draw.as<uint16_t>();
        a.raw_row = d;
        a.window = window;
        a.compressed = dc.as<uint16_t>();
        a.compressed_stride = stride;
        a.ratio = ratio;
        a.selected = top_k > 0 ? dsel.as<int32_t>() : nullptr;
        a.top_k = top_k;
        a.sinks = dsinks.as<float>();
        a.out = out.as<float>();
        cuda::compressed_attention(a, stream.handle());
        cuda::check_launch("compressed attention test");
        const auto got = download<float>(out, want.size(), stream);
        double worst = 0.0, total = 0.0;
        for (size_t i = 0; i < got.size(); ++i) {
          const double diff = std::fabs(double(got[i]) - want[i]);
          worst = std::isnan(diff) ? INFINITY : std::max(worst, diff);
          total += diff;
        }
        // The weights' f16 rounding may fall an ulp apart where the sums' orders differ.
        CHECK(worst <= kAmplitude * std::ldexp(1.0, -9) &&
              total / double(got.size()) <= kAmplitude * std::ldexp(1.0, -14))
            << "head_dim " << d << ", " << heads << " heads, window " << window << ", ratio " << ratio << ", top "
            << top_k << ", " << n << " rows from " << first << ": worst difference " << worst << ", mean "
            << total / double(got.size());
      }
    }
  }
}

#else

TEST(cuda_compressed_attention_skipped) {
  std::printf("skip cuda_compressed_attention tests: this build has no CUDA\n");
}

#endif
