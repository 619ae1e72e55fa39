// The AVX-512 tier's form of a 32-element run of the codebook types with signs (IQ2_XXS, IQ2_XS,
// IQ2_S, IQ3_XXS, IQ3_S; IQ1_S's and IQ1_M's at the end), shared by its single-row dots (dot_iq_avx512.cc) and
// several-row dots (dot_iq_rows_avx512.cc). The AVX2 form's integer lanes (iq_runs_avx2.h), so the same bits, from
// fewer instructions: the signs negate y under a 32-bit mask (for the types that store seven of each
// group's eight signs, two runs' 4 x 7 stored bits spread to bytes by one pdep and each byte's parity
// folded into its top bit, instead of four table lookups and three inserts a run; the others' sign
// bits are the mask), and VNNI does the products: dpbusd sums each lane's four, and dpwssd multiplies
// the lane by its scale (the lane fits in int16, at most 4 x 62 x 128, and the scale word's high
// half is zero, so the product is exact). Include only from AVX-512-tier code.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "quant/blocks.h"
#include "quant/iq_runs_avx2.h"

#define BLOOMERY_IQ_RUNS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,bmi2,fma,f16c")))

namespace bloomery::quant::iq_runs {

// Two runs' sign masks (bit j: element j negative), the first in the low 32 bits: each run's
// 4 x 7 stored bits spread to four bytes, and each byte's eighth sign, which makes its count of
// negatives even, its parity.
BLOOMERY_IQ_RUNS_AVX512 inline __mmask64 two_sign_masks(uint32_t fields0, uint32_t fields1) {
  const uint64_t bits = _pdep_u64(uint64_t{fields0} | uint64_t{fields1} << 28, 0x7f7f7f7f7f7f7f7full);
  uint64_t parity = bits ^ (bits >> 4);
  parity ^= parity >> 2;
  parity ^= parity >> 1;
  return _cvtu64_mask64(bits | (parity & 0x0101010101010101ull) << 7);
}

struct MaskedRun {
  __m256i q;           // the grid magnitudes
  __m256i scale;       // per int32 lane, its 16 elements' scale (high int16 zero)
  __mmask32 negative;  // the elements whose sign is minus
};

// Runs r and r + 1's sign masks, the first in the low 32 bits.
template <typename Block>
BLOOMERY_IQ_RUNS_AVX512 inline __mmask64 run_pair_signs(const Block& x, int r) {
  return two_sign_masks(run_sign_fields(x, r), run_sign_fields(x, r + 1));
}

// The types that store every sign as a bit: the two runs' 64 bits.
BLOOMERY_IQ_RUNS_AVX512 inline __mmask64 stored_sign_mask(const uint8_t* bits) {
  uint64_t mask;
  std::memcpy(&mask, bits, sizeof mask);
  return _cvtu64_mask64(mask);
}

BLOOMERY_IQ_RUNS_AVX512 inline __mmask64 run_pair_signs(const BlockIQ2_S& x, int r) {
  return stored_sign_mask(run_sign_bits(x, r));
}

BLOOMERY_IQ_RUNS_AVX512 inline __mmask64 run_pair_signs(const BlockIQ3_S& x, int r) {
  return stored_sign_mask(run_sign_bits(x, r));
}

// Runs r and r + 1 of block x, whose scale_words are `words`.
template <typename Block>
BLOOMERY_IQ_RUNS_AVX512 inline void decode_run_pair(const Block& x, int r, const uint32_t* words, MaskedRun* out) {
  const __mmask64 signs = run_pair_signs(x, r);
  for (int k = 0; k < 2; ++k) {
    const int lo = lo_scale_word(x, r + k), hi = hi_scale_word(x, r + k);
    const __m256i scale = lo == hi ? _mm256_set1_epi32(static_cast<int>(words[lo]))
                                   : _mm256_mask_blend_epi32(0xf0, _mm256_set1_epi32(static_cast<int>(words[lo])),
                                                             _mm256_set1_epi32(static_cast<int>(words[hi])));
    out[k] = {run_grid(x, r + k), scale, static_cast<__mmask32>(k == 0 ? signs : _kshiftri_mask64(signs, 32))};
  }
}

// `sum` plus the run's int32 lanes against y's 32 values (iq_runs_avx2.h's run_lanes).
BLOOMERY_IQ_RUNS_AVX512 inline __m256i add_run_lanes(__m256i sum, const MaskedRun& run, const int8_t* y) {
  const __m256i zero = _mm256_setzero_si256(), yq = load256(y);
  return _mm256_dpwssd_epi32(sum, _mm256_dpbusd_epi32(zero, run.q, _mm256_mask_sub_epi8(yq, run.negative, zero, yq)),
                             run.scale);
}

// IQ1_S's runs in the same form: the lanes of the grid's -1 / 0 / 1 on y (the signs are the grid),
// each lane's four summed by dpbusd and times the run's scale by dpwssd, and the deltas' integer
// sum over the block (each run's sum of y times its signed scale) for all eight runs at once.
struct Iq1sBlock {
  alignas(32) uint32_t scales[8];  // run r's scale 2s + 1 (qh bits 12..14), high int16 zero
  __m256i signed_scales;           // int32 lane r: run r's scale, negative where qh bit 15 is set, in both int16
};

BLOOMERY_IQ_RUNS_AVX512 inline Iq1sBlock iq1s_block(const BlockIQ1_S& x) {
  Iq1sBlock b;
  const __m256i qh = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.qh)));
  const __m256i scale = _mm256_or_si256(
      _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(qh, 12), _mm256_set1_epi32(7)), 1), _mm256_set1_epi32(1));
  _mm256_store_si256(reinterpret_cast<__m256i*>(b.scales), scale);
  const __m256i negative = _mm256_srai_epi32(_mm256_slli_epi32(qh, 16), 31);
  const __m256i signed_scale = _mm256_sub_epi32(_mm256_xor_si256(scale, negative), negative);
  b.signed_scales =
      _mm256_or_si256(_mm256_and_si256(signed_scale, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(signed_scale, 16));
  return b;
}

