// AVX2 dots of the 1- to 3-bit types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, TQ1_0,
// TQ2_0) against Q8_K, in the order of llama.cpp's x86 dots for them (which AVX-512 hosts run too):
// each 32-element run's products land in int32 lane (position in the run) / 4, scaled by their
// 16-element scales in int and summed over the block's eight runs; the block's lanes then go into
// a per-lane float accumulator in one FMA by d, summed once at the end (sum_of_8) and multiplied
// by the type's power-of-two factor. The codebook magnitudes are unsigned, so maddubs takes them
// as they are and the signs go onto the activations.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/dot_simd.h"
#include "quant/iq_codes.h"
#include "quant/reduce_avx2.h"

#define BLOOMERY_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace bloomery::quant {

namespace {

BLOOMERY_AVX2 inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }
BLOOMERY_AVX2 inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

inline uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Lanes of one run: unsigned magnitudes q times y (signs already on y), each int16 pair product
// times its 16 elements' scale (lo: elements 0..15 of the run, hi: 16..31).
BLOOMERY_AVX2 inline __m256i run_lanes(__m256i q, __m256i signed_y, int lo, int hi) {
  const __m256i scales =
      _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(hi)), _mm_set1_epi16(static_cast<int16_t>(lo)));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(q, signed_y), scales);
}

// Signed x signed bytes into int16 pairs (the IQ1 grids hold -1, 0, 1): maddubs needs an unsigned
// left side, so x's sign moves onto y.
BLOOMERY_AVX2 inline __m256i signed_pairs(__m256i x, __m256i y) {
  return _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

// y with the signs of 32 bits (bit k: element k negative), for the types that store all eight.
BLOOMERY_AVX2 inline __m256i apply_sign_bits(__m256i y, uint32_t bits) {
  const __m256i byte_of_bit = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  const __m256i bit_in_byte = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), byte_of_bit);
  const __m256i negative = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit_in_byte), bit_in_byte);
  return _mm256_sub_epi8(_mm256_xor_si256(y, negative), negative);
}

// y with the signs of four groups of 8 that store seven sign bits each (iq_even_signs).
BLOOMERY_AVX2 inline __m256i apply_even_signs(__m256i y, uint32_t g0, uint32_t g1, uint32_t g2, uint32_t g3) {
  const __m256i signs =
      _mm256_set_epi64x(static_cast<int64_t>(kIqEvenSignBytes[g3]), static_cast<int64_t>(kIqEvenSignBytes[g2]),
                        static_cast<int64_t>(kIqEvenSignBytes[g1]), static_cast<int64_t>(kIqEvenSignBytes[g0]));
  return _mm256_sign_epi8(y, signs);
}

BLOOMERY_AVX2 inline __m256i grid64(uint64_t e0, uint64_t e1, uint64_t e2, uint64_t e3) {
  return _mm256_set_epi64x(static_cast<int64_t>(e3), static_cast<int64_t>(e2), static_cast<int64_t>(e1),
                           static_cast<int64_t>(e0));
}

BLOOMERY_AVX2 inline __m256i block_lanes(const BlockIQ2_XXS& x, const BlockQ8_K& y) {
  __m256i sum = _mm256_setzero_si256();
  for (int r = 0; r < 8; ++r) {
    const uint32_t grid = load_u32(x.qs + 4 * r), aux = load_u32(x.qs + 4 * r + 2);
    const __m256i q = grid64(kIq2xxsGrid[grid & 0xff], kIq2xxsGrid[(grid >> 8) & 0xff],
                             kIq2xxsGrid[(grid >> 16) & 0xff], kIq2xxsGrid[grid >> 24]);
    const __m256i sy =
        apply_even_signs(load256(y.qs + 32 * r), aux & 127, (aux >> 7) & 127, (aux >> 14) & 127, (aux >> 21) & 127);
    const int scale = 2 * static_cast<int>(aux >> 28) + 1;
    sum = _mm256_add_epi32(sum, run_lanes(q, sy, scale, scale));
  }
  return sum;
}

BLOOMERY_AVX2 inline __m256i block_lanes(const BlockIQ2_XS& x, const BlockQ8_K& y) {
  __m256i sum = _mm256_setzero_si256();
  for (int r = 0; r < 8; ++r) {
    const uint16_t* g = x.qs + 4 * r;
    const __m256i q =
        grid64(kIq2xsGrid[g[0] & 511], kIq2xsGrid[g[1] & 511], kIq2xsGrid[g[2] & 511], kIq2xsGrid[g[3] & 511]);
    const __m256i sy = apply_even_signs(load256(y.qs + 32 * r), g[0] >> 9, g[1] >> 9, g[2] >> 9, g[3] >> 9);
    sum = _mm256_add_epi32(sum, run_lanes(q, sy, 2 * (x.scales[r] & 0x0f) + 1, 2 * (x.scales[r] >> 4) + 1));
  }
  return sum;
}

