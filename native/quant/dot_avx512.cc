// AVX-512 (F/BW/VL/VNNI) dots: 64 bytes per step, so the 32-element formats take two
// blocks at a time (an odd last block goes to the AVX2 kernel, which this tier's CPUs
// have) and the K-quants 64 elements at a time. VNNI fuses the int16 x scale multiply
// with its accumulation (dpwssd) and the signed byte dots (dpbusd).
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/dot_simd.h"
#include "quant/float_dot.h"
#include "quant/float_formats.h"
#include "quant/q3k_scales_simd.h"
#include "quant/reduce_avx2.h"
#include "quant/reduce_avx512.h"

// GCC 12's AVX-512 intrinsics build their "undefined" operands by self-initialization,
// which -Wuninitialized reports wherever they inline under a target attribute.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define BLOOMERY_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
// BLOOMERY_AVX512's features and BF16 dots: a superset, so that its inline helpers inline there
// (a helper whose target the caller lacks is called, not inlined: a call per 64-byte load).
#define BLOOMERY_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,avx512bf16")))

namespace bloomery::quant {

namespace {

BLOOMERY_AVX512 inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

BLOOMERY_AVX512 inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
BLOOMERY_AVX512 inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }

BLOOMERY_AVX512 inline __m512 load_bf16x16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(load256(p)), 16));
}

// The sum of four int32 lanes (exact in any order).
BLOOMERY_AVX512 inline int sum_of_lanes(__m128i v) {
  const __m128i s = _mm_add_epi32(v, _mm_unpackhi_epi64(v, v));
  return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 1)));
}

BLOOMERY_AVX512 inline __m512i join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// One float per 256-bit half: the scales of two 32-element blocks side by side.
BLOOMERY_AVX512 inline __m512 two_scales(float lo, float hi) {
  return _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(lo), _mm512_set1_ps(hi));
}
BLOOMERY_AVX512 inline __m512i two_scales_i16(int16_t lo, int16_t hi) {
  return _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(lo), _mm512_set1_epi16(hi));
}

// Q4_K/Q5_K's eight 32-element sub-block scales as int16 words (words(), once a block), spread over
// each 64-element step's two runs by one permute (step()): two_scales_i16(scales[2g], scales[2g + 1])
// for step g, without its two broadcasts and blend.
struct StepScales {
  __m512i index[4];  // word lanes 0..15: sub-block 2g; 16..31: 2g + 1
  BLOOMERY_AVX512 StepScales() {
    for (int g = 0; g < 4; ++g) index[g] = two_scales_i16(static_cast<int16_t>(2 * g), static_cast<int16_t>(2 * g + 1));
  }
  BLOOMERY_AVX512 static __m512i words(const uint8_t (&scales)[8]) {
    int64_t bytes;
    std::memcpy(&bytes, scales, 8);
    return _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(bytes)));
  }
  BLOOMERY_AVX512 __m512i step(__m512i words, int g) const { return _mm512_permutexvar_epi16(index[g], words); }
};

// |x| (unsigned) and y carrying x's sign: the operands for dpbusd / maddubs.
struct SignSplit {
  __m512i magnitude;
  __m512i signed_y;
};
BLOOMERY_AVX512 inline SignSplit sign_split(__m512i x, __m512i y) {
  const __mmask64 negative = _mm512_movepi8_mask(x);
  return {_mm512_abs_epi8(x), _mm512_mask_sub_epi8(y, negative, _mm512_setzero_si512(), y)};
}

// Signed x signed bytes, summed in fours into sixteen int32 (lanes 0..7 from the low
// 32 bytes, 8..15 from the high).
BLOOMERY_AVX512 inline __m512i dot_i8(__m512i x, __m512i y) {
  const SignSplit s = sign_split(x, y);
  return _mm512_dpbusd_epi32(_mm512_setzero_si512(), s.magnitude, s.signed_y);
}

// The codes of two 16-byte nibble arrays in element order.
BLOOMERY_AVX512 inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));
}
BLOOMERY_AVX512 inline __m512i unpack_nibbles2(const uint8_t* qa, const uint8_t* qb) {
  return join(unpack_nibbles(qa), unpack_nibbles(qb));
}

