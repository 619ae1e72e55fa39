// The SIMD tiers' exponentials (llama.cpp's vector expf, avx512_math.h and avx2_math.h), the
// softmax and SwiGLU built on them against the scalar kernels, the softmax's padded tail, and
// the RMS norm's sum of squares.
// x86 only: elsewhere the build has no SIMD tiers (base/arch.h).
#include "base/arch.h"
#if BLOOMERY_X86_SIMD

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cpu/avx2_math.h"
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

BLOOMERY_CPU_AVX512 void exp_of_16(const float* x, float* y) { _mm512_storeu_ps(y, exp_avx512(_mm512_loadu_ps(x))); }
BLOOMERY_CPU_AVX2 void exp_of_8(const float* x, float* y) { _mm256_storeu_ps(y, exp_avx2(_mm256_loadu_ps(x))); }

using ExpFn = void (*)(const float*, float*);
using SoftmaxFn = void (*)(float*, int64_t, SoftmaxTail, const float*);
using SwigluFn = void (*)(const float*, const float*, int64_t, float*);
using SiluFn = void (*)(const float*, int64_t, float*);

// A SIMD tier's kernels, with the lanes of its vectors.
struct Tier {
  quant::SimdTier tier;
  int lanes;
  ExpFn exp;
  SoftmaxFn softmax;
  SwigluFn swiglu;
  SiluFn silu;
};

std::vector<Tier> tiers_of_this_host() {
  std::vector<Tier> out;
  if (host_simd_tier() >= quant::SimdTier::kAvx2) {
    out.push_back({quant::SimdTier::kAvx2, 8, exp_of_8, softmax_avx2, swiglu_avx2, vec_silu_avx2});
  }
  if (host_simd_tier() >= quant::SimdTier::kAvx512) {
    out.push_back({quant::SimdTier::kAvx512, 16, exp_of_16, softmax_avx512, swiglu_avx512, vec_silu_avx512});
  }
  return out;
}

}  // namespace

TEST(cpu_simd_exp_within_two_ulp_of_std_exp) {
  for (const Tier& t : tiers_of_this_host()) {
    std::vector<float> x;
    for (float v = -103.0f; v < 88.5f; v += 0.0137f) x.push_back(v);
    for (float v = -1.0f; v < 1.0f; v += 1.0f / 4096) x.push_back(v);
    while (x.size() % 16) x.push_back(0.0f);
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); i += static_cast<size_t>(t.lanes)) t.exp(x.data() + i, y.data() + i);
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = std::exp(x[i]);
      if (want < std::numeric_limits<float>::min()) continue;  // subnormal results: absolute error only
      CHECK(std::fabs(y[i] - want) <= 2.5e-7f * want) << t.lanes << " lanes: exp(" << x[i] << ") = " << y[i];
    }
    const float inf = std::numeric_limits<float>::infinity();
    const float edges[16] = {-inf, -200.0f, 200.0f, inf, 0.0f, std::numeric_limits<float>::quiet_NaN()};
    float out[16];
    t.exp(edges, out);
    CHECK(out[0] == 0.0f && out[1] == 0.0f) << t.lanes << " lanes: " << out[0] << " " << out[1];
    CHECK(out[2] == inf && out[3] == inf) << t.lanes << " lanes: " << out[2] << " " << out[3];
    CHECK(out[4] == 1.0f) << t.lanes << " lanes: " << out[4];
    CHECK(std::isnan(out[5])) << t.lanes << " lanes: " << out[5];
  }
}

TEST(cpu_simd_softmax_and_swiglu_match_scalar) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-12.0f, 12.0f);
  for (const Tier& t : tiers_of_this_host()) {
    for (const int64_t n : {int64_t{1}, int64_t{16}, int64_t{37}, int64_t{513}}) {
      std::vector<float> x(static_cast<size_t>(n)), up(static_cast<size_t>(n));
      for (float& v : x) v = uniform(rng);
      for (float& v : up) v = uniform(rng);
      const float sink = 3.0f;
      for (const SoftmaxTail tail : {SoftmaxTail::kScalar, SoftmaxTail::kPadded}) {
        for (const float* s : {static_cast<const float*>(nullptr), &sink}) {
          std::vector<float> want = x, got = x;
          softmax_scalar(want.data(), n, tail, s);
          t.softmax(got.data(), n, tail, s);
          for (int64_t i = 0; i < n; ++i) {
            CHECK(std::fabs(got[i] - want[i]) <= 5e-7f * want[i] + 1e-12f) << t.lanes << " lanes, " << n << ":" << i;
          }
        }
      }
      std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
      swiglu_scalar(x.data(), up.data(), n, want.data());
      t.swiglu(x.data(), up.data(), n, got.data());
      for (int64_t i = 0; i < n; ++i) {
        CHECK(std::fabs(got[i] - want[i]) <= 5e-7f * std::fabs(want[i]) + 1e-12f) << t.lanes << " lanes, " << n;
      }
    }
  }
}

