// DeepSeek-V4's hyper-connections on the GPU against cpu/hyper_connections: the block's weights
// (input, output and the streams' Sinkhorn-normalized mix), the head's, the input mix and the
// residual's update, over rows of 4 streams (and of 3, the weights kernel's path for any count).
// The kernels take the CPU's ops in its order, so the floats agree but where libm's expf and the
// device's double exp round apart (a last bit, rarely). Skips, saying why, where there is no CUDA
// device.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "tests/check.h"

#ifdef BLOOMERY_CUDA

#include "cpu/hyper_connections.h"
#include "cpu/rms_norm.h"
#include "cpu/thread_pool.h"
#include "cuda/ops.h"
#include "tests/cuda_test_util.h"

using namespace bloomery;
using namespace bloomery::tests::gpu;

namespace {

// The largest difference relative to the larger magnitude (or to 1 below it).
double worst_relative(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double diff =
        std::fabs(double(a[i]) - b[i]) / std::max({1.0, std::fabs(double(a[i])), std::fabs(double(b[i]))});
    worst = std::isnan(diff) ? INFINITY : std::max(worst, diff);
  }
  return worst;
}

}  // namespace

TEST(cuda_hyper_connections_match_cpu) {
  if (!device_ready("cuda_hyper_connections_match_cpu")) return;
  std::mt19937 rng(91);
  const cuda::Stream stream;
  cpu::ThreadPool pool(4);
  const int64_t n = 37, width = 320;
  // 4 streams take the kernel compiled for them (DeepSeek-V4's), 3 the one for any count.
  for (const auto& [streams, iterations] : {std::pair<int64_t, int64_t>{4, 1}, {4, 20}, {3, 20}}) {
    const int64_t mix_width = (2 + streams) * streams;
    const cpu::HyperShape shape{streams, width, iterations, 1e-6f};
    const cuda::HyperShape gpu_shape{streams, width, iterations, 1e-6f};
    const auto mixes = random_floats(static_cast<size_t>(n * mix_width), 3.0f, rng);
    const auto scale = random_floats(3, 1.5f, rng);
    const auto base = random_floats(static_cast<size_t>(mix_width), 1.0f, rng);
    const auto residual = random_floats(static_cast<size_t>(n * streams * width), 2.0f, rng);
    const auto x = random_floats(static_cast<size_t>(n * width), 2.0f, rng);

    std::vector<float> pre(static_cast<size_t>(n * streams)), post(pre.size()),
        comb(static_cast<size_t>(n * streams * streams));
    std::vector<float> head(pre.size()), mixed(static_cast<size_t>(n * width)), updated = residual;
    cpu::hyper_weights(mixes.data(), n, scale.data(), base.data(), shape, pre.data(), post.data(), comb.data());
    cpu::hyper_head_weights(mixes.data(), n, scale.data(), base.data(), shape, head.data());
    cpu::hyper_pre(residual.data(), pre.data(), n, shape, mixed.data(), pool);
    cpu::hyper_post(x.data(), post.data(), comb.data(), n, shape, updated.data(), pool);

    const auto dm = upload(mixes), ds = upload(scale), db = upload(base), dr = upload(residual), dx = upload(x);
    const auto dpre = upload(pre), dpost = upload(post), dcomb = upload(comb);  // the CPU's, for pre and post
    cuda::DeviceBuffer gpre(pre.size() * sizeof(float), "pre"), gpost(post.size() * sizeof(float), "post");
    cuda::DeviceBuffer gcomb(comb.size() * sizeof(float), "comb"), ghead(head.size() * sizeof(float), "head");
    cuda::DeviceBuffer gmixed(mixed.size() * sizeof(float), "mixed");
    cuda::hyper_weights(dm.as<float>(), n, ds.as<float>(), db.as<float>(), gpu_shape, gpre.as<float>(),
                        gpost.as<float>(), gcomb.as<float>(), stream.handle());
    cuda::hyper_head_weights(dm.as<float>(), n, ds.as<float>(), db.as<float>(), gpu_shape, ghead.as<float>(),
                             stream.handle());
    // The mixes take the CPU's weights, so each op is checked on its own inputs.
    cuda::hyper_pre(dr.as<float>(), dpre.as<float>(), n, gpu_shape, gmixed.as<float>(), stream.handle());
    cuda::hyper_post(dx.as<float>(), dpost.as<float>(), dcomb.as<float>(), n, gpu_shape, dr.as<float>(),
                     stream.handle());
    cuda::check_launch("hyper-connections test");
    const double bound = 4.0 * std::ldexp(1.0, -24) * static_cast<double>(iterations * 2 + 4);
    CHECK(worst_relative(download<float>(gpre, pre.size(), stream), pre) <= bound) << "pre weights differ";
    CHECK(worst_relative(download<float>(gpost, post.size(), stream), post) <= bound) << "post weights differ";
    CHECK(worst_relative(download<float>(gcomb, comb.size(), stream), comb) <= bound)
        << streams << " streams, " << iterations << " Sinkhorn iterations: the streams' mix differs";
    CHECK(worst_relative(download<float>(ghead, head.size(), stream), head) <= bound) << "head weights differ";
    CHECK(download<float>(gmixed, mixed.size(), stream) == mixed) << "the input mix differs";
    CHECK(download<float>(dr, updated.size(), stream) == updated) << "the residual's update differs";
  }
}

// The pass's residual of streams: each row's embedding copied into its streams, and the streams
// RMS-normed as one row without a weight (what a block's mix product reads), as the CPU's
// spread_streams and rms_norm with no weight.
TEST(cuda_streams_spread_and_norm_as_the_cpu) {
  if (!device_ready("cuda_streams_spread_and_norm_as_the_cpu")) return;
  std::mt19937 rng(92);
  const cuda::Stream stream;
  const int64_t n = 9, streams = 4, width = 320;
  const auto x = random_floats(static_cast<size_t>(n * width), 2.0f, rng);
  std::vector<float> spread;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < streams; ++h)
      spread.insert(spread.end(), x.begin() + i * width, x.begin() + (i + 1) * width);
  }
  std::vector<float> normed(spread.size());
  cpu::rms_norm(spread.data(), n, streams * width, streams * width, nullptr, 1e-6f, normed.data(), streams * width);
  const auto dx = upload(x);
  cuda::DeviceBuffer residual(spread.size() * sizeof(float), "residual"), out(spread.size() * sizeof(float), "normed");
  cuda::spread_streams(dx.as<float>(), n, cuda::HyperShape{streams, width, 1, 1e-6f}, residual.as<float>(),
                       stream.handle());
  cuda::RmsNorm args;
  args.x = residual.as<float>();
  args.rows = n;
  args.width = streams * width;
  args.eps = 1e-6f;
  args.out = out.as<float>();
  cuda::rms_norm(args, stream.handle());
  CHECK(download<float>(residual, spread.size(), stream) == spread) << "the spread streams differ";
  CHECK(download<float>(out, normed.size(), stream) == normed) << "the unweighted norm differs";
}

#else

TEST(cuda_hyper_connections_skipped) { std::printf("skip cuda_hyper_connections tests: this build has no CUDA\n"); }

#endif