BLOOMERY_AVX512 inline __m512i codebook(const int8_t* values) {
  return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values)));
}

// Q4_K/Q5_K mins: sum_j min_j * (bsums[2j] + bsums[2j+1]), in int.
inline int k4_mins_dot(const uint8_t* mins, const int16_t* bsums) {
  int sum = 0;
  for (int j = 0; j < 8; ++j) sum += mins[j] * (bsums[2 * j] + bsums[2 * j + 1]);
  return sum;
}

// For each 64-element step of a 16-element sub-block format (Q3_K, Q6_K), the sub-block of
// every int16 product lane (two elements each): 64 elements span four sub-blocks.
alignas(32) constexpr uint8_t kSubBlockScaleLanes[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13,
     14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15},
};

// llama.cpp's AVX2 K-quant order (see dot_avx2.cc) on this tier: a 512-bit block sum holds two
// 32-element runs' int32 lanes side by side; adding its halves gives each lane's sum over all
// runs, the integer the AVX2 kernel scales by d into its per-lane accumulator, and the same
// steps from there give that kernel's bits.
BLOOMERY_AVX512 inline __m256i add_runs(__m512i sum) {
  return _mm256_add_epi32(_mm512_castsi512_si256(sum), _mm512_extracti64x4_epi64(sum, 1));
}
BLOOMERY_AVX512 inline __m256 accumulate_block(__m256i lanes, float d, __m256 acc) {
  return _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), acc);
}

// Lane r: the sum of v[r]'s eight lanes (integers: exact in any order).
BLOOMERY_AVX512 inline __m256i sums_of_eight_rows(const __m256i (&v)[8]) {
  const __m256i low = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i high = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(low, high, 0x20), _mm256_permute2x128_si256(low, high, 0x31));
}

}  // namespace

// F32 rows (the MoE router) and F16 rows, in llama.cpp's order (float_dot.h).
BLOOMERY_AVX512 float vec_dot_f32_f32_avx512(const void* w, const void* a, int64_t n) {
  return dot_f32_avx512(static_cast<const float*>(w), static_cast<const float*>(a), n);
}

BLOOMERY_AVX512 float vec_dot_f16_f16_avx512(const void* w, const void* a, int64_t n) {
  return dot_f16_avx512(static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a), n);
}

// BF16 in llama.cpp's order on AVX-512 hosts without AVX-512 BF16: two accumulators over
// 32-element steps, each summed by _mm512_reduce_add_ps into double, then the rest in double.
BLOOMERY_AVX512 float vec_dot_bf16_bf16_avx512(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 2; ++k)
      acc[k] = _mm512_fmadd_ps(load_bf16x16(x + i + 16 * k), load_bf16x16(y + i + 16 * k), acc[k]);
  }
  double sum = _mm512_reduce_add_ps(acc[0]);
  sum += _mm512_reduce_add_ps(acc[1]);
  for (; i < n; ++i) sum += bf16_to_fp32(x[i]) * bf16_to_fp32(y[i]);
  return static_cast<float>(sum);
}

// BF16 on hosts with AVX-512 BF16, as llama.cpp's variants for them: pairs of products through
// dpbf16 (its own roundings) into two accumulators over 64-element steps, then as above.
BLOOMERY_AVX512_BF16 float vec_dot_bf16_bf16_avx512_bf16(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int k = 0; k < 2; ++k) {
      acc[k] = _mm512_dpbf16_ps(acc[k], reinterpret_cast<__m512bh>(load512(x + i + 32 * k)),
                                reinterpret_cast<__m512bh>(load512(y + i + 32 * k)));
    }
  }
  double sum = _mm512_reduce_add_ps(acc[0]);
  sum += _mm512_reduce_add_ps(acc[1]);
  for (; i < n; ++i) sum += bf16_to_fp32(x[i]) * bf16_to_fp32(y[i]);
  return static_cast<float>(sum);
}