// SiLU alone is SwiGLU's arithmetic without the product, block for block and in the last partial
// block (ggml_vec_silu_f32 and ggml_vec_swiglu_f32 share ggml_v_silu): silu(x) = swiglu(x, 1) exactly.
TEST(cpu_simd_silu_is_swiglu_times_one) {
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> uniform(-12.0f, 12.0f);
  for (const Tier& t : tiers_of_this_host()) {
    for (const int64_t n : {int64_t{1}, int64_t{16}, int64_t{37}, int64_t{513}}) {
      std::vector<float> x(static_cast<size_t>(n)), ones(static_cast<size_t>(n), 1.0f);
      for (float& v : x) v = uniform(rng);
      std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
      t.swiglu(x.data(), ones.data(), n, want.data());
      t.silu(x.data(), n, got.data());
      CHECK(got == want) << t.lanes << " lanes, " << n;
    }
  }
}

// A padded row ends as llama.cpp's attention rows do: as if masked entries (-inf) filled its
// last vector. A scalar tail differs in the last entries' exponentials (std::exp).
TEST(cpu_simd_softmax_padded_tail_is_the_row_with_masked_entries) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-8.0f, 8.0f);
  for (const Tier& t : tiers_of_this_host()) {
    int scalar_tails_differ = 0;
    for (int rep = 0; rep < 20; ++rep) {
      const int64_t n = 3 * t.lanes + 5;
      const int64_t whole = 4 * t.lanes;
      std::vector<float> row(static_cast<size_t>(whole), -std::numeric_limits<float>::infinity());
      for (int64_t i = 0; i < n; ++i) row[static_cast<size_t>(i)] = uniform(rng);
      std::vector<float> padded(row.begin(), row.begin() + n), scalar_tail = padded;
      t.softmax(row.data(), whole, SoftmaxTail::kScalar, nullptr);
      t.softmax(padded.data(), n, SoftmaxTail::kPadded, nullptr);
      t.softmax(scalar_tail.data(), n, SoftmaxTail::kScalar, nullptr);
      CHECK(std::memcmp(row.data(), padded.data(), static_cast<size_t>(n) * sizeof(float)) == 0)
          << t.lanes << " lanes, rep " << rep;
      scalar_tails_differ += std::memcmp(row.data(), scalar_tail.data(), static_cast<size_t>(n) * sizeof(float)) != 0;
    }
    CHECK(scalar_tails_differ > 0) << t.lanes << " lanes: the tails never differed, so the test shows nothing";
  }
}

// A row's kernels read none of the memory after it: rows that end right before a page that is not
// mapped (an attention's last score row, at the end of its buffer) give the row's result.
TEST(cpu_simd_softmax_reads_nothing_past_the_row) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* pages = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(pages != MAP_FAILED);
  CHECK(mprotect(static_cast<char*>(pages) + page, page, PROT_NONE) == 0);
  float* end = reinterpret_cast<float*>(static_cast<char*>(pages) + page);
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> uniform(-8.0f, 8.0f);
  for (const Tier& t : tiers_of_this_host()) {
    for (int64_t n = 1; n <= 2 * t.lanes + 1; ++n) {
      for (const SoftmaxTail tail : {SoftmaxTail::kPadded, SoftmaxTail::kScalar}) {
        float* row = end - n;
        for (int64_t i = 0; i < n; ++i) row[i] = uniform(rng);
        std::vector<float> want(row, end);
        t.softmax(want.data(), n, tail, nullptr);
        t.softmax(row, n, tail, nullptr);
        CHECK(std::memcmp(row, want.data(), static_cast<size_t>(n) * sizeof(float)) == 0) << t.lanes << " lanes, " << n;
      }
    }
  }
  munmap(pages, 2 * page);
}

TEST(cpu_sum_of_squares_avx512_matches_scalar) {
  if (host_simd_tier() < quant::SimdTier::kAvx512) return;
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

#endif  // BLOOMERY_X86_SIMD
