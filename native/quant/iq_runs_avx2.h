// The 1- to 3-bit types' 32-element runs decoded for the byte products of llama.cpp's x86 dots,
// and those products: shared by the single-row AVX2 dots (dot_iq_avx2.cc) and the AVX-512 tier's
// several-row dots (dot_iq_rows_avx512.cc), which decode a block once for all their rows. Both
// take the same integer lanes through the same float steps, so they agree bit for bit.
// Include only from SIMD-tier code.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "quant/blocks.h"
#include "quant/iq_codes.h"

#define BLOOMERY_IQ_RUNS __attribute__((target("avx2,fma,f16c")))

namespace bloomery::quant::iq_runs {

BLOOMERY_IQ_RUNS inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

inline uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

BLOOMERY_IQ_RUNS inline __m256i grid64(uint64_t e0, uint64_t e1, uint64_t e2, uint64_t e3) {
  return _mm256_set_epi64x(static_cast<int64_t>(e3), static_cast<int64_t>(e2), static_cast<int64_t>(e1),
                           static_cast<int64_t>(e0));
}

// int16 `lo` in the eight int16 of elements 0..15 of a run, `hi` in those of 16..31.
BLOOMERY_IQ_RUNS inline __m256i half_scales(int lo, int hi) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(hi)), _mm_set1_epi16(static_cast<int16_t>(lo)));
}

// +1 / -1 bytes of four groups of 8 that store seven sign bits each (iq_even_signs), from the
// groups' 4 x 7 stored bits (run_sign_fields).
BLOOMERY_IQ_RUNS inline __m256i even_sign_bytes(uint32_t fields) {
  return grid64(kIqEvenSignBytes[fields & 127], kIqEvenSignBytes[(fields >> 7) & 127],
                kIqEvenSignBytes[(fields >> 14) & 127], kIqEvenSignBytes[(fields >> 21) & 127]);
}

// +1 / -1 bytes of 32 sign bits (bit k: element k negative), for the types that store all eight.
BLOOMERY_IQ_RUNS inline __m256i sign_bit_bytes(uint32_t bits) {
  const __m256i byte_of_bit = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  const __m256i bit_in_byte = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), byte_of_bit);
  const __m256i negative = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit_in_byte), bit_in_byte);
  return _mm256_or_si256(negative, _mm256_set1_epi8(1));
}

// A run of a codebook type: unsigned magnitudes, the +1 / -1 signs they put on y, and the scales.
struct GridRun {
  __m256i q, signs, scales;
};

// The run's int32 lanes: lane l sums elements 4l..4l + 3, each int16 pair times its 16 elements' scale.
BLOOMERY_IQ_RUNS inline __m256i run_lanes(const GridRun& run, const int8_t* y) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(run.q, _mm256_sign_epi8(load256(y), run.signs)), run.scales);
}

// Eight bytes of two 4-bit scales each (low nibble first) as words: 2s + 1 of byte r's low nibble
// at r, of its high nibble at 8 + r.
BLOOMERY_IQ_RUNS inline void nibble_scale_words(const uint8_t* scales, uint32_t* words) {
  const __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales)));
  const __m256i one = _mm256_set1_epi32(1), nibble = _mm256_set1_epi32(15);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(words),
                      _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(bytes, nibble), 1), one));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(words) + 1,
                      _mm256_or_si256(_mm256_slli_epi32(_mm256_srli_epi32(bytes, 4), 1), one));
}

// The types that store seven of each group's eight signs (IQ2_XXS, IQ2_XS, IQ3_XXS), in parts both
// tiers take (decode_run below, iq_runs_avx512.h): run r's grid magnitudes, its 4 x 7
// stored sign bits (group k's in bits 7k..7k + 6), and its scales as words of scale_words(x):
// words[lo_scale_word(x, r)] for elements 0..15, words[hi_scale_word(x, r)] for 16..31.
BLOOMERY_IQ_RUNS inline __m256i run_grid(const BlockIQ2_XXS& x, int r) {
  const auto* g = reinterpret_cast<const uint8_t*>(x.qs + 4 * r);
  return grid64(kIq2xxsGrid[g[0]], kIq2xxsGrid[g[1]], kIq2xxsGrid[g[2]], kIq2xxsGrid[g[3]]);
}

inline uint32_t run_sign_fields(const BlockIQ2_XXS& x, int r) { return load_u32(x.qs + 4 * r + 2) & 0x0fffffff; }

// IQ2_XXS's scale of run r is the top nibble of uint32 2r + 1 of qs: the words are qs's uint32s.
inline int lo_scale_word(const BlockIQ2_XXS&, int r) { return 2 * r + 1; }
inline int hi_scale_word(const BlockIQ2_XXS& x, int r) { return lo_scale_word(x, r); }

