// AVX2 (+FMA, F16C) dots. Integer products go through maddubs (unsigned x signed bytes
// into int16 pairs, which cannot saturate for these value ranges) and madd (int16 pairs
// into int32, where the sub-block scales are applied); floats accumulate per lane and
// are summed once at the end.
// GCC 12's AVX-512 intrinsics start unmasked results from an undefined register, which it then
// reports as uninitialized where they inline into the 512-bit kernels below.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "quant/blocks.h"
#include "quant/dot_simd.h"
#include "quant/float_dot.h"
#include "quant/float_formats.h"
#include "quant/q3k_scales_simd.h"
#include "quant/reduce_avx2.h"

#define BLOOMERY_AVX2 __attribute__((target("avx2,fma,f16c")))
// AVX2 with AVX-512's VNNI byte dots on 256-bit registers (hosts of the AVX-512 tier).
// AVX2 with AVX-512's byte shuffles and VNNI byte dots on 512-bit registers (hosts of the AVX-512 tier).
#define BLOOMERY_AVX2_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

namespace bloomery::quant {

namespace {

BLOOMERY_AVX2 inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

BLOOMERY_AVX2 inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
BLOOMERY_AVX2 inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

BLOOMERY_AVX2 inline __m256 load_bf16x8(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p)), 16));
}

// Signed x signed bytes, summed in fours into eight int32: maddubs needs an unsigned
// left side, so move x's sign onto y. `abs_x` is x's absolute values (_mm256_sign_epi8(x, x)),
// made once where one x meets several y.
BLOOMERY_AVX2 inline __m256i dot_i8(__m256i abs_x, __m256i x, __m256i y) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(abs_x, _mm256_sign_epi8(y, x)), _mm256_set1_epi16(1));
}
BLOOMERY_AVX2 inline __m256i dot_i8(__m256i x, __m256i y) { return dot_i8(_mm256_sign_epi8(x, x), x, y); }

// The 32 codes of a 16-byte nibble array in element order: low nibbles are elements
// 0..15, high nibbles 16..31.
BLOOMERY_AVX2 inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));
}

BLOOMERY_AVX2 inline __m256i codebook(const int8_t* values) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values)));
}

// The sum of eight int32 lanes (exact: the order of integer additions does not matter).
BLOOMERY_AVX2 inline int sum_of_lanes(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 1)));
}

// Unsigned x signed bytes, summed in fours into eight int32 (x < 32, so maddubs cannot saturate).
BLOOMERY_AVX2 inline __m256i dot_u8_i8(__m256i x, __m256i y) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1));
}

// The 32 bits of a Q5 block's qh as 32 bytes, 0xff where element j's fifth bit is set.
BLOOMERY_AVX2 inline __m256i fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof bits);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
  const __m256i bit_of_byte = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit_of_byte), bit_of_byte);
}

// The 32-element formats with a 16-value codebook (IQ4_NL, MXFP4) in llama.cpp's AVX2 order:
// even and odd blocks in two accumulators, added before the horizontal sum; an odd last block
// is added after it, its integer dot scaled in one FMA.
template <typename Block, typename Scale>
BLOOMERY_AVX2 inline float codebook_dot(const Block* x, const BlockQ8_0* y, int64_t nb, const int8_t* values,
                                        Scale scale) {
  const __m256i table = codebook(values);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 1 < nb; i += 2) {
    for (int k = 0; k < 2; ++k) {
      const __m256i q = _mm256_shuffle_epi8(table, unpack_nibbles(x[i + k].qs));
      acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(scale(x[i + k], y[i + k])),
                               _mm256_cvtepi32_ps(dot_i8(q, load256(y[i + k].qs))), acc[k]);
    }
  }
  float sum = sum_of_8(_mm256_add_ps(acc[0], acc[1]));
  if (i < nb) sum = std::fma(scale(x[i], y[i]), static_cast<float>(codebook_block_dot(x[i].qs, y[i].qs, values)), sum);
  return sum;
}

}  // namespace

// F32 rows (the MoE router) and F16 rows, in llama.cpp's order (float_dot.h).
BLOOMERY_AVX2 float vec_dot_f32_f32_avx2(const void* w, const void* a, int64_t n) {
  return dot_f32_avx2(static_cast<const float*>(w), static_cast<const float*>(a), n);
}

BLOOMERY_AVX2 float vec_dot_f16_f16_avx2(const void* w, const void* a, int64_t n) {
  return dot_f16_avx2(static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a), n);
}

// BF16 in llama.cpp's AVX2 order: four accumulators over 32-element steps, folded
// (c0 + c2) + (c1 + c3) and summed as hsum_float_8, the rest added in double. BF16 products are
// exact in float, so fused or not, each step rounds once.
BLOOMERY_AVX2 float vec_dot_bf16_bf16_avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k)
      acc[k] = _mm256_fmadd_ps(load_bf16x8(x + i + 8 * k), load_bf16x8(y + i + 8 * k), acc[k]);
  }
  double sum = sum_of_8(fold_4(acc));
  for (; i < n; ++i) sum += bf16_to_fp32(x[i]) * bf16_to_fp32(y[i]);
  return static_cast<float>(sum);
}

BLOOMERY_AVX2 float vec_dot_q8_0_q8_0_avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256 d = _mm256_set1_ps(half_to_float(x[i].d) * half_to_float(y[i].d));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(load256(x[i].qs), load256(y[i].qs))), acc);
  }
  return sum_of_8(acc);
}

BLOOMERY_AVX2 float vec_dot_q4_0_q8_0_avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256 d = _mm256_set1_ps(half_to_float(x[i].d) * half_to_float(y[i].d));
    const __m256i q = _mm256_sub_epi8(unpack_nibbles(x[i].qs), _mm256_set1_epi8(8));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(q, load256(y[i].qs))), acc);
  }
  return sum_of_8(acc);
}