BLOOMERY_AVX512 float vec_dot_mxfp4_q8_0_avx512(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockMXFP4*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  const int64_t nb = n / kQK;
  const __m512i values = codebook(kMxfp4Values);
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 1 < nb; i += 2) {
    const __m512i xq = _mm512_shuffle_epi8(values, unpack_nibbles2(x[i].qs, x[i + 1].qs));
    const __m512i yq = join(load256(y[i].qs), load256(y[i + 1].qs));
    const __m512 d = two_scales(half_to_float(y[i].d) * e8m0_to_fp32_half(x[i].e),
                                half_to_float(y[i + 1].d) * e8m0_to_fp32_half(x[i + 1].e));
    acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(dot_i8(xq, yq)), acc);
  }
  // Lanes 0..7 hold the even blocks, 8..15 the odd ones: llama.cpp's two AVX2 accumulators, and
  // the horizontal sum adds them as it does. An odd last block comes after, in one FMA.
  const float sum = _mm512_reduce_add_ps(acc);
  if (i == nb) return sum;
  const float d = half_to_float(y[i].d) * e8m0_to_fp32_half(x[i].e);
  return std::fma(d, static_cast<float>(codebook_block_dot(x[i].qs, y[i].qs, kMxfp4Values)), sum);
}

namespace {

// W Q4_K rows against R Q8_K rows (out[w * R + r]): each weight block is unpacked once for
// all R activations, each activation block loaded once for all W weights. Every (weight,
// activation) pair goes through the same operations in the same order whatever W and R are,
// so a batched prompt gives bit-identical results to one token at a time. One token's pass
// uses W = 1: several weight rows interleaved defeat the hardware prefetcher (a third of the
// bandwidth from DRAM), so W > 1 is only for weights that stay in cache.
// Repacked: in the order of llama.cpp's repacked products (kernels.h, vec_dot_repacked) rather
// than of its Q4_K dot.
template <int W, int R, bool Repacked>
BLOOMERY_AVX512 inline void q4_k_tile(const BlockQ4_K* const* x, const BlockQ8_K* const* y, int64_t n, float* out) {
  // Bytes 0,0,1,1,...,7,7: each 32-element min against its two 16-element bsums.
  const __m128i pair_mins = _mm_set_epi8(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  __m256 acc[W][R];
  __m128 mins[W][R];
  float repacked_acc[W][R] = {}, repacked_mins[W][R] = {};
  // Repacked against eight activation rows, a weight row's repacked sums and mins go through one
  // vector, lane r for activation row r: the same integer sums, and lane by lane the same FMAs.
  constexpr bool kRowsInLanes = Repacked && R == 8;
  __m256 lane_acc[W], lane_mins[W];
  for (int w = 0; w < W; ++w) {
    lane_acc[w] = lane_mins[w] = _mm256_setzero_ps();
    for (int r = 0; r < R; ++r) acc[w][r] = _mm256_setzero_ps(), mins[w][r] = _mm_setzero_ps();
  }
  const StepScales step_scales;
  const __m512i low_mask = _mm512_set1_epi8(0x0f);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    uint8_t scales[W][8];
    __m512i scale_words[W];
    float d[W];
    __m512i sum[W][R];
    alignas(32) float activation_scales[R];
    if constexpr (kRowsInLanes) {
      for (int r = 0; r < R; ++r) activation_scales[r] = y[r][i].d;
    }
    for (int w = 0; w < W; ++w) {
      uint8_t block_mins[8];
      k4_unpack_scale_mins(x[w][i].scales, scales[w], block_mins);
      scale_words[w] = StepScales::words(scales[w]);
      d[w] = half_to_float(x[w][i].d);
      const float dmin = half_to_float(x[w][i].dmin);
      int64_t mins_bytes;
      std::memcpy(&mins_bytes, block_mins, 8);
      const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_cvtsi64_si128(mins_bytes), pair_mins));
      __m256i min_lanes[R];
      for (int r = 0; r < R; ++r) {
        sum[w][r] = _mm512_setzero_si512();
        // Lane m: runs 2m and 2m + 1, as llama.cpp's four-lane accumulator of mins has them.
        const __m256i m = _mm256_madd_epi16(load256(y[r][i].bsums), mins16);
        if constexpr (kRowsInLanes) {
          min_lanes[r] = m;
          continue;
        }
        const __m128i lanes = _mm_hadd_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
        if constexpr (Repacked) {
          repacked_mins[w][r] =
              std::fma(static_cast<float>(sum_of_lanes(lanes)), dmin * y[r][i].d, repacked_mins[w][r]);
        } else {
          mins[w][r] = _mm_fmadd_ps(_mm_set1_ps(-y[r][i].d * dmin), _mm_cvtepi32_ps(lanes), mins[w][r]);
        }
      }
      if constexpr (kRowsInLanes) {
        lane_mins[w] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums_of_eight_rows(min_lanes)),
                            _mm256_mul_ps(_mm256_set1_ps(dmin), _mm256_load_ps(activation_scales)), lane_mins[w]);
      }
    }
    for (int g = 0; g < 4; ++g) {
      __m512i activations[R];
      for (int r = 0; r < R; ++r) activations[r] = load512(y[r][i].qs + 64 * g);
      for (int w = 0; w < W; ++w) {
        const __m256i q = load256(x[w][i].qs + 32 * g);
        const __m512i codes = _mm512_and_si512(join(q, _mm256_srli_epi16(q, 4)), low_mask);
        const __m512i s = step_scales.step(scale_words[w], g);
        for (int r = 0; r < R; ++r) {
          sum[w][r] = _mm512_dpwssd_epi32(sum[w][r], _mm512_maddubs_epi16(codes, activations[r]), s);
        }
      }
    }
    for (int w = 0; w < W; ++w) {
      if constexpr (kRowsInLanes) {
        __m256i block_lanes[R];
        for (int r = 0; r < R; ++r) block_lanes[r] = add_runs(sum[w][r]);
        lane_acc[w] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums_of_eight_rows(block_lanes)),
                            _mm256_mul_ps(_mm256_set1_ps(d[w]), _mm256_load_ps(activation_scales)), lane_acc[w]);
        continue;
      }
      for (int r = 0; r < R; ++r) {
        if constexpr (Repacked) {
          const __m256i lanes = add_runs(sum[w][r]);
          const __m128i quads = _mm_add_epi32(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256(lanes, 1));
          repacked_acc[w][r] = std::fma(static_cast<float>(sum_of_lanes(quads)), d[w] * y[r][i].d, repacked_acc[w][r]);
        } else {
          acc[w][r] = accumulate_block(add_runs(sum[w][r]), y[r][i].d * d[w], acc[w][r]);
        }
      }
    }
  }
  for (int w = 0; w < W; ++w) {
    if constexpr (kRowsInLanes) {
      _mm256_storeu_ps(out + w * R, _mm256_sub_ps(lane_acc[w], lane_mins[w]));
      continue;
    }
    for (int r = 0; r < R; ++r) {
      out[w * R + r] = Repacked ? repacked_acc[w][r] - repacked_mins[w][r] : sum_of_8(acc[w][r]) + sum_of_4(mins[w][r]);
    }
  }
}

}  // namespace

