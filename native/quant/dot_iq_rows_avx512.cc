// The AVX-512 tier's several-row dots (vec_dot_rows, prompts) of the 1- to 3-bit types: a block's
// eight runs decoded once for all the rows (the codebook types in iq_runs_avx512.h's form, the
// ternary types in iq_runs_avx2.h's), then per row the
// single-row dot's lanes and float steps, so each row gets its bits while the codebook lookups, sign
// decoding and digit unpacking, most of a single-row dot's work, are paid once per block (CPU
// prompts of an IQ2_XXS model 2.0x faster on the H200's host). One row (a decode step) takes the
// single-row dot, which decodes each run where it is used: 45-49 tok/s against 37-43 through the
// stored runs. The rows stay 256-bit: two runs a step in 512 bits (sign masks, dpwssd) measured 2%
// slower on that host's prompts, and codes pre-scaled to int16 (one dpwssd a run) 12% slower.
#include <immintrin.h>

#include <cmath>

#include "quant/blocks.h"
#include "quant/dot_simd.h"
#include "quant/iq_runs_avx2.h"
#include "quant/iq_runs_avx512.h"
#include "quant/reduce_avx2.h"

#define BLOOMERY_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,bmi2,fma,f16c")))

namespace bloomery::quant {

namespace {

using namespace iq_runs;

BLOOMERY_AVX512 inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

template <typename Block>
BLOOMERY_AVX512 inline const Block& block_of(const void* const* rows, int r, int64_t i) {
  return static_cast<const Block*>(rows[r])[i];
}

// The codebook types with signs, through their masked runs.
template <typename Block>
BLOOMERY_AVX512 inline void masked_runs_dot_rows(VecDotFn single, const void* w, const void* const* a, int rows,
                                                 int64_t n, float factor, float* out) {
  if (rows == 1) {
    out[0] = single(w, a[0], n);
    return;
  }
  const auto* x = static_cast<const Block*>(w);
  __m256 acc[kDotRows];
  for (int r = 0; r < rows; ++r) acc[r] = _mm256_setzero_ps();
  MaskedRun runs[8];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    alignas(32) uint32_t words[16];
    scale_words(x[i], words);
    for (int k = 0; k < 8; k += 2) decode_run_pair(x[i], k, words, runs + k);
    const float dx = half_to_float(x[i].d);
    for (int r = 0; r < rows; ++r) {
      const BlockQ8_K& y = block_of<BlockQ8_K>(a, r, i);
      __m256i sum = _mm256_setzero_si256();
      for (int k = 0; k < 8; ++k) sum = add_run_lanes(sum, runs[k], y.qs + 32 * k);
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dx * y.d), _mm256_cvtepi32_ps(sum), acc[r]);
    }
  }
  for (int r = 0; r < rows; ++r) out[r] = factor * sum_of_8(acc[r]);
}

template <typename Block>
BLOOMERY_AVX512 inline void ternary_dot_rows(VecDotFn single, const void* w, const void* const* a, int rows, int64_t n,
                                             float* out) {
  if (rows == 1) {
    out[0] = single(w, a[0], n);
    return;
  }
  const auto* x = static_cast<const Block*>(w);
  __m256 acc[kDotRows];
  for (int r = 0; r < rows; ++r) acc[r] = _mm256_setzero_ps();
  __m256i codes[8];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    for (int k = 0; k < 8; ++k) codes[k] = run_codes(x[i], k);
    const float dx = half_to_float(x[i].d);
    for (int r = 0; r < rows; ++r) {
      const BlockQ8_K& y = block_of<BlockQ8_K>(a, r, i);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ternary_lanes(codes, y)), _mm256_set1_ps(y.d * dx), acc[r]);
    }
  }
  for (int r = 0; r < rows; ++r) out[r] = sum_of_8(acc[r]);
}

}  // namespace

BLOOMERY_AVX512 void vec_dot_rows_iq2_xxs_q8_k_avx512(const void* w, const void* const* a, int rows, int64_t n,
                                                      float* out) {
  masked_runs_dot_rows<BlockIQ2_XXS>(vec_dot_iq2_xxs_q8_k_avx512, w, a, rows, n, 0.125f, out);
}

BLOOMERY_AVX512 void vec_dot_rows_iq2_xs_q8_k_avx512(const void* w, const void* const* a, int rows, int64_t n,
                                                     float* out) {
  masked_runs_dot_rows<BlockIQ2_XS>(vec_dot_iq2_xs_q8_k_avx512, w, a, rows, n, 0.125f, out);
}

