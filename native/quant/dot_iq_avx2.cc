// AVX2 dots of the 1- to 3-bit types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, TQ1_0,
// TQ2_0) against Q8_K, in the order of llama.cpp's x86 dots for them (which AVX-512 hosts run too):
// each 32-element run's products land in int32 lane (position in the run) / 4, scaled by their
// 16-element scales in int and summed over the block's eight runs; the block's lanes then go into
// a per-lane float accumulator in one FMA by d, summed once at the end (sum_of_8) and multiplied
// by the type's power-of-two factor. The codebook magnitudes are unsigned, so maddubs takes them
// as they are and the signs go onto the activations.
#include <immintrin.h>

#include <cmath>

#include "quant/blocks.h"
#include "quant/dot_simd.h"
#include "quant/iq_runs_avx2.h"
#include "quant/reduce_avx2.h"

#define BLOOMERY_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace bloomery::quant {

namespace {

using namespace iq_runs;

BLOOMERY_AVX2 inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

// The codebook types: each run's lanes, summed over the block's eight, into a per-lane float
// accumulator in one FMA by d.
template <typename Block>
BLOOMERY_AVX2 inline float grid_dot(const void* w, const void* a, int64_t n, float factor) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = half_to_float(x[i].d) * y[i].d;
    alignas(32) uint32_t words[16];
    scale_words(x[i], words);
    __m256i sum = _mm256_setzero_si256();
    // Unrolled, each run reads its scale word at a constant offset (rolled, IQ3_XXS ran 6 % slower).
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) sum = _mm256_add_epi32(sum, run_lanes(decode_run(x[i], r, words), y[i].qs + 32 * r));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sum), acc);
  }
  return factor * sum_of_8(acc);
}

}  // namespace

BLOOMERY_AVX2 float vec_dot_iq2_xxs_q8_k_avx2(const void* w, const void* a, int64_t n) {
  return grid_dot<BlockIQ2_XXS>(w, a, n, 0.125f);
}

BLOOMERY_AVX2 float vec_dot_iq2_xs_q8_k_avx2(const void* w, const void* a, int64_t n) {
  return grid_dot<BlockIQ2_XS>(w, a, n, 0.125f);
}

BLOOMERY_AVX2 float vec_dot_iq2_s_q8_k_avx2(const void* w, const void* a, int64_t n) {
  return grid_dot<BlockIQ2_S>(w, a, n, 0.125f);
}

BLOOMERY_AVX2 float vec_dot_iq3_xxs_q8_k_avx2(const void* w, const void* a, int64_t n) {
  return grid_dot<BlockIQ3_XXS>(w, a, n, 0.25f);
}

BLOOMERY_AVX2 float vec_dot_iq3_s_q8_k_avx2(const void* w, const void* a, int64_t n) {
  return grid_dot<BlockIQ3_S>(w, a, n, 1.0f);
}

// IQ1_S: the grid's products in lanes as above; the deltas (0.125 * sign * scale * the sum of y over
// each 32 elements) as one int per block, in a float accumulator of their own (one FMA by d per
// block), added after the lanes' sum.
BLOOMERY_AVX2 float vec_dot_iq1_s_q8_k_avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockIQ1_S*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  __m256 acc = _mm256_setzero_ps();
  float acc_deltas = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    __m256i sum = _mm256_setzero_si256();
    int deltas = 0;
    for (int r = 0; r < 8; ++r) {
      const Iq1Run run = decode_run(x[i], r);
      sum = _mm256_add_epi32(sum, iq1_lanes(run, load256(y[i].qs + 32 * r)));
      deltas += (y[i].bsums[2 * r] + y[i].bsums[2 * r + 1]) * run.delta_scale;
    }
    const float d = y[i].d * half_to_float(x[i].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sum), acc);
    acc_deltas = std::fma(d, static_cast<float>(deltas), acc_deltas);
  }
  return sum_of_8(acc) + kIq1Delta * acc_deltas;
}

// IQ1_M: the grid's lanes and the deltas' lanes (the sign of each group of 8 on its y, the pairs
// summed, times the 16 elements' scale) in two per-lane float accumulators, their sums added
// with the deltas' in one FMA by 0.125.
BLOOMERY_AVX2 float vec_dot_iq1_m_q8_k_avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockIQ1_M*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  __m256 acc = _mm256_setzero_ps(), acc_deltas = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    __m256i sum = _mm256_setzero_si256(), sum_deltas = _mm256_setzero_si256();
    for (int r = 0; r < 8; ++r) {
      const Iq1Run run = decode_run(x[i], r);
      const __m256i yq = load256(y[i].qs + 32 * r);
      sum = _mm256_add_epi32(sum, iq1_lanes(run, yq));
      sum_deltas = _mm256_add_epi32(sum_deltas, iq1m_delta_lanes(run, yq));
    }
    const __m256 d = _mm256_set1_ps(y[i].d * half_to_float(iq1m_block_scale(x[i])));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sum), acc);
    acc_deltas = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sum_deltas), acc_deltas);
  }
  return std::fma(kIq1Delta, sum_of_8(acc_deltas), sum_of_8(acc));
}

// The ternary types in llama.cpp's order (iq_runs::ternary_lanes), then one FMA by d per block.
namespace {

template <typename Block>
BLOOMERY_AVX2 inline float ternary_dot(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    __m256i codes[8];
    for (int r = 0; r < 8; ++r) codes[r] = run_codes(x[i], r);
    const __m256i sum = ternary_lanes(codes, y[i]);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(y[i].d * half_to_float(x[i].d)), acc);
  }
  return sum_of_8(acc);
}

}  // namespace

BLOOMERY_AVX2 float vec_dot_tq1_0_q8_k_avx2(const void* w, const void* a, int64_t n) {
  return ternary_dot<BlockTQ1_0>(w, a, n);
}

BLOOMERY_AVX2 float vec_dot_tq2_0_q8_k_avx2(const void* w, const void* a, int64_t n) {
  return ternary_dot<BlockTQ2_0>(w, a, n);
}

}  // namespace bloomery::quant