BLOOMERY_AVX2 float vec_dot_q4_1_q8_1_avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  __m256 acc = _mm256_setzero_ps();
  float offsets = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    offsets = std::fma(half_to_float(x[i].m), half_to_float(y[i].s), offsets);
    const __m256 d = _mm256_set1_ps(half_to_float(x[i].d) * half_to_float(y[i].d));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_u8_i8(unpack_nibbles(x[i].qs), load256(y[i].qs))), acc);
  }
  return sum_of_8(acc) + offsets;
}

BLOOMERY_AVX2 float vec_dot_q5_0_q8_0_avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256 d = _mm256_set1_ps(half_to_float(x[i].d) * half_to_float(y[i].d));
    // Codes 0..31 less 16: a clear fifth bit sets the byte's top four bits.
    const __m256i high = _mm256_andnot_si256(fifth_bits(x[i].qh), _mm256_set1_epi8(static_cast<char>(0xf0)));
    const __m256i q = _mm256_or_si256(unpack_nibbles(x[i].qs), high);
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(q, load256(y[i].qs))), acc);
  }
  return sum_of_8(acc);
}

BLOOMERY_AVX2 float vec_dot_q5_1_q8_1_avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  __m256 acc = _mm256_setzero_ps();
  float offsets = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    offsets = std::fma(half_to_float(x[i].m), half_to_float(y[i].s), offsets);
    const __m256i high = _mm256_and_si256(fifth_bits(x[i].qh), _mm256_set1_epi8(0x10));
    const __m256i q = _mm256_or_si256(unpack_nibbles(x[i].qs), high);
    const __m256 d = _mm256_set1_ps(half_to_float(x[i].d) * half_to_float(y[i].d));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8_i8(q, load256(y[i].qs))), d, acc);
  }
  return sum_of_8(acc) + offsets;
}

BLOOMERY_AVX2 float vec_dot_iq4_nl_q8_0_avx2(const void* w, const void* a, int64_t n) {
  return codebook_dot(static_cast<const BlockIQ4_NL*>(w), static_cast<const BlockQ8_0*>(a), n / kQK, kIq4nlValues,
                      [](const BlockIQ4_NL& x, const BlockQ8_0& y) { return half_to_float(y.d) * half_to_float(x.d); });
}

BLOOMERY_AVX2 float vec_dot_mxfp4_q8_0_avx2(const void* w, const void* a, int64_t n) {
  return codebook_dot(
      static_cast<const BlockMXFP4*>(w), static_cast<const BlockQ8_0*>(a), n / kQK, kMxfp4Values,
      [](const BlockMXFP4& x, const BlockQ8_0& y) { return half_to_float(y.d) * e8m0_to_fp32_half(x.e); });
}

// Q4_K/Q5_K mins: sum_j min_j * (bsums[2j] + bsums[2j+1]), in int.
namespace {
inline int k4_mins_dot(const uint8_t* mins, const int16_t* bsums) {
  int sum = 0;
  for (int j = 0; j < 8; ++j) sum += mins[j] * (bsums[2 * j] + bsums[2 * j + 1]);
  return sum;
}

// acc + scale * the four lanes of Q4_K's mins dot (lane m: mins 2m and 2m + 1 against the sums of
// their 32-element runs), llama.cpp's per-lane accumulation of a Q4_K block's mins.
BLOOMERY_AVX2 inline __m128 k4_accumulate_mins(const uint8_t* mins, const int16_t* bsums, float scale, __m128 acc) {
  const __m256i b = load256(bsums);
  const __m128i run_sums = _mm_hadd_epi16(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
  int64_t mins_bytes;
  std::memcpy(&mins_bytes, mins, sizeof mins_bytes);
  const __m128i lanes = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(mins_bytes)), run_sums);
  return _mm_fmadd_ps(_mm_set1_ps(scale), _mm_cvtepi32_ps(lanes), acc);
}
// For each 32-element run of a 16-element sub-block format, the byte of each int16 product
// lane's scale (eight lanes per sub-block).
alignas(16) constexpr uint8_t kRunScales[8][16] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9},
    {10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13},
    {14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15},
};
}  // namespace

// Q4_K in llama.cpp's AVX2 order: the codes' int32 lanes as Q3_K's below, scaled by d into a
// per-lane accumulator; the mins in a four-lane one (lane m: the mins of the 32-element runs 2m
// and 2m + 1 against their bsums), summed (m0 + m2) + (m1 + m3) and added at the end.
BLOOMERY_AVX2 float vec_dot_q4_k_q8_k_avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i low_mask = _mm256_set1_epi8(0x0f);
  __m256 acc = _mm256_setzero_ps();
  __m128 acc_mins = _mm_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    uint8_t scales[8], block_mins[8];
    k4_unpack_scale_mins(x[i].scales, scales, block_mins);
    acc_mins = k4_accumulate_mins(block_mins, y[i].bsums, -y[i].d * half_to_float(x[i].dmin), acc_mins);
    __m256i sum = _mm256_setzero_si256();
    for (int g = 0; g < 4; ++g) {
      const __m256i q = load256(x[i].qs + 32 * g);
      const __m256i lo = _mm256_and_si256(q, low_mask);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low_mask);
      const __m256i p_lo = _mm256_maddubs_epi16(lo, load256(y[i].qs + 64 * g));
      const __m256i p_hi = _mm256_maddubs_epi16(hi, load256(y[i].qs + 64 * g + 32));
      const __m256i s_lo = _mm256_set1_epi16(scales[2 * g]);
      const __m256i s_hi = _mm256_set1_epi16(scales[2 * g + 1]);
      sum = _mm256_add_epi32(sum, _mm256_add_epi32(_mm256_madd_epi16(p_lo, s_lo), _mm256_madd_epi16(p_hi, s_hi)));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * half_to_float(x[i].d)), _mm256_cvtepi32_ps(sum), acc);
  }
  return sum_of_8(acc) + sum_of_4(acc_mins);
}