BLOOMERY_AVX512 void vec_dot_rows_iq2_s_q8_k_avx512(const void* w, const void* const* a, int rows, int64_t n,
                                                    float* out) {
  masked_runs_dot_rows<BlockIQ2_S>(vec_dot_iq2_s_q8_k_avx512, w, a, rows, n, 0.125f, out);
}

BLOOMERY_AVX512 void vec_dot_rows_iq3_xxs_q8_k_avx512(const void* w, const void* const* a, int rows, int64_t n,
                                                      float* out) {
  masked_runs_dot_rows<BlockIQ3_XXS>(vec_dot_iq3_xxs_q8_k_avx512, w, a, rows, n, 0.25f, out);
}

BLOOMERY_AVX512 void vec_dot_rows_iq3_s_q8_k_avx512(const void* w, const void* const* a, int rows, int64_t n,
                                                    float* out) {
  masked_runs_dot_rows<BlockIQ3_S>(vec_dot_iq3_s_q8_k_avx512, w, a, rows, n, 1.0f, out);
}

BLOOMERY_AVX512 void vec_dot_rows_iq1_s_q8_k_avx512(const void* w, const void* const* a, int rows, int64_t n,
                                                    float* out) {
  if (rows == 1) {
    out[0] = vec_dot_iq1_s_q8_k_avx512(w, a[0], n);
    return;
  }
  const auto* x = static_cast<const BlockIQ1_S*>(w);
  __m256 acc[kDotRows];
  float acc_deltas[kDotRows];
  for (int r = 0; r < rows; ++r) acc[r] = _mm256_setzero_ps(), acc_deltas[r] = 0;
  __m256i grids[8];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const Iq1sBlock block = iq1s_block(x[i]);
    for (int k = 0; k < 8; ++k) grids[k] = run_grid(x[i], k);
    const float dx = half_to_float(x[i].d);
    for (int r = 0; r < rows; ++r) {
      const BlockQ8_K& y = block_of<BlockQ8_K>(a, r, i);
      __m256i sum = _mm256_setzero_si256();
      for (int k = 0; k < 8; ++k) sum = add_iq1s_lanes(sum, block, k, grids[k], y.qs + 32 * k);
      const float d = y.d * dx;
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sum), acc[r]);
      acc_deltas[r] = std::fma(d, static_cast<float>(iq1s_deltas(block, y)), acc_deltas[r]);
    }
  }
  for (int r = 0; r < rows; ++r) out[r] = sum_of_8(acc[r]) + kIq1Delta * acc_deltas[r];
}

BLOOMERY_AVX512 void vec_dot_rows_iq1_m_q8_k_avx512(const void* w, const void* const* a, int rows, int64_t n,
                                                    float* out) {
  if (rows == 1) {
    out[0] = vec_dot_iq1_m_q8_k_avx512(w, a[0], n);
    return;
  }
  const auto* x = static_cast<const BlockIQ1_M*>(w);
  __m256 acc[kDotRows], acc_deltas[kDotRows];
  for (int r = 0; r < rows; ++r) acc[r] = _mm256_setzero_ps(), acc_deltas[r] = _mm256_setzero_ps();
  Iq1mRun runs[8];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    for (int k = 0; k < 8; ++k) runs[k] = iq1m_run(x[i], k);
    const float dx = half_to_float(iq1m_block_scale(x[i]));
    for (int r = 0; r < rows; ++r) {
      const BlockQ8_K& y = block_of<BlockQ8_K>(a, r, i);
      __m256i sum = _mm256_setzero_si256(), sum_deltas = _mm256_setzero_si256();
      for (int k = 0; k < 8; ++k) add_iq1m_lanes(sum, sum_deltas, runs[k], y.qs + 32 * k);
      const __m256 d = _mm256_set1_ps(y.d * dx);
      acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sum), acc[r]);
      acc_deltas[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sum_deltas), acc_deltas[r]);
    }
  }
  for (int r = 0; r < rows; ++r) out[r] = std::fma(kIq1Delta, sum_of_8(acc_deltas[r]), sum_of_8(acc[r]));
}

BLOOMERY_AVX512 void vec_dot_rows_tq1_0_q8_k_avx512(const void* w, const void* const* a, int rows, int64_t n,
                                                    float* out) {
  ternary_dot_rows<BlockTQ1_0>(vec_dot_tq1_0_q8_k_avx2, w, a, rows, n, out);
}

BLOOMERY_AVX512 void vec_dot_rows_tq2_0_q8_k_avx512(const void* w, const void* const* a, int rows, int64_t n,
                                                    float* out) {
  ternary_dot_rows<BlockTQ2_0>(vec_dot_tq2_0_q8_k_avx2, w, a, rows, n, out);
}

}  // namespace bloomery::quant
