// The AVX-512 tier's form of a 32-element run of the codebook types with signs (IQ2_XXS, IQ2_XS,
// IQ2_S, IQ3_XXS, IQ3_S), shared by its single-row dots (dot_iq_avx512.cc) and several-row dots
// (dot_iq_rows_avx512.cc). The AVX2 form's integer lanes (iq_runs_avx2.h), so the same bits, from
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

}  // namespace bloomery::quant::iq_runs