BLOOMERY_IQ_RUNS inline void scale_words(const BlockIQ2_XXS& x, uint32_t* words) {
  for (int half = 0; half < 2; ++half) {
    const __m256i top = _mm256_srli_epi32(load256(x.qs + 16 * half), 28);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(words) + half,
                        _mm256_or_si256(_mm256_slli_epi32(top, 1), _mm256_set1_epi32(1)));
  }
}

BLOOMERY_IQ_RUNS inline __m256i run_grid(const BlockIQ2_XS& x, int r) {
  const uint16_t* g = x.qs + 4 * r;
  return grid64(kIq2xsGrid[g[0] & 511], kIq2xsGrid[g[1] & 511], kIq2xsGrid[g[2] & 511], kIq2xsGrid[g[3] & 511]);
}

// The top seven bits of the run's four uint16, read as one uint64 (four 16-bit reads measured half as
// fast: GCC spilled one and reloaded it wider, which stalls store forwarding).
inline uint32_t run_sign_fields(const BlockIQ2_XS& x, int r) {
  uint64_t g;
  std::memcpy(&g, x.qs + 4 * r, sizeof g);
  return static_cast<uint32_t>(((g >> 9) & 0x7f) | ((g >> 18) & 0x3f80) | ((g >> 27) & 0x1fc000) |
                               ((g >> 36) & 0xfe00000));
}

// IQ2_XS's words: run r's low-nibble scale at r, its high-nibble one at 8 + r.
inline int lo_scale_word(const BlockIQ2_XS&, int r) { return r; }
inline int hi_scale_word(const BlockIQ2_XS&, int r) { return 8 + r; }

BLOOMERY_IQ_RUNS inline void scale_words(const BlockIQ2_XS& x, uint32_t* words) { nibble_scale_words(x.scales, words); }

BLOOMERY_IQ_RUNS inline __m256i run_grid(const BlockIQ3_XXS& x, int r) {
  const uint8_t* g = x.qs + 8 * r;
  return _mm256_set_epi32(static_cast<int>(kIq3xxsGrid[g[7]]), static_cast<int>(kIq3xxsGrid[g[6]]),
                          static_cast<int>(kIq3xxsGrid[g[5]]), static_cast<int>(kIq3xxsGrid[g[4]]),
                          static_cast<int>(kIq3xxsGrid[g[3]]), static_cast<int>(kIq3xxsGrid[g[2]]),
                          static_cast<int>(kIq3xxsGrid[g[1]]), static_cast<int>(kIq3xxsGrid[g[0]]));
}

inline uint32_t run_sign_fields(const BlockIQ3_XXS& x, int r) { return load_u32(x.qs + kQKK / 4 + 4 * r) & 0x0fffffff; }

// IQ3_XXS's scale of run r is the top nibble of the uint32 after the grid indices, r: the words.
inline int lo_scale_word(const BlockIQ3_XXS&, int r) { return r; }
inline int hi_scale_word(const BlockIQ3_XXS& x, int r) { return lo_scale_word(x, r); }

BLOOMERY_IQ_RUNS inline void scale_words(const BlockIQ3_XXS& x, uint32_t* words) {
  const __m256i top = _mm256_srli_epi32(load256(x.qs + kQKK / 4), 28);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(words),
                      _mm256_or_si256(_mm256_slli_epi32(top, 1), _mm256_set1_epi32(1)));
}

// The types that store every sign as a bit (IQ2_S, IQ3_S), in the same parts but the signs:
// run r's 32 sign bits are the uint32 at run_sign_bits(x, r), and the runs' are consecutive.
BLOOMERY_IQ_RUNS inline __m256i run_grid(const BlockIQ2_S& x, int r) {
  const uint8_t* g = x.qs + 4 * r;
  const int h = x.qh[r];
  return grid64(kIq2sGrid[g[0] | ((h << 8) & 0x300)], kIq2sGrid[g[1] | ((h << 6) & 0x300)],
                kIq2sGrid[g[2] | ((h << 4) & 0x300)], kIq2sGrid[g[3] | ((h << 2) & 0x300)]);
}

inline const uint8_t* run_sign_bits(const BlockIQ2_S& x, int r) { return x.qs + kQKK / 8 + 4 * r; }

// IQ2_S's scales are IQ2_XS's.
inline int lo_scale_word(const BlockIQ2_S&, int r) { return r; }
inline int hi_scale_word(const BlockIQ2_S&, int r) { return 8 + r; }

BLOOMERY_IQ_RUNS inline void scale_words(const BlockIQ2_S& x, uint32_t* words) { nibble_scale_words(x.scales, words); }