BLOOMERY_AVX512 float vec_dot_q4_k_q8_k_avx512(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float out;
  q4_k_tile<1, 1, false>(&x, &y, n, &out);
  return out;
}

BLOOMERY_AVX512 void vec_dot_rows_q4_k_q8_k_avx512(const void* w, const void* const* a, int rows, int64_t n,
                                                   float* out) {
  using Tile = void (*)(const BlockQ4_K* const*, const BlockQ8_K* const*, int64_t, float*);
  static constexpr Tile kTiles[kDotRows] = {q4_k_tile<1, 1, false>, q4_k_tile<1, 2, false>, q4_k_tile<1, 3, false>,
                                            q4_k_tile<1, 4, false>, q4_k_tile<1, 5, false>, q4_k_tile<1, 6, false>,
                                            q4_k_tile<1, 7, false>, q4_k_tile<1, 8, false>};
  const auto* x = static_cast<const BlockQ4_K*>(w);
  kTiles[rows - 1](&x, reinterpret_cast<const BlockQ8_K* const*>(a), n, out);
}

BLOOMERY_AVX512 float vec_dot_q4_k_q8_k_repacked_avx512(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float out;
  q4_k_tile<1, 1, true>(&x, &y, n, &out);
  return out;
}

BLOOMERY_AVX512 void vec_dot_rows_q4_k_q8_k_repacked_avx512(const void* w, const void* const* a, int rows, int64_t n,
                                                            float* out) {
  using Tile = void (*)(const BlockQ4_K* const*, const BlockQ8_K* const*, int64_t, float*);
  static constexpr Tile kTiles[kDotRows] = {q4_k_tile<1, 1, true>, q4_k_tile<1, 2, true>, q4_k_tile<1, 3, true>,
                                            q4_k_tile<1, 4, true>, q4_k_tile<1, 5, true>, q4_k_tile<1, 6, true>,
                                            q4_k_tile<1, 7, true>, q4_k_tile<1, 8, true>};
  const auto* x = static_cast<const BlockQ4_K*>(w);
  kTiles[rows - 1](&x, reinterpret_cast<const BlockQ8_K* const*>(a), n, out);
}

