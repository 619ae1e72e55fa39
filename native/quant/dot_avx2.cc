// AVX2 (+FMA, F16C) dots. Integer products go through maddubs (unsigned x signed bytes
// into int16 pairs, which cannot saturate for these value ranges) and madd (int16 pairs
// into int32, where the sub-block scales are applied); floats accumulate per lane and
// are summed once at the end.
#include <immintrin.h>

#include "quant/blocks.h"
#include "quant/dot_simd.h"
#include "quant/float_dot.h"
#include "quant/float_formats.h"
#include "quant/q3k_scales_simd.h"
#include "quant/reduce_avx2.h"

#define BLOOMERY_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace bloomery::quant {

namespace {

BLOOMERY_AVX2 inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

BLOOMERY_AVX2 inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Signed x signed bytes, summed in fours into eight int32: maddubs needs an unsigned
// left side, so move x's sign onto y.
BLOOMERY_AVX2 inline __m256i dot_i8(__m256i x, __m256i y) {
  const __m256i products = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
  return _mm256_madd_epi16(products, _mm256_set1_epi16(1));
}

// The 32 codes of a 16-byte nibble array in element order: low nibbles are elements
// 0..15, high nibbles 16..31.
BLOOMERY_AVX2 inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));
}

BLOOMERY_AVX2 inline __m256i codebook(const int8_t* values) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values)));
}

}  // namespace

// F32 rows (the MoE router) and F16 rows, in llama.cpp's order (float_dot.h).
BLOOMERY_AVX2 float vec_dot_f32_f32_avx2(const void* w, const void* a, int64_t n) {
  return dot_f32_avx2(static_cast<const float*>(w), static_cast<const float*>(a), n);
}

BLOOMERY_AVX2 float vec_dot_f16_f16_avx2(const void* w, const void* a, int64_t n) {
  return dot_f16_avx2(static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a), n);
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

BLOOMERY_AVX2 float vec_dot_iq4_nl_q8_0_avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_NL*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  const __m256i values = codebook(kIq4nlValues);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256 d = _mm256_set1_ps(half_to_float(x[i].d) * half_to_float(y[i].d));
    const __m256i q = _mm256_shuffle_epi8(values, unpack_nibbles(x[i].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(q, load256(y[i].qs))), acc);
  }
  return sum_of_8(acc);
}

BLOOMERY_AVX2 float vec_dot_mxfp4_q8_0_avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockMXFP4*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  const __m256i values = codebook(kMxfp4Values);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256 d = _mm256_set1_ps(half_to_float(y[i].d) * e8m0_to_fp32_half(x[i].e));
    const __m256i q = _mm256_shuffle_epi8(values, unpack_nibbles(x[i].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(q, load256(y[i].qs))), acc);
  }
  return sum_of_8(acc);
}

// Q4_K/Q5_K mins: sum_j min_j * (bsums[2j] + bsums[2j+1]), in int.
namespace {
inline int k4_mins_dot(const uint8_t* mins, const int16_t* bsums) {
  int sum = 0;
  for (int j = 0; j < 8; ++j) sum += mins[j] * (bsums[2 * j] + bsums[2 * j + 1]);
  return sum;
}
}  // namespace

BLOOMERY_AVX2 float vec_dot_q4_k_q8_k_avx2(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i low_mask = _mm256_set1_epi8(0x0f);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    uint8_t scales[8], block_mins[8];
    k4_unpack_scale_mins(x[i].scales, scales, block_mins);
    mins += y[i].d * half_to_float(x[i].dmin) * static_cast<float>(k4_mins_dot(block_mins, y[i].bsums));
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
  return sum_of_8(acc) - mins;
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

namespace {
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
BLOOMERY_AVX2 inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
}  // namespace

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

}  // namespace bloomery::quant
