// The AVX-512 tier's single-row dots (vec_dot, decode) of the types that store seven of each group's
// eight signs: IQ2_XXS, IQ2_XS, IQ3_XXS. The AVX2 dots' integer lanes and float steps, so the same
// bits, from a third fewer instructions, which is what bounds these dots (a decode step with every
// routed expert of an IQ2_XXS model on the H200 host's CPU streamed 19-20 GB/s through the AVX2 dot,
// 27 through this one, and 18-24 through ik_llama.cpp's): a run's signs negate y under a 32-bit
// mask instead of four table lookups and three inserts (two runs' 4 x 7 stored bits spread to bytes
// by one pdep, each byte's parity folded into its top bit), and VNNI does the products: dpbusd sums
// each lane's four, and dpwssd multiplies the lane by its scale (the lane fits in int16, at most
// 4 x 62 x 128, and the scale word's high half is zero, so the product is exact).
#include <immintrin.h>

#include "quant/blocks.h"
#include "quant/dot_simd.h"
#include "quant/iq_runs_avx2.h"
#include "quant/reduce_avx2.h"

#define BLOOMERY_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,bmi2,fma,f16c")))

namespace bloomery::quant {

namespace {

using namespace iq_runs;

// Two runs' sign masks (bit j: element j negative), the first in the low 32 bits: each run's
// 4 x 7 stored bits spread to four bytes, and each byte's eighth sign, which makes its count of
// negatives even, its parity.
BLOOMERY_AVX512 inline __mmask64 two_sign_masks(uint32_t fields0, uint32_t fields1) {
  const uint64_t bits = _pdep_u64(uint64_t{fields0} | uint64_t{fields1} << 28, 0x7f7f7f7f7f7f7f7full);
  uint64_t parity = bits ^ (bits >> 4);
  parity ^= parity >> 2;
  parity ^= parity >> 1;
  return _cvtu64_mask64(bits | (parity & 0x0101010101010101ull) << 7);
}

template <typename Block>
BLOOMERY_AVX512 inline float even_signs_dot(const void* w, const void* a, int64_t n, float factor) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i zero = _mm256_setzero_si256();
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = _cvtsh_ss(x[i].d) * y[i].d;
    alignas(32) uint32_t words[16];
    scale_words(x[i], words);
    __m256i sum = zero;
    for (int r = 0; r < 8; r += 2) {
      const __mmask64 signs = two_sign_masks(run_sign_fields(x[i], r), run_sign_fields(x[i], r + 1));
      for (int k = 0; k < 2; ++k) {
        const __mmask32 negative = static_cast<__mmask32>(k == 0 ? signs : _kshiftri_mask64(signs, 32));
        const __m256i yq = load256(y[i].qs + 32 * (r + k));
        const __m256i lanes =
            _mm256_dpbusd_epi32(zero, run_grid(x[i], r + k), _mm256_mask_sub_epi8(yq, negative, zero, yq));
        const int lo = lo_scale_word(x[i], r + k), hi = hi_scale_word(x[i], r + k);
        const __m256i scale = lo == hi ? _mm256_set1_epi32(static_cast<int>(words[lo]))
                                       : _mm256_mask_blend_epi32(0xf0, _mm256_set1_epi32(static_cast<int>(words[lo])),
                                                                 _mm256_set1_epi32(static_cast<int>(words[hi])));
        sum = _mm256_dpwssd_epi32(sum, lanes, scale);
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sum), acc);
  }
  return factor * sum_of_8(acc);
}

}  // namespace

BLOOMERY_AVX512 float vec_dot_iq2_xxs_q8_k_avx512(const void* w, const void* a, int64_t n) {
  return even_signs_dot<BlockIQ2_XXS>(w, a, n, 0.125f);
}

BLOOMERY_AVX512 float vec_dot_iq2_xs_q8_k_avx512(const void* w, const void* a, int64_t n) {
  return even_signs_dot<BlockIQ2_XS>(w, a, n, 0.125f);
}

BLOOMERY_AVX512 float vec_dot_iq3_xxs_q8_k_avx512(const void* w, const void* a, int64_t n) {
  return even_signs_dot<BlockIQ3_XXS>(w, a, n, 0.25f);
}

}  // namespace bloomery::quant