BLOOMERY_AVX512 float vec_dot_q5_k_q8_k_avx512(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i low_mask = _mm256_set1_epi8(0x0f);
  const __m256i one = _mm256_set1_epi8(1);
  const StepScales step_scales;
  __m256 acc = _mm256_setzero_ps();
  float mins = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    uint8_t scales[8], block_mins[8];
    k4_unpack_scale_mins(x[i].scales, scales, block_mins);
    const __m512i scale_words = StepScales::words(scales);
    mins += y[i].d * half_to_float(x[i].dmin) * static_cast<float>(k4_mins_dot(block_mins, y[i].bsums));
    __m256i high_bits = load256(x[i].qh);  // shifted down two bits per 64 elements
    __m512i sum = _mm512_setzero_si512();
    for (int g = 0; g < 4; ++g) {
      const __m256i q = load256(x[i].qs + 32 * g);
      const __m256i h_lo = _mm256_slli_epi16(_mm256_and_si256(high_bits, one), 4);
      const __m256i h_hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high_bits, 1), one), 4);
      high_bits = _mm256_srli_epi16(high_bits, 2);
      const __m512i codes = join(_mm256_or_si256(_mm256_and_si256(q, low_mask), h_lo),
                                 _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low_mask), h_hi));
      const __m512i p = _mm512_maddubs_epi16(codes, load512(y[i].qs + 64 * g));
      sum = _mm512_dpwssd_epi32(sum, p, step_scales.step(scale_words, g));
    }
    acc = accumulate_block(add_runs(sum), y[i].d * half_to_float(x[i].d), acc);
  }
  return sum_of_8(acc) - mins;
}

// Q3_K in llama.cpp's AVX2 order (bit for bit vec_dot_q3_k_q8_k_avx2). Per 128-element half,
// 64 elements at a time: two-bit codes from the same 32 qs bytes at shifts 0, 2 (then 4, 6),
// their third bits from hmask bits 4 * half + 0, 1 (then 2, 3). The signed codes' magnitudes
// go to maddubs, their signs onto the activations.
namespace {

// W Q3_K rows against R Q8_K rows, on the same terms as q4_k_tile.
template <int W, int R>
BLOOMERY_AVX512 inline void q3_k_tile(const BlockQ3_K* const* x, const BlockQ8_K* const* y, int64_t n, float* out) {
  const __m512i low_bits = _mm512_set1_epi8(3);
  const __m512i four = _mm512_set1_epi8(4);
  __m512i lanes[4];
  for (int k = 0; k < 4; ++k) lanes[k] = _mm512_cvtepu8_epi16(load256(kSubBlockScaleLanes[k]));
  __m256 acc[W][R];
  for (int w = 0; w < W; ++w)
    for (int r = 0; r < R; ++r) acc[w][r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    __m512i scales512[W];
    __m512i sum[W][R];
    for (int w = 0; w < W; ++w) {
      scales512[w] = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(q3k_scales(x[w][i].scales)));
      for (int r = 0; r < R; ++r) sum[w][r] = _mm512_setzero_si512();
    }
    for (int step = 0; step < 4; ++step) {
      const int half = step / 2, pair = step % 2;
      __m512i activations[R];
      for (int r = 0; r < R; ++r) activations[r] = load512(y[r][i].qs + 64 * step);
      for (int w = 0; w < W; ++w) {
        const __m256i qs = load256(x[w][i].qs + 32 * half);
        const __m256i hmask = load256(x[w][i].hmask);
        const __m512i codes =
            _mm512_and_si512(_mm512_srli_epi16(join(qs, _mm256_srli_epi16(qs, 2)), 4 * pair), low_bits);
        const __mmask64 high_clear = _mm512_testn_epi8_mask(
            join(hmask, _mm256_srli_epi16(hmask, 1)), _mm512_set1_epi8(static_cast<char>(1 << (4 * half + 2 * pair))));
        const __m512i q = _mm512_mask_sub_epi8(codes, high_clear, codes, four);
        const __mmask64 negative = _mm512_movepi8_mask(q);
        const __m512i magnitude = _mm512_abs_epi8(q);
        const __m512i s = _mm512_permutexvar_epi16(lanes[step], scales512[w]);
        for (int r = 0; r < R; ++r) {
          const __m512i signed_y =
              _mm512_mask_sub_epi8(activations[r], negative, _mm512_setzero_si512(), activations[r]);
          sum[w][r] = _mm512_dpwssd_epi32(sum[w][r], _mm512_maddubs_epi16(magnitude, signed_y), s);
        }
      }
    }
    for (int w = 0; w < W; ++w) {
      const float d = half_to_float(x[w][i].d);
      for (int r = 0; r < R; ++r) acc[w][r] = accumulate_block(add_runs(sum[w][r]), y[r][i].d * d, acc[w][r]);
    }
  }
  for (int w = 0; w < W; ++w)
    for (int r = 0; r < R; ++r) out[w * R + r] = sum_of_8(acc[w][r]);
}

}  // namespace

