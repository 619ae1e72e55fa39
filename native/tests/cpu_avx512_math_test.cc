// The AVX-512 exponential and the softmax and SwiGLU built on it, and the RMS norm's sum of
// squares, against std::exp and the scalar kernels.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "cpu/avx512_math.h"
#include "cpu/cpu_dispatch.h"
#include "cpu/rms_norm.h"
#include "cpu/softmax.h"
#include "cpu/swiglu.h"
#include "tests/check.h"

// GCC 12's AVX-512 intrinsics build their "undefined" operands by self-initialization.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

using namespace bloomery;
using namespace bloomery::cpu;

namespace {

BLOOMERY_CPU_AVX512 void exp16(const float* x, float* y) { _mm512_storeu_ps(y, exp_avx512(_mm512_loadu_ps(x))); }

bool has_avx512() { return host_simd_tier() >= quant::SimdTier::kAvx512; }

}  // namespace

TEST(cpu_exp_avx512_within_two_ulp_of_std_exp) {
  if (!has_avx512()) return;
  std::vector<float> x;
  for (float v = -103.0f; v < 88.5f; v += 0.0137f) x.push_back(v);
  for (float v = -1.0f; v < 1.0f; v += 1.0f / 4096) x.push_back(v);
  while (x.size() % 16) x.push_back(0.0f);
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); i += 16) exp16(x.data() + i, y.data() + i);
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = std::exp(x[i]);
    if (want < std::numeric_limits<float>::min()) continue;  // subnormal results: absolute error only
    CHECK(std::fabs(y[i] - want) <= 2.5e-7f * want) << "exp(" << x[i] << ") = " << y[i] << " vs " << want;
  }
  const float inf = std::numeric_limits<float>::infinity();
  const float edges[16] = {-inf, -200.0f, 200.0f, inf, std::numeric_limits<float>::quiet_NaN(), 0.0f};
  float out[16];
  exp16(edges, out);
  CHECK(out[0] == 0.0f && out[1] == 0.0f) << out[0] << " " << out[1];
  CHECK(out[2] == inf && out[3] == inf) << out[2] << " " << out[3];
  CHECK(std::isnan(out[4])) << out[4];
  CHECK(out[5] == 1.0f) << out[5];
}

TEST(cpu_softmax_and_swiglu_avx512_match_scalar) {
  if (!has_avx512()) return;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-12.0f, 12.0f);
  for (const int64_t n : {int64_t{1}, int64_t{16}, int64_t{37}, int64_t{513}}) {
    std::vector<float> x(static_cast<size_t>(n)), up(static_cast<size_t>(n));
    for (float& v : x) v = uniform(rng);
    for (float& v : up) v = uniform(rng);
    std::vector<float> want = x, got = x;
    softmax_scalar(want.data(), n);
    softmax_avx512(got.data(), n);
    for (int64_t i = 0; i < n; ++i) CHECK(std::fabs(got[i] - want[i]) <= 5e-7f * want[i] + 1e-12f) << n << ":" << i;
    swiglu_scalar(x.data(), up.data(), n, want.data());
    swiglu_avx512(x.data(), up.data(), n, got.data());
    for (int64_t i = 0; i < n; ++i)
      CHECK(std::fabs(got[i] - want[i]) <= 5e-7f * std::fabs(want[i]) + 1e-12f) << n << ":" << i;
  }
}

TEST(cpu_sum_of_squares_avx512_matches_scalar) {
  if (!has_avx512()) return;
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  for (const int64_t n : {int64_t{1}, int64_t{128}, int64_t{1531}}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = uniform(rng);
    const double want = sum_of_squares_scalar(x.data(), n);
    const double got = sum_of_squares_avx512(x.data(), n);
    CHECK(std::fabs(got - want) <= 1e-12 * want) << n << ": " << got << " vs " << want;
  }
}