// The block's deltas against y: the sum over runs of (y's sums of its two 16s) times the signed scale.
BLOOMERY_IQ_RUNS_AVX512 inline int iq1s_deltas(const Iq1sBlock& b, const BlockQ8_K& y) {
  const __m256i runs = _mm256_madd_epi16(load256(y.bsums), b.signed_scales);
  __m128i sum = _mm_add_epi32(_mm256_castsi256_si128(runs), _mm256_extracti128_si256(runs, 1));
  sum = _mm_add_epi32(sum, _mm_unpackhi_epi64(sum, sum));
  return _mm_cvtsi128_si32(_mm_add_epi32(sum, _mm_shuffle_epi32(sum, 1)));
}

// `sum` plus run r's lanes (grid `q`) against y's 32 values (iq_runs_avx2.h's iq1_lanes).
BLOOMERY_IQ_RUNS_AVX512 inline __m256i add_iq1s_lanes(__m256i sum, const Iq1sBlock& b, int r, __m256i q,
                                                      const int8_t* y) {
  const __m256i lanes =
      _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), _mm256_sign_epi8(load256(y), q));
  return _mm256_dpwssd_epi32(sum, lanes, _mm256_set1_epi32(static_cast<int>(b.scales[r])));
}

// IQ1_M's runs: the same lanes with a scale for each 16 elements, and the deltas' lanes: y negated
// where its group of 8's delta is negative (qh bits 3 and 7 of each byte, a mask), summed and scaled
// the same way.
struct Iq1mRun {
  __m256i q, scale;
  __mmask32 negative_delta;
};

BLOOMERY_IQ_RUNS_AVX512 inline Iq1mRun iq1m_run(const BlockIQ1_M& x, int r) {
  uint16_t qh;
  std::memcpy(&qh, x.qh + 2 * r, sizeof qh);
  const uint32_t groups = _pext_u32(qh, 0x8888);  // group k's delta sign in bit k
  return {run_grid(x, r),
          _mm256_mask_blend_epi32(0xf0, _mm256_set1_epi32(iq1m_scale(x, r, false)),
                                  _mm256_set1_epi32(iq1m_scale(x, r, true))),
          _cvtu32_mask32(_pdep_u32(groups, 0x01010101) * 0xff)};
}

// `sum` and `deltas` plus the run's lanes against y's 32 values (iq_runs_avx2.h's iq1_lanes and
// iq1m_delta_lanes).
BLOOMERY_IQ_RUNS_AVX512 inline void add_iq1m_lanes(__m256i& sum, __m256i& deltas, const Iq1mRun& run, const int8_t* y) {
  const __m256i zero = _mm256_setzero_si256(), ones = _mm256_set1_epi8(1), yq = load256(y);
  sum = _mm256_dpwssd_epi32(sum, _mm256_dpbusd_epi32(zero, ones, _mm256_sign_epi8(yq, run.q)), run.scale);
  const __m256i delta_y = _mm256_mask_sub_epi8(yq, run.negative_delta, zero, yq);
  deltas = _mm256_dpwssd_epi32(deltas, _mm256_dpbusd_epi32(zero, ones, delta_y), run.scale);
}

}  // namespace bloomery::quant::iq_runs