// Q2_K in llama.cpp's AVX2 order: per block, first the mins (lane l: sub-blocks 2l and 2l + 1
// against their bsums) scaled by -dmin, then the codes' int32 lanes (as Q3_K's below) scaled by
// d, into one per-lane accumulator.
BLOOMERY_AVX2 float vec_dot_q2_k_q8_k_avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i two_bits = _mm256_set1_epi8(3);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m128i packed = load128(x[i].scales);
    const __m128i scales = _mm_and_si128(packed, _mm_set1_epi8(0x0f));
    const __m128i mins = _mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0f));
    const __m256i mins_dot = _mm256_madd_epi16(_mm256_cvtepi8_epi16(mins), load256(y[i].bsums));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(-y[i].d * half_to_float(x[i].dmin)), _mm256_cvtepi32_ps(mins_dot), acc);
    __m256i sum = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const __m256i q = load256(x[i].qs + 32 * half);
      for (int k = 0; k < 4; ++k) {
        const int run = 4 * half + k;
        const __m256i code = _mm256_and_si256(_mm256_srli_epi16(q, 2 * k), two_bits);
        const __m256i p = _mm256_maddubs_epi16(code, load256(y[i].qs + 32 * run));
        const __m256i s = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, load128(kRunScales[run])));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, s));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * half_to_float(x[i].d)), _mm256_cvtepi32_ps(sum), acc);
  }
  return sum_of_8(acc);
}

BLOOMERY_AVX2 float vec_dot_q5_k_q8_k_avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i low_mask = _mm256_set1_epi8(0x0f);
  const __m256i one = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    uint8_t scales[8], block_mins[8];
    k4_unpack_scale_mins(x[i].scales, scales, block_mins);
    mins += y[i].d * half_to_float(x[i].dmin) * static_cast<float>(k4_mins_dot(block_mins, y[i].bsums));
    __m256i high_bits = load256(x[i].qh);  // shifted down two bits per 64 elements
    __m256i sum = _mm256_setzero_si256();
    for (int g = 0; g < 4; ++g) {
      const __m256i q = load256(x[i].qs + 32 * g);
      const __m256i h_lo = _mm256_slli_epi16(_mm256_and_si256(high_bits, one), 4);
      const __m256i h_hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high_bits, 1), one), 4);
      high_bits = _mm256_srli_epi16(high_bits, 2);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, low_mask), h_lo);
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low_mask), h_hi);
      const __m256i p_lo = _mm256_maddubs_epi16(lo, load256(y[i].qs + 64 * g));
      const __m256i p_hi = _mm256_maddubs_epi16(hi, load256(y[i].qs + 64 * g + 32));
      const __m256i s_lo = _mm256_set1_epi16(scales[2 * g]);
      const __m256i s_hi = _mm256_set1_epi16(scales[2 * g + 1]);
      sum = _mm256_add_epi32(sum, _mm256_add_epi32(_mm256_madd_epi16(p_lo, s_lo), _mm256_madd_epi16(p_hi, s_hi)));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * half_to_float(x[i].d)), _mm256_cvtepi32_ps(sum), acc);
  }
  return sum_of_8(acc) - mins;
}

// Q3_K in llama.cpp's AVX2 order: each 32-element run's products land in int32 lane
// (position in the run) / 4, summed over the block's eight runs, and only then scaled by d
// into a per-lane float accumulator (llama.cpp sums the lanes once, at the end). The codes
// are signed (-4..3): maddubs takes their magnitude and y carries their sign.
BLOOMERY_AVX2 float vec_dot_q3_k_q8_k_avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i low_bits = _mm256_set1_epi8(3);
  const __m256i four = _mm256_set1_epi8(4);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m128i scales = q3k_scales(x[i].scales);
    const __m256i high_bits = load256(x[i].hmask);
    __m256i sum = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const __m256i low = load256(x[i].qs + 32 * half);
      for (int k = 0; k < 4; ++k) {
        const int run = 4 * half + k;  // the 32-element run; its high bit is bit `run` of hmask
        const __m256i code = _mm256_and_si256(_mm256_srli_epi16(low, 2 * k), low_bits);
        const __m256i high_clear = _mm256_cmpeq_epi8(
            _mm256_and_si256(high_bits, _mm256_set1_epi8(static_cast<char>(1 << run))), _mm256_setzero_si256());
        const __m256i q = _mm256_sub_epi8(code, _mm256_and_si256(high_clear, four));
        const __m256i yq = load256(y[i].qs + 32 * run);
        const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(yq, q));
        const __m256i s = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, load128(kRunScales[run])));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, s));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * half_to_float(x[i].d)), _mm256_cvtepi32_ps(sum), acc);
  }
  return sum_of_8(acc);
}

// Q6_K in llama.cpp's AVX2 order (the lanes as Q3_K's above; the offset's in lane j / 2): the
// codes are used unsigned (0..63); their -32 offset comes back as 32 * sum_j scale_j * bsums[j],
// from Q8_K's per-16 sums.
BLOOMERY_AVX2 float vec_dot_q6_k_q8_k_avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i low_mask = _mm256_set1_epi8(0x0f);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m256i scales = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales)));
    const __m256i offset = _mm256_madd_epi16(load256(y[i].bsums), scales);
    __m256i sum = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(offset, 5));
    for (int half = 0; half < 2; ++half) {
      const __m256i ql0 = load256(x[i].ql + 64 * half);
      const __m256i ql1 = load256(x[i].ql + 64 * half + 32);
      const __m256i qh = load256(x[i].qh + 32 * half);
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, low_mask),
                          _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x03)), 4)),
          _mm256_or_si256(_mm256_and_si256(ql1, low_mask),
                          _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x0c)), 2)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low_mask),
                          _mm256_and_si256(qh, _mm256_set1_epi8(0x30))),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low_mask),
                          _mm256_srli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(static_cast<char>(0xc0))), 2)),
      };
      for (int k = 0; k < 4; ++k) {
        const int sub = 8 * half + 2 * k;
        const __m256i p = _mm256_maddubs_epi16(q[k], load256(y[i].qs + 128 * half + 32 * k));
        const __m256i s = _mm256_set_m128i(_mm_set1_epi16(x[i].scales[sub + 1]), _mm_set1_epi16(x[i].scales[sub]));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, s));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * half_to_float(x[i].d)), _mm256_cvtepi32_ps(sum), acc);
  }
  return sum_of_8(acc);
}