BLOOMERY_AVX512 float vec_dot_q3_k_q8_k_avx512(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float out;
  q3_k_tile<1, 1>(&x, &y, n, &out);
  return out;
}

BLOOMERY_AVX512 void vec_dot_rows_q3_k_q8_k_avx512(const void* w, const void* const* a, int rows, int64_t n,
                                                   float* out) {
  using Tile = void (*)(const BlockQ3_K* const*, const BlockQ8_K* const*, int64_t, float*);
  static constexpr Tile kTiles[kDotRows] = {q3_k_tile<1, 1>, q3_k_tile<1, 2>, q3_k_tile<1, 3>, q3_k_tile<1, 4>,
                                            q3_k_tile<1, 5>, q3_k_tile<1, 6>, q3_k_tile<1, 7>, q3_k_tile<1, 8>};
  const auto* x = static_cast<const BlockQ3_K*>(w);
  kTiles[rows - 1](&x, reinterpret_cast<const BlockQ8_K* const*>(a), n, out);
}

// Q6_K: codes used unsigned (0..63), the -32 offset restored from Q8_K's per-16 sums, in
// llama.cpp's AVX2 order (bit for bit vec_dot_q6_k_q8_k_avx2).
// Per 128-element half, the low 64 elements come from ql bytes 0..63 (low nibbles) with
// qh bit pairs 0 and 1, the high 64 from the same ql bytes' high nibbles with pairs 2, 3.
namespace {

// W Q6_K rows against R Q8_K rows, on the same terms as q4_k_tile.
template <int W, int R>
BLOOMERY_AVX512 inline void q6_k_tile(const BlockQ6_K* const* x, const BlockQ8_K* const* y, int64_t n, float* out) {
  const __m512i low_mask = _mm512_set1_epi8(0x0f);
  __m512i lanes[4];
  for (int k = 0; k < 4; ++k) lanes[k] = _mm512_cvtepu8_epi16(load256(kSubBlockScaleLanes[k]));
  __m256 acc[W][R];
  for (int w = 0; w < W; ++w)
    for (int r = 0; r < R; ++r) acc[w][r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    __m512i scales512[W];
    __m512i sum[W][R];
    for (int w = 0; w < W; ++w) {
      const __m256i scales = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[w][i].scales)));
      scales512[w] = _mm512_castsi256_si512(scales);
      // The -32 offset through bsums, in the low run's lanes: -32 x each scale fits in int16.
      const __m256i offset_scales = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(scales, 5));
      for (int r = 0; r < R; ++r) {
        sum[w][r] = _mm512_zextsi256_si512(_mm256_madd_epi16(load256(y[r][i].bsums), offset_scales));
      }
    }
    for (int half = 0; half < 2; ++half) {
      __m512i a_low[R], a_high[R];
      for (int r = 0; r < R; ++r) {
        a_low[r] = load512(y[r][i].qs + 128 * half);
        a_high[r] = load512(y[r][i].qs + 128 * half + 64);
      }
      for (int w = 0; w < W; ++w) {
        const __m512i ql = load512(x[w][i].ql + 64 * half);
        const __m256i qh = load256(x[w][i].qh + 32 * half);
        const __m512i qh2 = join(qh, _mm256_srli_epi16(qh, 2));
        const __m512i q_low = _mm512_or_si512(_mm512_and_si512(ql, low_mask),
                                              _mm512_slli_epi16(_mm512_and_si512(qh2, _mm512_set1_epi8(0x03)), 4));
        const __m512i q_high = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low_mask),
                                               _mm512_and_si512(qh2, _mm512_set1_epi8(0x30)));
        const __m512i s_low = _mm512_permutexvar_epi16(lanes[2 * half], scales512[w]);
        const __m512i s_high = _mm512_permutexvar_epi16(lanes[2 * half + 1], scales512[w]);
        for (int r = 0; r < R; ++r) {
          sum[w][r] = _mm512_dpwssd_epi32(sum[w][r], _mm512_maddubs_epi16(q_low, a_low[r]), s_low);
          sum[w][r] = _mm512_dpwssd_epi32(sum[w][r], _mm512_maddubs_epi16(q_high, a_high[r]), s_high);
        }
      }
    }
    for (int w = 0; w < W; ++w) {
      const float d = half_to_float(x[w][i].d);
      for (int r = 0; r < R; ++r) acc[w][r] = accumulate_block(add_runs(sum[w][r]), y[r][i].d * d, acc[w][r]);
    }
  }
  for (int w = 0; w < W; ++w)
    for (int r = 0; r < R; ++r) out[w * R + r] = sum_of_8(acc[w][r]);
}

}  // namespace

