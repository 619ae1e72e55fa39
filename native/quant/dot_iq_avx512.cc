// The AVX-512 tier's single-row dots (vec_dot, decode) of the codebook types (IQ2_XXS, IQ2_XS, IQ2_S,
// IQ3_XXS, IQ3_S, IQ1_S, IQ1_M), through iq_runs_avx512.h's runs; single-row rates on Zen 4 against
// the AVX2 dots: IQ2 and IQ3 types 1.2-1.4x, IQ1_S 1.6x, IQ1_M 1.2x. The AVX2 dots' bits from a
// third fewer instructions, which is what bounds these dots: with every routed expert of an IQ2_XXS
// model on the H200 host's CPU, 16 threads streamed 27 GB/s through this dot, 19-20 through the AVX2
// one and 18-24 through ik_llama.cpp's kernel; that model's decode went from 36-38 to 47-50 tok/s
// (CPU experts 23-24 -> 16-18 ms a step, the two builds alternating), and a later call of the same
// lease decoded 59-61 against ik_llama.cpp's 45-52, alternating.
#include <immintrin.h>

#include <cmath>

#include "quant/blocks.h"
#include "quant/dot_simd.h"
#include "quant/iq_codes.h"
#include "quant/iq_grids.h"
#include "quant/iq_runs_avx512.h"
#include "quant/reduce_avx2.h"

#define BLOOMERY_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,bmi2,fma,f16c")))

namespace bloomery::quant {

namespace {

using namespace iq_runs;

template <typename Block>
BLOOMERY_AVX512 inline float masked_runs_dot(const void* w, const void* a, int64_t n, float factor) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    alignas(32) uint32_t words[16];
    scale_words(x[i], words);
    __m256i sum = _mm256_setzero_si256();
    for (int r = 0; r < 8; r += 2) {
      MaskedRun runs[2];
      decode_run_pair(x[i], r, words, runs);
      sum = add_run_lanes(add_run_lanes(sum, runs[0], y[i].qs + 32 * r), runs[1], y[i].qs + 32 * (r + 1));
    }
    const float d = _cvtsh_ss(x[i].d) * y[i].d;
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sum), acc);
  }
  return factor * sum_of_8(acc);
}

}  // namespace

// IQ1_S through iq_runs_avx512.h's block form: the AVX2 dot's lanes and deltas, so its bits.
BLOOMERY_AVX512 float vec_dot_iq1_s_q8_k_avx512(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockIQ1_S*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  __m256 acc = _mm256_setzero_ps();
  float acc_deltas = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const Iq1sBlock block = iq1s_block(x[i]);
    __m256i sum = _mm256_setzero_si256();
    for (int r = 0; r < 8; ++r) sum = add_iq1s_lanes(sum, block, r, run_grid(x[i], r), y[i].qs + 32 * r);
    const float d = y[i].d * _cvtsh_ss(x[i].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sum), acc);
    acc_deltas = std::fma(d, static_cast<float>(iq1s_deltas(block, y[i])), acc_deltas);
  }
  return sum_of_8(acc) + kIq1Delta * acc_deltas;
}

// IQ1_M through iq_runs_avx512.h's runs: the AVX2 dot's two accumulators, so its bits.
BLOOMERY_AVX512 float vec_dot_iq1_m_q8_k_avx512(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockIQ1_M*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  __m256 acc = _mm256_setzero_ps(), acc_deltas = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    __m256i sum = _mm256_setzero_si256(), sum_deltas = _mm256_setzero_si256();
    for (int r = 0; r < 8; ++r) add_iq1m_lanes(sum, sum_deltas, iq1m_run(x[i], r), y[i].qs + 32 * r);
    const __m256 d = _mm256_set1_ps(y[i].d * _cvtsh_ss(iq1m_block_scale(x[i])));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sum), acc);
    acc_deltas = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sum_deltas), acc_deltas);
  }
  return std::fma(kIq1Delta, sum_of_8(acc_deltas), sum_of_8(acc));
}

BLOOMERY_AVX512 float vec_dot_iq2_xxs_q8_k_avx512(const void* w, const void* a, int64_t n) {
  return masked_runs_dot<BlockIQ2_XXS>(w, a, n, 0.125f);
}

BLOOMERY_AVX512 float vec_dot_iq2_xs_q8_k_avx512(const void* w, const void* a, int64_t n) {
  return masked_runs_dot<BlockIQ2_XS>(w, a, n, 0.125f);
}

BLOOMERY_AVX512 float vec_dot_iq2_s_q8_k_avx512(const void* w, const void* a, int64_t n) {
  return masked_runs_dot<BlockIQ2_S>(w, a, n, 0.125f);
}

BLOOMERY_AVX512 float vec_dot_iq3_xxs_q8_k_avx512(const void* w, const void* a, int64_t n) {
  return masked_runs_dot<BlockIQ3_XXS>(w, a, n, 0.25f);
}

BLOOMERY_AVX512 float vec_dot_iq3_s_q8_k_avx512(const void* w, const void* a, int64_t n) {
  return masked_runs_dot<BlockIQ3_S>(w, a, n, 1.0f);
}

}  // namespace bloomery::quant