BLOOMERY_AVX2 float vec_dot_iq4_xs_q8_k_avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_XS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i values = codebook(kIq4nlValues);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    __m256i sum = _mm256_setzero_si256();
    for (int sub = 0; sub < 8; ++sub) {
      const __m256i q = _mm256_shuffle_epi8(values, unpack_nibbles(x[i].qs + 16 * sub));
      const __m256i yq = load256(y[i].qs + 32 * sub);
      const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(yq, q));
      sum =
          _mm256_add_epi32(sum, _mm256_madd_epi16(p, _mm256_set1_epi16(static_cast<int16_t>(iq4xs_scale(x[i], sub)))));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * half_to_float(x[i].d)), _mm256_cvtepi32_ps(sum), acc);
  }
  return sum_of_8(acc);
}

// The order of llama.cpp's repacked products (quant/kernels.h, vec_dot_repacked): each block's
// whole integer dot, then one float FMA per block into one accumulator, in block order. The
// K-quants keep their mins' integer dot apart, in a second accumulator subtracted at the end.

namespace {

template <typename Block, typename Scale>
BLOOMERY_AVX2 inline float codebook_dot_repacked(const Block* x, const BlockQ8_0* y, int64_t nb, const int8_t* values,
                                                 Scale scale) {
  const __m256i table = codebook(values);
  float acc = 0;
  for (int64_t i = 0; i < nb; ++i) {
    const __m256i q = _mm256_shuffle_epi8(table, unpack_nibbles(x[i].qs));
    acc = std::fma(static_cast<float>(sum_of_lanes(dot_i8(q, load256(y[i].qs)))), scale(x[i], y[i]), acc);
  }
  return acc;
}

}  // namespace

BLOOMERY_AVX2 float vec_dot_q4_0_q8_0_repacked_avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float acc = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256i q = _mm256_sub_epi8(unpack_nibbles(x[i].qs), _mm256_set1_epi8(8));
    const float d = half_to_float(x[i].d) * half_to_float(y[i].d);
    acc = std::fma(static_cast<float>(sum_of_lanes(dot_i8(q, load256(y[i].qs)))), d, acc);
  }
  return acc;
}

BLOOMERY_AVX2 float vec_dot_iq4_nl_q8_0_repacked_avx2(const void* w, const void* a, int64_t n) {
  return codebook_dot_repacked(
      static_cast<const BlockIQ4_NL*>(w), static_cast<const BlockQ8_0*>(a), n / kQK, kIq4nlValues,
      [](const BlockIQ4_NL& x, const BlockQ8_0& y) { return half_to_float(x.d) * half_to_float(y.d); });
}

BLOOMERY_AVX2 float vec_dot_mxfp4_q8_0_repacked_avx2(const void* w, const void* a, int64_t n) {
  return codebook_dot_repacked(
      static_cast<const BlockMXFP4*>(w), static_cast<const BlockQ8_0*>(a), n / kQK, kMxfp4Values,
      [](const BlockMXFP4& x, const BlockQ8_0& y) { return e8m0_to_fp32_half(x.e) * half_to_float(y.d); });
}

namespace {

// Which weight row each lane of an eight-row vector holds: the AVX2 kernel's pairs (a register
// holds rows 2k and 2k + 1) sum into rows 0, 2, 4, 6, 1, 3, 5, 7; the 512-bit one's quads (rows
// k, k + 4 of each quarter) into rows 0, 4, 1, 5, 2, 6, 3, 7.
using RowOrder = std::array<int, kWeightRows>;
inline constexpr RowOrder kPairOrder = {0, 2, 4, 6, 1, 3, 5, 7};
inline constexpr RowOrder kQuadOrder = {0, 4, 1, 5, 2, 6, 3, 7};

// The eight rows' f16 scales d (Q4_0's, IQ4_NL's) as floats, in `order`.
template <typename Block>
BLOOMERY_AVX2 inline __m256 row_scales(const Block* const* x, int64_t i, const RowOrder& o) {
  return _mm256_cvtph_ps(_mm_setr_epi16(static_cast<int16_t>(x[o[0]][i].d), static_cast<int16_t>(x[o[1]][i].d),
                                        static_cast<int16_t>(x[o[2]][i].d), static_cast<int16_t>(x[o[3]][i].d),
                                        static_cast<int16_t>(x[o[4]][i].d), static_cast<int16_t>(x[o[5]][i].d),
                                        static_cast<int16_t>(x[o[6]][i].d), static_cast<int16_t>(x[o[7]][i].d)));
}

// MXFP4's E8M0 scales as e8m0_to_fp32_half gives them, in `order`.
BLOOMERY_AVX2 inline __m256 row_scales(const BlockMXFP4* const* x, int64_t i, const RowOrder& o) {
  const __m256i e = _mm256_setr_epi32(x[o[0]][i].e, x[o[1]][i].e, x[o[2]][i].e, x[o[3]][i].e, x[o[4]][i].e,
                                      x[o[5]][i].e, x[o[6]][i].e, x[o[7]][i].e);
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
  const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e)));
}

// What the eight-weight-row dots share. Row r of the eight (row_bytes apart from w) as blocks:
template <typename Block>
BLOOMERY_AVX2 inline void weight_rows(const void* w, size_t row_bytes, const Block* (&x)[kWeightRows]) {
  for (int r = 0; r < kWeightRows; ++r) {
    x[r] = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w) + static_cast<size_t>(r) * row_bytes);
  }
}