BLOOMERY_AVX512 float vec_dot_q6_k_q8_k_avx512(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float out;
  q6_k_tile<1, 1>(&x, &y, n, &out);
  return out;
}

BLOOMERY_AVX512 void vec_dot_rows_q6_k_q8_k_avx512(const void* w, const void* const* a, int rows, int64_t n,
                                                   float* out) {
  using Tile = void (*)(const BlockQ6_K* const*, const BlockQ8_K* const*, int64_t, float*);
  static constexpr Tile kTiles[kDotRows] = {q6_k_tile<1, 1>, q6_k_tile<1, 2>, q6_k_tile<1, 3>, q6_k_tile<1, 4>,
                                            q6_k_tile<1, 5>, q6_k_tile<1, 6>, q6_k_tile<1, 7>, q6_k_tile<1, 8>};
  const auto* x = static_cast<const BlockQ6_K*>(w);
  kTiles[rows - 1](&x, reinterpret_cast<const BlockQ8_K* const*>(a), n, out);
}

BLOOMERY_AVX512 float vec_dot_iq4_xs_q8_k_avx512(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_XS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m512i values = codebook(kIq4nlValues);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    __m512i sum = _mm512_setzero_si512();
    for (int sub = 0; sub < 8; sub += 2) {
      const __m512i q = _mm512_shuffle_epi8(values, unpack_nibbles2(x[i].qs + 16 * sub, x[i].qs + 16 * sub + 16));
      const SignSplit s = sign_split(q, load512(y[i].qs + 32 * sub));
      const __m512i p = _mm512_maddubs_epi16(s.magnitude, s.signed_y);
      const __m512i scale = two_scales_i16(static_cast<int16_t>(iq4xs_scale(x[i], sub)),
                                           static_cast<int16_t>(iq4xs_scale(x[i], sub + 1)));
      sum = _mm512_dpwssd_epi32(sum, p, scale);
    }
    acc = accumulate_block(add_runs(sum), y[i].d * half_to_float(x[i].d), acc);
  }
  return sum_of_8(acc);
}

}  // namespace bloomery::quant
