// The multi-row dots against their single-row dots: a batched prompt and one token at a
// time must give the same logits, so each output must be equal bit for bit, not close.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/cpu_dispatch.h"
#include "quant/f16_rows.h"
#include "quant/float_formats.h"
#include "quant/ggml_types.h"
#include "quant/kernels.h"
#include "tests/check.h"

using namespace bloomery;
using namespace bloomery::quant;

namespace {

using Bytes = std::vector<uint8_t>;

// Random blocks with every f16 field (d, dmin) set to a small normal value, so no block is
// inf or NaN; `rows` rows of `n` elements.
Bytes random_rows(uint32_t type, int64_t n, int64_t rows, std::mt19937& rng) {
  const size_t row_bytes = *ggml_row_bytes(*ggml_type(type), static_cast<uint64_t>(n));
  Bytes out(row_bytes * static_cast<size_t>(rows));
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  const uint16_t half = fp32_to_fp16(0.001f);
  const size_t block_bytes = ggml_type(type)->block_bytes;
  const std::vector<size_t> f16_fields = type == 12 ? std::vector<size_t>{0, 2} : std::vector<size_t>{208};
  for (size_t block = 0; block < out.size() / block_bytes; ++block) {
    for (const size_t at : f16_fields) std::memcpy(out.data() + block * block_bytes + at, &half, 2);
  }
  return out;
}

}  // namespace

TEST(quant_multi_row_dots_match_single_row_dots_bit_for_bit) {
  if (cpu::host_simd_tier() < SimdTier::kAvx512) return;
  std::mt19937 rng(7);
  const int64_t n = 1024;
  for (const uint32_t type : {12u, 14u}) {
    const QuantKernels& k = quant_kernels(type, SimdTier::kAvx512);
    CHECK(k.vec_dot_rows != nullptr) << type;
    if (!k.vec_dot_rows) continue;
    const Bytes w = random_rows(type, n, 1, rng);
    const size_t a_bytes = *ggml_row_bytes(*ggml_type(k.activation_type), static_cast<uint64_t>(n));
    Bytes a(a_bytes * kDotRows);
    std::vector<float> x(static_cast<size_t>(n));
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    const void* rows[kDotRows];
    for (int r = 0; r < kDotRows; ++r) {
      for (float& v : x) v = uniform(rng);
      k.quantize_activations(x.data(), a.data() + r * a_bytes, n);
      rows[r] = a.data() + r * a_bytes;
    }
    float got[kDotRows];
    k.vec_dot_rows(w.data(), rows, n, got);
    for (int r = 0; r < kDotRows; ++r) {
      const float expected = k.vec_dot(w.data(), rows[r], n);
      CHECK(std::memcmp(&got[r], &expected, sizeof(float)) == 0)
          << "type " << type << " row " << r << ": " << got[r] << " vs " << expected;
    }
  }
}

TEST(quant_f16_row_kernels_match_scalar) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  const int64_t n = 133;  // not a multiple of the vector width: the tails run too
  std::vector<uint16_t> x(static_cast<size_t>(n));
  std::vector<float> y(static_cast<size_t>(n));
  for (uint16_t& v : x) v = fp32_to_fp16(uniform(rng));
  for (float& v : y) v = uniform(rng);
  const F16RowKernels& simd = f16_row_kernels(cpu::host_simd_tier());
  const float expected = dot_f16_scalar(x.data(), y.data(), n);
  const float got = simd.dot(x.data(), y.data(), n);
  CHECK(std::fabs(got - expected) <= 1e-4f * n) << got << " vs " << expected;
  std::vector<float> a = y, b = y;
  axpy_f16_scalar(0.37f, x.data(), a.data(), n);
  simd.axpy(0.37f, x.data(), b.data(), n);
  for (int64_t i = 0; i < n; ++i) CHECK(std::fabs(a[i] - b[i]) <= 1e-6f) << i << ": " << b[i] << " vs " << a[i];
}