// Prefetches `ahead` (VecDotWeightRowsFn) a few lines per block: block i's share.
class AheadPrefetch {
 public:
  AheadPrefetch(const void* ahead, size_t bytes, int64_t blocks)
      : next_(static_cast<const char*>(ahead)),
        bytes_(bytes),
        // Whole lines per block, so that the last block has asked for all of them.
        per_block_((bytes / kLine + static_cast<size_t>(blocks)) / static_cast<size_t>(blocks) * kLine) {}
  BLOOMERY_AVX2 void block(int64_t i) const {
    for (size_t at = static_cast<size_t>(i) * per_block_, end = std::min(bytes_, at + per_block_); at < end;
         at += kLine) {
      _mm_prefetch(next_ + at, _MM_HINT_T0);
    }
  }

 private:
  static constexpr size_t kLine = 64;
  const char* next_;
  size_t bytes_;
  size_t per_block_;
};

// Four pairs' int32 sums (lanes: row 2k's four | row 2k + 1's four) as the eight rows' block sums,
// in lane order (rows 0, 2, 4, 6, 1, 3, 5, 7).
BLOOMERY_AVX2 inline __m256i row_sums(const __m256i (&pair_sums)[kWeightRows / 2]) {
  return _mm256_hadd_epi32(_mm256_hadd_epi32(pair_sums[0], pair_sums[1]),
                           _mm256_hadd_epi32(pair_sums[2], pair_sums[3]));
}

// Block i of the eight rows as four pairs' int8 values (a register: row 2k's 16 code bytes in the
// low lane, row 2k + 1's in the high one): low nibbles (the block's first 16 weights) in lo, high
// in hi, each through `table`.
template <typename Block>
BLOOMERY_AVX2 inline void pair_codes(const Block* const (&x)[kWeightRows], int64_t i, __m256i table,
                                     __m256i (&lo)[kWeightRows / 2], __m256i (&hi)[kWeightRows / 2]) {
  const __m256i low_nibbles = _mm256_set1_epi8(0x0f);
  for (int k = 0; k < kWeightRows / 2; ++k) {
    const __m256i q = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(x[2 * k + 1][i].qs),
                                          reinterpret_cast<const __m128i*>(x[2 * k][i].qs));
    lo[k] = _mm256_shuffle_epi8(table, _mm256_and_si256(q, low_nibbles));
    hi[k] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), low_nibbles));
  }
}

// An activation block's first and second 16 codes, each in both lanes.
struct ActivationHalves {
  BLOOMERY_AVX2 explicit ActivationHalves(const BlockQ8_0& y) {
    const __m256i codes = load256(y.qs);
    first = _mm256_permute2x128_si256(codes, codes, 0x00);
    second = _mm256_permute2x128_si256(codes, codes, 0x11);
  }
  __m256i first, second;
};

// acc + the rows' block sums times their scales and the activation block's, each lane rounding
// as the single-row dot's scalar FMA.
BLOOMERY_AVX2 inline __m256 add_scaled(__m256 acc, __m256i sums, __m256 row_scales, const BlockQ8_0& y) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(row_scales, _mm256_set1_ps(half_to_float(y.d))), acc);
}

BLOOMERY_AVX2 inline void store_rows(__m256 acc, const RowOrder& order, float* out) {
  alignas(32) float lanes[kWeightRows];
  _mm256_store_ps(lanes, acc);
  for (int l = 0; l < kWeightRows; ++l) out[order[l]] = lanes[l];
}

// codebook_dot_repacked for eight weight rows against R activation rows, as llama.cpp's
// repacked GEMV runs them: a register holding two weight rows' codes (row 2k's 16 bytes in its
// low lane, row 2k + 1's in the high one), decoded once for all R, against each activation
// block's first and second halves, the rows' exact block sums gathered into one vector by hadds
// (lanes: rows 0, 2, 4, 6, 1, 3, 5, 7) and scaled in one FMA, each lane rounding as the
// single-row dot's scalar FMA. Prefetches `ahead` as VecDotWeightRowsFn says.
template <typename Block, int R>
BLOOMERY_AVX2 void codebook_dot_weight_rows(const void* w, size_t row_bytes, const BlockQ8_0* const* y, int64_t nb,
                                            const int8_t* values, float* out, const void* ahead, size_t ahead_bytes) {
  const AheadPrefetch prefetch(ahead, ahead_bytes, nb);
  const Block* x[kWeightRows];
  weight_rows(w, row_bytes, x);
  const __m256i table = codebook(values);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    prefetch.block(i);
    __m256i lo[kWeightRows / 2], hi[kWeightRows / 2];
    pair_codes(x, i, table, lo, hi);
    const __m256 scales = row_scales(x, i, kPairOrder);
    for (int r = 0; r < R; ++r) {
      const ActivationHalves a(y[r][i]);
      __m256i pair_sums[kWeightRows / 2];
      for (int k = 0; k < kWeightRows / 2; ++k) {
        pair_sums[k] = _mm256_add_epi32(dot_i8(lo[k], a.first), dot_i8(hi[k], a.second));
      }
      acc[r] = add_scaled(acc[r], row_sums(pair_sums), scales, y[r][i]);
    }
  }
  for (int r = 0; r < R; ++r) store_rows(acc[r], kPairOrder, out + r * kWeightRows);
}

// Block i of the eight rows as two quads' codes (a 512-bit register holding rows k, k + 1, k + 2,
// k + 3 of block i, a row's 16 code bytes a quarter) through `table`: low nibbles (the block's
// first 16 weights) in lo, high in hi.
template <typename Block>
BLOOMERY_AVX2_VNNI inline void quad_codes(const Block* const (&x)[kWeightRows], int64_t i, __m512i table,
                                          __m512i (&lo)[2], __m512i (&hi)[2]) {
  const __m512i low_nibbles = _mm512_set1_epi8(0x0f);
  for (int k = 0; k < 2; ++k) {
    const auto quarter = [&](int r) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[4 * k + r][i].qs)); };
    __m512i q = _mm512_castsi128_si512(quarter(0));
    q = _mm512_inserti32x4(q, quarter(1), 1);
    q = _mm512_inserti32x4(q, quarter(2), 2);
    q = _mm512_inserti32x4(q, quarter(3), 3);
    lo[k] = _mm512_shuffle_epi8(table, _mm512_and_si512(q, low_nibbles));
    hi[k] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q, 4), low_nibbles));
  }
}