BLOOMERY_IQ_RUNS inline __m256i run_grid(const BlockIQ3_S& x, int r) {
  const uint8_t* g = x.qs + 8 * r;
  const int h = x.qh[r];
  auto entry = [&](int k) { return static_cast<int>(kIq3sGrid[g[k] | ((h << (8 - k)) & 256)]); };
  return _mm256_set_epi32(entry(7), entry(6), entry(5), entry(4), entry(3), entry(2), entry(1), entry(0));
}

inline const uint8_t* run_sign_bits(const BlockIQ3_S& x, int r) { return x.signs + 4 * r; }

// IQ3_S's run r has the low nibble of scales[r / 2] for even r, the high one for odd: words 0..3
// are the low nibbles of the four bytes, 4..7 the high ones.
inline int lo_scale_word(const BlockIQ3_S&, int r) { return 4 * (r % 2) + r / 2; }
inline int hi_scale_word(const BlockIQ3_S& x, int r) { return lo_scale_word(x, r); }

BLOOMERY_IQ_RUNS inline void scale_words(const BlockIQ3_S& x, uint32_t* words) {
  const __m128i bytes = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(static_cast<int>(load_u32(x.scales))));
  const __m128i one = _mm_set1_epi32(1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(words),
                   _mm_or_si128(_mm_slli_epi32(_mm_and_si128(bytes, _mm_set1_epi32(15)), 1), one));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(words) + 1,
                   _mm_or_si128(_mm_slli_epi32(_mm_srli_epi32(bytes, 4), 1), one));
}

// A run's +1 / -1 sign bytes: from its seven stored bits per group of 8, or its 32 sign bits.
template <typename Block>
BLOOMERY_IQ_RUNS inline __m256i run_sign_bytes(const Block& x, int r) {
  return even_sign_bytes(run_sign_fields(x, r));
}

BLOOMERY_IQ_RUNS inline __m256i run_sign_bytes(const BlockIQ2_S& x, int r) {
  return sign_bit_bytes(load_u32(run_sign_bits(x, r)));
}

BLOOMERY_IQ_RUNS inline __m256i run_sign_bytes(const BlockIQ3_S& x, int r) {
  return sign_bit_bytes(load_u32(run_sign_bits(x, r)));
}

// The AVX2 form of run r of a codebook type with signs, whose block's scale_words are `words`.
template <typename Block>
BLOOMERY_IQ_RUNS inline GridRun decode_run(const Block& x, int r, const uint32_t* words) {
  const int lo = lo_scale_word(x, r), hi = hi_scale_word(x, r);
  const __m256i scales = lo == hi ? _mm256_set1_epi16(static_cast<int16_t>(words[lo]))
                                  : half_scales(static_cast<int>(words[lo]), static_cast<int>(words[hi]));
  return {run_grid(x, r), run_sign_bytes(x, r), scales};
}

// A run of IQ1_S or IQ1_M: the grid's -1 / 0 / 1 values (the signs they put on y), the scales, and
// the delta: IQ1_S's sign times scale for the run's sum of y, IQ1_M's +1 / -1
// bytes per group of 8.
struct Iq1Run {
  __m256i q, scales;
  __m256i delta_signs;  // IQ1_M
  int delta_scale;      // IQ1_S
};

BLOOMERY_IQ_RUNS inline __m256i iq1_lanes(const Iq1Run& run, __m256i y) {
  // sign(y, q) is 0 where q is: the grid's magnitudes are the ones maddubs multiplies it by.
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), _mm256_sign_epi8(y, run.q)), run.scales);
}

// IQ1_M's delta lanes: the signed sums of y's pairs, times the scales.
BLOOMERY_IQ_RUNS inline __m256i iq1m_delta_lanes(const Iq1Run& run, __m256i y) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), _mm256_sign_epi8(y, run.delta_signs)), run.scales);
}

// IQ1_S's run r: its grid's -1 / 0 / 1 bytes (11-bit indices: a byte of qs, three bits of qh[r]).
BLOOMERY_IQ_RUNS inline __m256i run_grid(const BlockIQ1_S& x, int r) {
  uint16_t qh;
  std::memcpy(&qh, x.qh + r, sizeof qh);
  const uint8_t* g = x.qs + 4 * r;
  return grid64(kIq1sGrid[g[0] | ((qh << 8) & 0x700)], kIq1sGrid[g[1] | ((qh << 5) & 0x700)],
                kIq1sGrid[g[2] | ((qh << 2) & 0x700)], kIq1sGrid[g[3] | ((qh >> 1) & 0x700)]);
}

BLOOMERY_IQ_RUNS inline Iq1Run decode_run(const BlockIQ1_S& x, int r) {
  uint16_t qh;
  std::memcpy(&qh, x.qh + r, sizeof qh);
  const __m256i q = run_grid(x, r);
  const int scale = 2 * ((qh >> 12) & 7) + 1;
  return {q, _mm256_set1_epi16(static_cast<int16_t>(scale)), _mm256_setzero_si256(), (qh & 0x8000 ? -1 : 1) * scale};
}