BLOOMERY_AVX2 inline __m256i block_lanes(const BlockIQ2_S& x, const BlockQ8_K& y) {
  __m256i sum = _mm256_setzero_si256();
  for (int r = 0; r < 8; ++r) {
    const uint8_t* g = x.qs + 4 * r;
    const int h = x.qh[r];
    const __m256i q = grid64(kIq2sGrid[g[0] | ((h << 8) & 0x300)], kIq2sGrid[g[1] | ((h << 6) & 0x300)],
                             kIq2sGrid[g[2] | ((h << 4) & 0x300)], kIq2sGrid[g[3] | ((h << 2) & 0x300)]);
    const __m256i sy = apply_sign_bits(load256(y.qs + 32 * r), load_u32(x.qs + kQKK / 8 + 4 * r));
    sum = _mm256_add_epi32(sum, run_lanes(q, sy, 2 * (x.scales[r] & 0x0f) + 1, 2 * (x.scales[r] >> 4) + 1));
  }
  return sum;
}

BLOOMERY_AVX2 inline __m256i block_lanes(const BlockIQ3_XXS& x, const BlockQ8_K& y) {
  __m256i sum = _mm256_setzero_si256();
  for (int r = 0; r < 8; ++r) {
    const uint8_t* g = x.qs + 8 * r;
    const __m256i q = _mm256_set_epi32(static_cast<int>(kIq3xxsGrid[g[7]]), static_cast<int>(kIq3xxsGrid[g[6]]),
                                       static_cast<int>(kIq3xxsGrid[g[5]]), static_cast<int>(kIq3xxsGrid[g[4]]),
                                       static_cast<int>(kIq3xxsGrid[g[3]]), static_cast<int>(kIq3xxsGrid[g[2]]),
                                       static_cast<int>(kIq3xxsGrid[g[1]]), static_cast<int>(kIq3xxsGrid[g[0]]));
    const uint32_t aux = load_u32(x.qs + kQKK / 4 + 4 * r);
    const __m256i sy =
        apply_even_signs(load256(y.qs + 32 * r), aux & 127, (aux >> 7) & 127, (aux >> 14) & 127, (aux >> 21) & 127);
    const int scale = 2 * static_cast<int>(aux >> 28) + 1;
    sum = _mm256_add_epi32(sum, run_lanes(q, sy, scale, scale));
  }
  return sum;
}

BLOOMERY_AVX2 inline __m256i block_lanes(const BlockIQ3_S& x, const BlockQ8_K& y) {
  __m256i sum = _mm256_setzero_si256();
  for (int r = 0; r < 8; ++r) {
    const uint8_t* g = x.qs + 8 * r;
    const int h = x.qh[r];
    auto entry = [&](int k) { return static_cast<int>(kIq3sGrid[g[k] | ((h << (8 - k)) & 256)]); };
    const __m256i q = _mm256_set_epi32(entry(7), entry(6), entry(5), entry(4), entry(3), entry(2), entry(1), entry(0));
    const __m256i sy = apply_sign_bits(load256(y.qs + 32 * r), load_u32(x.signs + 4 * r));
    const int scale = 2 * ((x.scales[r / 2] >> (4 * (r % 2))) & 0x0f) + 1;
    sum = _mm256_add_epi32(sum, run_lanes(q, sy, scale, scale));
  }
  return sum;
}

// The common frame: block_lanes(block, y) (overloaded per type, above) gives a block's int32 lanes.
template <typename Block>
BLOOMERY_AVX2 inline float grid_dot(const void* w, const void* a, int64_t n, float factor) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = half_to_float(x[i].d) * y[i].d;
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(block_lanes(x[i], y[i])), acc);
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
      uint16_t qh;
      std::memcpy(&qh, x[i].qh + r, sizeof qh);
      const uint8_t* g = x[i].qs + 4 * r;
      const __m256i q = grid64(kIq1sGrid[g[0] | ((qh << 8) & 0x700)], kIq1sGrid[g[1] | ((qh << 5) & 0x700)],
                               kIq1sGrid[g[2] | ((qh << 2) & 0x700)], kIq1sGrid[g[3] | ((qh >> 1) & 0x700)]);
      const int scale = 2 * ((qh >> 12) & 7) + 1;
      sum = _mm256_add_epi32(sum, _mm256_madd_epi16(signed_pairs(q, load256(y[i].qs + 32 * r)),
                                                    _mm256_set1_epi16(static_cast<int16_t>(scale))));
      deltas += (y[i].bsums[2 * r] + y[i].bsums[2 * r + 1]) * (qh & 0x8000 ? -1 : 1) * scale;
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
  const __m256i ones = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps(), acc_deltas = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    uint16_t sc[4];
    std::memcpy(sc, x[i].scales, sizeof sc);
    __m256i sum = _mm256_setzero_si256(), sum_deltas = _mm256_setzero_si256();
    for (int r = 0; r < 8; ++r) {
      const uint8_t* g = x[i].qs + 4 * r;
      const uint8_t h0 = x[i].qh[2 * r], h1 = x[i].qh[2 * r + 1];
      const __m256i q = grid64(kIq1sGrid[g[0] | ((h0 << 8) & 0x700)], kIq1sGrid[g[1] | ((h0 << 4) & 0x700)],
                               kIq1sGrid[g[2] | ((h1 << 8) & 0x700)], kIq1sGrid[g[3] | ((h1 << 4) & 0x700)]);
      auto sign = [](bool negative) {
        return negative ? static_cast<int64_t>(-1) : static_cast<int64_t>(0x0101010101010101);
      };
      const __m256i delta = _mm256_set_epi64x(sign(h1 & 0x80), sign(h1 & 0x08), sign(h0 & 0x80), sign(h0 & 0x08));
      const int lo = 2 * ((sc[r / 2] >> (6 * (r % 2))) & 7) + 1, hi = 2 * ((sc[r / 2] >> (6 * (r % 2) + 3)) & 7) + 1;
      const __m256i scales =
          _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(hi)), _mm_set1_epi16(static_cast<int16_t>(lo)));
      const __m256i yq = load256(y[i].qs + 32 * r);
      sum = _mm256_add_epi32(sum, _mm256_madd_epi16(signed_pairs(q, yq), scales));
      sum_deltas = _mm256_add_epi32(sum_deltas,
                                    _mm256_madd_epi16(_mm256_maddubs_epi16(ones, _mm256_sign_epi8(yq, delta)), scales));
    }
    const __m256 d = _mm256_set1_ps(y[i].d * half_to_float(iq1m_block_scale(x[i])));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sum), acc);
    acc_deltas = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sum_deltas), acc_deltas);
  }
  return std::fma(kIq1Delta, sum_of_8(acc_deltas), sum_of_8(acc));
}