// The quads' int32 sums (four lanes per row: quad 0's rows 0-3, quad 1's rows 4-7) as the eight
// rows' block sums in kQuadOrder: interleaving the quads and adding halves twice leaves each
// quarter [row k, row k + 4, ...], whose first two lanes a permutation gathers.
BLOOMERY_AVX2_VNNI inline __m256i quad_sums(__m512i low_rows, __m512i high_rows) {
  const __m512i halves =
      _mm512_add_epi32(_mm512_unpacklo_epi32(low_rows, high_rows), _mm512_unpackhi_epi32(low_rows, high_rows));
  const __m512i whole = _mm512_add_epi32(halves, _mm512_shuffle_epi32(halves, _MM_PERM_BADC));
  const __m512i firsts = _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castsi512_si256(_mm512_permutexvar_epi32(firsts, whole));
}

// The same dots on 512-bit registers through VNNI's unsigned-by-signed byte dots (vpdpbusd): a
// register holds four rows' codes, decoded once for all R; the codebook's entries plus `offset`
// (minus its least entry) are unsigned, so they meet the signed activations with no sign moves,
// and each row's sums start from -offset times the activations' four-byte sums. Exact integers
// either way: the same block sums, so the same floats.
template <typename Block, int R>
BLOOMERY_AVX2_VNNI void codebook_dot_weight_rows_vnni(const void* w, size_t row_bytes, const BlockQ8_0* const* y,
                                                      int64_t nb, const int8_t* values, float* out, const void* ahead,
                                                      size_t ahead_bytes) {
  const AheadPrefetch prefetch(ahead, ahead_bytes, nb);
  const Block* x[kWeightRows];
  weight_rows(w, row_bytes, x);
  const int offset = -*std::min_element(values, values + 16);
  alignas(16) uint8_t shifted[16];
  for (int v = 0; v < 16; ++v) shifted[v] = static_cast<uint8_t>(values[v] + offset);
  const __m512i table = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(shifted)));
  const __m512i offsets = _mm512_set1_epi8(static_cast<char>(offset));
  const __m512i zero = _mm512_setzero_si512();
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    prefetch.block(i);
    __m512i lo[2], hi[2];
    quad_codes(x, i, table, lo, hi);
    const __m256 scales = row_scales(x, i, kQuadOrder);
    for (int r = 0; r < R; ++r) {
      const __m512i first = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y[r][i].qs)));
      const __m512i second = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y[r][i].qs + 16)));
      const __m512i start =
          _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, offsets, first), offsets, second));
      __m512i sums[2];
      for (int k = 0; k < 2; ++k)
        sums[k] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(start, lo[k], first), hi[k], second);
      acc[r] = add_scaled(acc[r], quad_sums(sums[0], sums[1]), scales, y[r][i]);
    }
  }
  for (int r = 0; r < R; ++r) store_rows(acc[r], kQuadOrder, out + r * kWeightRows);
}

// The kernel instantiated for `rows` activation rows (1 to kDotRows).
template <typename Block, bool kVnni, int... R>
BLOOMERY_AVX2 void weight_rows_for(int rows, std::integer_sequence<int, R...>, const void* w, size_t row_bytes,
                                   const void* const* a, int64_t n, const int8_t* values, float* out, const void* ahead,
                                   size_t ahead_bytes) {
  using Kernel =
      void (*)(const void*, size_t, const BlockQ8_0* const*, int64_t, const int8_t*, float*, const void*, size_t);
  static constexpr Kernel kKernels[] = {
      (kVnni ? codebook_dot_weight_rows_vnni<Block, R + 1> : codebook_dot_weight_rows<Block, R + 1>)...};
  kKernels[rows - 1](w, row_bytes, reinterpret_cast<const BlockQ8_0* const*>(a), n / kQK, values, out, ahead,
                     ahead_bytes);
}

template <typename Block, bool kVnni>
BLOOMERY_AVX2 void weight_rows_for(int rows, const void* w, size_t row_bytes, const void* const* a, int64_t n,
                                   const int8_t* values, float* out, const void* ahead, size_t ahead_bytes) {
  weight_rows_for<Block, kVnni>(rows, std::make_integer_sequence<int, kDotRows>{}, w, row_bytes, a, n, values, out,
                                ahead, ahead_bytes);
}

// Q4_0's codes less 8, as a codebook.
constexpr int8_t kQ4_0Values[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};

// vec_dot_q8_0_q8_0_avx2 for four weight rows against A activation rows: each of the 4 x A products
// keeps its own accumulator and sums its blocks as the single-row dot does (one FMA of the two
// scales' product per block into eight float lanes, then the same horizontal sum), so every output
// has the single-row dot's bits. The single-row dot waits on its one FMA chain at every block; here
// 4 x A chains run side by side, each weight block's absolute values and scale are made once for the
// A activation rows, and each activation block is loaded once for the four weight rows.
template <int A>
BLOOMERY_AVX2 void q8_0_weight_rows(const BlockQ8_0* const* x, const BlockQ8_0* const* y, int64_t nb, float* out,
                                    const AheadPrefetch* prefetch) {
  constexpr int kW = 4;
  __m256 acc[kW][A];
  for (auto& row : acc)
    for (__m256& a : row) a = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    if (prefetch) prefetch->block(i);
    __m256i qx[kW], ax[kW];
    float dx[kW];
    for (int j = 0; j < kW; ++j) {
      qx[j] = load256(x[j][i].qs);
      ax[j] = _mm256_sign_epi8(qx[j], qx[j]);
      dx[j] = half_to_float(x[j][i].d);
    }
    for (int r = 0; r < A; ++r) {
      const __m256i qy = load256(y[r][i].qs);
      const float dy = half_to_float(y[r][i].d);
      for (int j = 0; j < kW; ++j) {
        const __m256i sums = dot_i8(ax[j], qx[j], qy);
        acc[j][r] = _mm256_fmadd_ps(_mm256_set1_ps(dx[j] * dy), _mm256_cvtepi32_ps(sums), acc[j][r]);
      }
    }
  }
  for (int j = 0; j < kW; ++j)
    for (int r = 0; r < A; ++r) out[r * kWeightRows + j] = sum_of_8(acc[j][r]);
}

}  // namespace