// IQ1_M's run r: its grid's -1 / 0 / 1 bytes (11-bit indices: a byte of qs, three bits of a qh byte).
BLOOMERY_IQ_RUNS inline __m256i run_grid(const BlockIQ1_M& x, int r) {
  const uint8_t* g = x.qs + 4 * r;
  const uint8_t h0 = x.qh[2 * r], h1 = x.qh[2 * r + 1];
  return grid64(kIq1sGrid[g[0] | ((h0 << 8) & 0x700)], kIq1sGrid[g[1] | ((h0 << 4) & 0x700)],
                kIq1sGrid[g[2] | ((h1 << 8) & 0x700)], kIq1sGrid[g[3] | ((h1 << 4) & 0x700)]);
}

// IQ1_M's scale of elements 0..15 (hi: 16..31) of run r: three bits of the packed scales, as 2s + 1.
inline int iq1m_scale(const BlockIQ1_M& x, int r, bool hi) {
  uint16_t sc;
  std::memcpy(&sc, x.scales + 2 * (r / 2), sizeof sc);
  return 2 * ((sc >> (6 * (r % 2) + (hi ? 3 : 0))) & 7) + 1;
}

BLOOMERY_IQ_RUNS inline Iq1Run decode_run(const BlockIQ1_M& x, int r) {
  const uint8_t h0 = x.qh[2 * r], h1 = x.qh[2 * r + 1];
  const __m256i q = run_grid(x, r);
  auto sign = [](bool negative) {
    return negative ? static_cast<int64_t>(-1) : static_cast<int64_t>(0x0101010101010101);
  };
  return {q, half_scales(iq1m_scale(x, r, false), iq1m_scale(x, r, true)),
          _mm256_set_epi64x(sign(h1 & 0x80), sign(h1 & 0x08), sign(h0 & 0x80), sign(h0 & 0x08)), 0};
}

// The ternary types' codes 0..2 (for -1..1) of run r (elements 32r..32r + 31) of a block.

// The codes of TQ1_0's 32 bytes of five digits, digit n: bytes * 3^n (mod 256), times 3, >> 8.
BLOOMERY_IQ_RUNS inline __m256i trits(__m256i bytes, int n) {
  static constexpr int16_t kPow3[5] = {1, 3, 9, 27, 81};
  const __m256i mask = _mm256_set1_epi16(0xff), pow = _mm256_set1_epi16(kPow3[n]), three = _mm256_set1_epi16(3 << 8);
  const __m256i even = _mm256_and_si256(_mm256_mullo_epi16(_mm256_and_si256(bytes, mask), pow), mask);
  const __m256i odd = _mm256_and_si256(_mm256_mullo_epi16(_mm256_srli_epi16(bytes, 8), pow), mask);
  return _mm256_or_si256(_mm256_mulhi_epu16(even, three), _mm256_slli_epi16(_mm256_mulhi_epu16(odd, three), 8));
}

BLOOMERY_IQ_RUNS inline __m256i run_codes(const BlockTQ1_0& x, int r) {
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
  auto digit = [&](int n) BLOOMERY_IQ_RUNS { return _mm256_castsi256_si128(trits(qh2, n)); };
  const __m128i last =
      _mm_unpacklo_epi64(_mm_unpacklo_epi32(digit(0), digit(1)), _mm_unpacklo_epi32(digit(2), digit(3)));
  return _mm256_set_m128i(last, _mm256_extracti128_si256(trits(both, 4), 1));
}

BLOOMERY_IQ_RUNS inline __m256i run_codes(const BlockTQ2_0& x, int r) {
  const __m256i q = load256(x.qs + 32 * (r / 4));
  return _mm256_and_si256(_mm256_srli_epi16(q, 2 * (r % 4)), _mm256_set1_epi8(3));
}

// A ternary block's int32 lanes from its eight runs' codes: the codes times y summed in int16
// over the block (exact: at most 8 x 512 plus Q8_K's sums), less Q8_K's per-16 sums in int16 lane
// k, so int32 lane m takes the sum of y over elements 32m..32m + 31.
BLOOMERY_IQ_RUNS inline __m256i ternary_lanes(const __m256i* codes, const BlockQ8_K& y) {
  __m256i sum = _mm256_setzero_si256();
  for (int r = 0; r < 8; ++r) sum = _mm256_add_epi16(sum, _mm256_maddubs_epi16(codes[r], load256(y.qs + 32 * r)));
  return _mm256_madd_epi16(_mm256_sub_epi16(sum, load256(y.bsums)), _mm256_set1_epi16(1));
}

}  // namespace bloomery::quant::iq_runs