// The ternary types in llama.cpp's order: codes 0..2 (for -1..1) times y summed in int16 over the
// block (exact: at most 8 x 512 plus Q8_K's sums), less Q8_K's per-16 sums in int16 lane k (so
// int32 lane m takes the sum of y over elements 32m..32m + 31), then one FMA by d per block.
namespace {

// The codes of TQ1_0's 32 bytes of five digits, digit n: bytes * 3^n (mod 256), times 3, >> 8.
BLOOMERY_AVX2 inline __m256i trits(__m256i bytes, int n) {
  static constexpr int16_t kPow3[5] = {1, 3, 9, 27, 81};
  const __m256i mask = _mm256_set1_epi16(0xff), pow = _mm256_set1_epi16(kPow3[n]), three = _mm256_set1_epi16(3 << 8);
  const __m256i even = _mm256_and_si256(_mm256_mullo_epi16(_mm256_and_si256(bytes, mask), pow), mask);
  const __m256i odd = _mm256_and_si256(_mm256_mullo_epi16(_mm256_srli_epi16(bytes, 8), pow), mask);
  return _mm256_or_si256(_mm256_mulhi_epu16(even, three), _mm256_slli_epi16(_mm256_mulhi_epu16(odd, three), 8));
}

// The codes of run r (elements 32r..32r + 31) of a block.
BLOOMERY_AVX2 inline __m256i run_codes(const BlockTQ1_0& x, int r) {
  if (r < 5) return trits(load256(x.qs), r);  // elements 32r..32r + 31: digit r of bytes 0..31
  // Elements 160..239: digits of bytes 32..47, two digits a run; 240..255: digit k / 4 of qh[k % 4].
  const __m128i tail = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.qs + 32));
  const __m256i both = _mm256_set_m128i(tail, tail);
  if (r < 7) {
    const int n0 = 2 * (r - 5);
    return _mm256_blend_epi32(trits(both, n0), trits(both, n0 + 1), 0xf0);
  }
  const __m128i qh = _mm_set1_epi32(static_cast<int>(load_u32(x.qh)));
  const __m256i qh2 = _mm256_set_m128i(qh, qh);
  auto digit = [&](int n) BLOOMERY_AVX2 { return _mm256_castsi256_si128(trits(qh2, n)); };
  const __m128i last =
      _mm_unpacklo_epi64(_mm_unpacklo_epi32(digit(0), digit(1)), _mm_unpacklo_epi32(digit(2), digit(3)));
  return _mm256_set_m128i(last, _mm256_extracti128_si256(trits(both, 4), 1));
}

// The codes of run r (elements 32r..32r + 31) of a block.
BLOOMERY_AVX2 inline __m256i run_codes(const BlockTQ2_0& x, int r) {
  const __m256i q = load256(x.qs + 32 * (r / 4));
  return _mm256_and_si256(_mm256_srli_epi16(q, 2 * (r % 4)), _mm256_set1_epi8(3));
}

template <typename Block>
BLOOMERY_AVX2 inline float ternary_dot(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    __m256i sum = _mm256_setzero_si256();
    for (int r = 0; r < 8; ++r)
      sum = _mm256_add_epi16(sum, _mm256_maddubs_epi16(run_codes(x[i], r), load256(y[i].qs + 32 * r)));
    sum = _mm256_madd_epi16(_mm256_sub_epi16(sum, load256(y[i].bsums)), _mm256_set1_epi16(1));
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