void vec_dot_weight_rows_q4_0_q8_0_repacked_avx2(const void* w, size_t row_bytes, const void* const* a, int rows,
                                                 int64_t n, float* out, const void* ahead, size_t ahead_bytes) {
  weight_rows_for<BlockQ4_0, false>(rows, w, row_bytes, a, n, kQ4_0Values, out, ahead, ahead_bytes);
}

void vec_dot_weight_rows_iq4_nl_q8_0_repacked_avx2(const void* w, size_t row_bytes, const void* const* a, int rows,
                                                   int64_t n, float* out, const void* ahead, size_t ahead_bytes) {
  weight_rows_for<BlockIQ4_NL, false>(rows, w, row_bytes, a, n, kIq4nlValues, out, ahead, ahead_bytes);
}

void vec_dot_weight_rows_mxfp4_q8_0_repacked_avx2(const void* w, size_t row_bytes, const void* const* a, int rows,
                                                  int64_t n, float* out, const void* ahead, size_t ahead_bytes) {
  weight_rows_for<BlockMXFP4, false>(rows, w, row_bytes, a, n, kMxfp4Values, out, ahead, ahead_bytes);
}

void vec_dot_weight_rows_q4_0_q8_0_repacked_vnni(const void* w, size_t row_bytes, const void* const* a, int rows,
                                                 int64_t n, float* out, const void* ahead, size_t ahead_bytes) {
  weight_rows_for<BlockQ4_0, true>(rows, w, row_bytes, a, n, kQ4_0Values, out, ahead, ahead_bytes);
}

void vec_dot_weight_rows_iq4_nl_q8_0_repacked_vnni(const void* w, size_t row_bytes, const void* const* a, int rows,
                                                   int64_t n, float* out, const void* ahead, size_t ahead_bytes) {
  weight_rows_for<BlockIQ4_NL, true>(rows, w, row_bytes, a, n, kIq4nlValues, out, ahead, ahead_bytes);
}

void vec_dot_weight_rows_mxfp4_q8_0_repacked_vnni(const void* w, size_t row_bytes, const void* const* a, int rows,
                                                  int64_t n, float* out, const void* ahead, size_t ahead_bytes) {
  weight_rows_for<BlockMXFP4, true>(rows, w, row_bytes, a, n, kMxfp4Values, out, ahead, ahead_bytes);
}

// The eight weight rows as two halves of four, against the activation rows two at a time (the
// registers hold 4 x 2 accumulators); the first pass prefetches `ahead`, the later ones find the
// weight rows in cache.
BLOOMERY_AVX2 void vec_dot_weight_rows_q8_0_q8_0_avx2(const void* w, size_t row_bytes, const void* const* a, int rows,
                                                      int64_t n, float* out, const void* ahead, size_t ahead_bytes) {
  const BlockQ8_0* x[kWeightRows];
  weight_rows(w, row_bytes, x);
  const auto* y = reinterpret_cast<const BlockQ8_0* const*>(a);
  const int64_t nb = n / kQK;
  const AheadPrefetch prefetch(ahead, ahead_bytes, nb);
  for (int half = 0; half < 2; ++half) {
    for (int r = 0; r < rows; r += 2) {
      const AheadPrefetch* first = half == 0 && r == 0 ? &prefetch : nullptr;
      float* at = out + r * kWeightRows + 4 * half;
      if (r + 1 < rows) {
        q8_0_weight_rows<2>(x + 4 * half, y + r, nb, at, first);
      } else {
        q8_0_weight_rows<1>(x + 4 * half, y + r, nb, at, first);
      }
    }
  }
}

namespace {

// Two 8-lane float vectors as one 512-bit vector, lo in lanes 0-7 (no AVX-512 DQ).
BLOOMERY_AVX2_VNNI inline __m512 join_8s(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
}

// sum_of_8 of the four 8-lane halves of a and b at once, by the same additions (each of two
// operands in either order): lane 4k of the result is the sum of half k of [a low, a high,
// b low, b high].
BLOOMERY_AVX2_VNNI inline __m512 sums_of_halves(__m512 a, __m512 b) {
  const __m512 fours = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 twos = _mm512_add_ps(fours, _mm512_permute_ps(fours, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm512_add_ps(twos, _mm512_permute_ps(twos, _MM_SHUFFLE(2, 3, 0, 1)));
}

// q8_0_weight_rows' sums on AVX-512 hosts, all eight weight rows against A activation rows: a
// 512-bit register holds one block of two weight rows, their codes moved up by 128 into unsigned
// bytes (once for the A rows), so that one VNNI byte dot (vpdpbusd) per pair of weight rows and
// activation row, started from -128 times the activation's four-byte sums (once for the eight
// rows), gives the AVX2 kernel's very int32 lanes (exact integers either way). Each half's float
// lanes then take the same FMA of the same product of scales, and the same horizontal sum
// (sums_of_halves).
template <int A>
BLOOMERY_AVX2_VNNI void q8_0_weight_rows_vnni(const BlockQ8_0* const (&x)[kWeightRows], const BlockQ8_0* const* y,
                                              int64_t nb, float* out, const AheadPrefetch* prefetch) {
  constexpr int kPairs = kWeightRows / 2;
  const __m512i up = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i zero = _mm512_setzero_si512();
  __m512 acc[kPairs][A];
  for (auto& pair : acc)
    for (__m512& a : pair) a = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    if (prefetch) prefetch->block(i);
    __m512i codes[kPairs];
    __m512 dx[kPairs];
    for (int p = 0; p < kPairs; ++p) {
      const BlockQ8_0& first = x[2 * p][i];
      const BlockQ8_0& second = x[2 * p + 1][i];
      codes[p] =
          _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(load256(first.qs)), load256(second.qs), 1), up);
      dx[p] = join_8s(_mm256_set1_ps(half_to_float(first.d)), _mm256_set1_ps(half_to_float(second.d)));
    }
    for (int r = 0; r < A; ++r) {
      const __m512i qy = _mm512_broadcast_i64x4(load256(y[r][i].qs));
      const __m512i start = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, up, qy));
      const __m512 dy = _mm512_set1_ps(half_to_float(y[r][i].d));
      for (int p = 0; p < kPairs; ++p) {
        const __m512i sums = _mm512_dpbusd_epi32(start, codes[p], qy);
        acc[p][r] = _mm512_fmadd_ps(_mm512_mul_ps(dx[p], dy), _mm512_cvtepi32_ps(sums), acc[p][r]);
      }
    }
  }
  static_assert(kPairs == 4, "an activation row's sums are two registers of four halves");
  for (int r = 0; r < A; ++r) {
    _mm256_storeu_ps(out + r * kWeightRows, _mm512_castps512_ps256(_mm512_permutex2var_ps(
                                                sums_of_halves(acc[0][r], acc[1][r]),
                                                _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0),
                                                sums_of_halves(acc[2][r], acc[3][r]))));
  }
}

}  // namespace

// The activation rows four at a time; the first pass prefetches `ahead`, the later ones find the
// weight rows in cache.
BLOOMERY_AVX2_VNNI void vec_dot_weight_rows_q8_0_q8_0_vnni(const void* w, size_t row_bytes, const void* const* a,
                                                           int rows, int64_t n, float* out, const void* ahead,
                                                           size_t ahead_bytes) {
  const BlockQ8_0* x[kWeightRows];
  weight_rows(w, row_bytes, x);
  const auto* y = reinterpret_cast<const BlockQ8_0* const*>(a);
  const int64_t nb = n / kQK;
  const AheadPrefetch prefetch(ahead, ahead_bytes, nb);
  using Kernel =
      void (*)(const BlockQ8_0* const(&)[kWeightRows], const BlockQ8_0* const*, int64_t, float*, const AheadPrefetch*);
  static constexpr Kernel kKernels[] = {q8_0_weight_rows_vnni<1>, q8_0_weight_rows_vnni<2>, q8_0_weight_rows_vnni<3>,
                                        q8_0_weight_rows_vnni<4>};
  for (int r = 0; r < rows; r += 4) {
    kKernels[std::min(4, rows - r) - 1](x, y + r, nb, out + r * kWeightRows, r == 0 ? &prefetch : nullptr);
  }
}

BLOOMERY_AVX2 float vec_dot_q4_k_q8_k_repacked_avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i low_mask = _mm256_set1_epi8(0x0f);
  float acc = 0, acc_mins = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    uint8_t scales[8], block_mins[8];
    k4_unpack_scale_mins(x[i].scales, scales, block_mins);
    __m256i sum = _mm256_setzero_si256();
    for (int g = 0; g < 4; ++g) {
      const __m256i q = load256(x[i].qs + 32 * g);
      const __m256i lo = _mm256_and_si256(q, low_mask);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low_mask);
      const __m256i p_lo = _mm256_maddubs_epi16(lo, load256(y[i].qs + 64 * g));
      const __m256i p_hi = _mm256_maddubs_epi16(hi, load256(y[i].qs + 64 * g + 32));
      sum = _mm256_add_epi32(sum, _mm256_add_epi32(_mm256_madd_epi16(p_lo, _mm256_set1_epi16(scales[2 * g])),
                                                   _mm256_madd_epi16(p_hi, _mm256_set1_epi16(scales[2 * g + 1]))));
    }
    acc = std::fma(static_cast<float>(sum_of_lanes(sum)), half_to_float(x[i].d) * y[i].d, acc);
    acc_mins =
        std::fma(static_cast<float>(k4_mins_dot(block_mins, y[i].bsums)), half_to_float(x[i].dmin) * y[i].d, acc_mins);
  }
  return acc - acc_mins;
}

BLOOMERY_AVX2 float vec_dot_q2_k_q8_k_repacked_avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i two_bits = _mm256_set1_epi8(3);
  float acc = 0, acc_mins = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const __m128i packed = load128(x[i].scales);
    const __m128i scales = _mm_and_si128(packed, _mm_set1_epi8(0x0f));
    const __m128i mins = _mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0f));
    const int mins_dot = sum_of_lanes(_mm256_madd_epi16(_mm256_cvtepi8_epi16(mins), load256(y[i].bsums)));
    __m256i sum = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const __m256i q = load256(x[i].qs + 32 * half);
      for (int k = 0; k < 4; ++k) {
        const int run = 4 * half + k;
        const __m256i code = _mm256_and_si256(_mm256_srli_epi16(q, 2 * k), two_bits);
        const __m256i p = _mm256_maddubs_epi16(code, load256(y[i].qs + 32 * run));
        const __m256i s = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, load128(kRunScales[run])));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, s));
      }
    }
    acc = std::fma(static_cast<float>(sum_of_lanes(sum)), half_to_float(x[i].d) * y[i].d, acc);
    acc_mins = std::fma(static_cast<float>(mins_dot), half_to_float(x[i].dmin) * y[i].d, acc_mins);
  }
  return acc - acc_mins;
}

}  // namespace bloomery::quant
