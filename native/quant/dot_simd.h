// The SIMD dot kernels, same contract as dot_scalar.h. Each is compiled for its tier
// with a function target attribute and must only run where kernels.h's tier allows.
#pragma once

#include <cstdint>

#include "base/arch.h"
#include "quant/kernels.h"

namespace bloomery::quant {

#if BLOOMERY_X86_SIMD
#define BLOOMERY_X86_DOT(name) float name(const void* w, const void* a, int64_t n)
#define BLOOMERY_X86_DOT_ROWS(name) void name(const void* w, const void* const* a, int rows, int64_t n, float* out)
#define BLOOMERY_X86_DOT_WEIGHT_ROWS(name)                                                                             \
  void name(const void* w, size_t row_bytes, const void* const* a, int rows, int64_t n, float* out, const void* ahead, \
            size_t ahead_bytes)
#else
#define BLOOMERY_X86_DOT(name) inline constexpr VecDotFn name = nullptr
#define BLOOMERY_X86_DOT_ROWS(name) inline constexpr VecDotRowsFn name = nullptr
#define BLOOMERY_X86_DOT_WEIGHT_ROWS(name) inline constexpr VecDotWeightRowsFn name = nullptr
#endif

BLOOMERY_X86_DOT(vec_dot_f32_f32_avx2);
BLOOMERY_X86_DOT(vec_dot_f16_f16_avx2);
BLOOMERY_X86_DOT(vec_dot_bf16_bf16_avx2);
BLOOMERY_X86_DOT(vec_dot_q4_0_q8_0_avx2);
BLOOMERY_X86_DOT(vec_dot_q4_1_q8_1_avx2);
BLOOMERY_X86_DOT(vec_dot_q5_0_q8_0_avx2);
BLOOMERY_X86_DOT(vec_dot_q5_1_q8_1_avx2);
BLOOMERY_X86_DOT(vec_dot_q2_k_q8_k_avx2);
BLOOMERY_X86_DOT(vec_dot_q8_0_q8_0_avx2);
BLOOMERY_X86_DOT(vec_dot_q3_k_q8_k_avx2);
BLOOMERY_X86_DOT(vec_dot_q4_k_q8_k_avx2);
BLOOMERY_X86_DOT(vec_dot_q5_k_q8_k_avx2);
BLOOMERY_X86_DOT(vec_dot_q6_k_q8_k_avx2);
BLOOMERY_X86_DOT(vec_dot_iq4_nl_q8_0_avx2);
BLOOMERY_X86_DOT(vec_dot_iq4_xs_q8_k_avx2);
BLOOMERY_X86_DOT(vec_dot_mxfp4_q8_0_avx2);
// dot_iq_avx2.cc: the 1- to 3-bit types, whose AVX2 order llama.cpp's AVX-512 hosts run too.
BLOOMERY_X86_DOT(vec_dot_iq2_xxs_q8_k_avx2);
BLOOMERY_X86_DOT(vec_dot_iq2_xs_q8_k_avx2);
BLOOMERY_X86_DOT(vec_dot_iq3_xxs_q8_k_avx2);
BLOOMERY_X86_DOT(vec_dot_iq1_s_q8_k_avx2);
BLOOMERY_X86_DOT(vec_dot_iq3_s_q8_k_avx2);
BLOOMERY_X86_DOT(vec_dot_iq2_s_q8_k_avx2);
BLOOMERY_X86_DOT(vec_dot_iq1_m_q8_k_avx2);
BLOOMERY_X86_DOT(vec_dot_tq1_0_q8_k_avx2);
BLOOMERY_X86_DOT(vec_dot_tq2_0_q8_k_avx2);

BLOOMERY_X86_DOT(vec_dot_f32_f32_avx512);
BLOOMERY_X86_DOT(vec_dot_f16_f16_avx512);
BLOOMERY_X86_DOT(vec_dot_bf16_bf16_avx512);
// Only where the CPU has AVX-512 BF16 (dpbf16).
BLOOMERY_X86_DOT(vec_dot_bf16_bf16_avx512_bf16);
BLOOMERY_X86_DOT(vec_dot_q3_k_q8_k_avx512);
BLOOMERY_X86_DOT(vec_dot_q4_k_q8_k_avx512);
BLOOMERY_X86_DOT(vec_dot_q5_k_q8_k_avx512);
BLOOMERY_X86_DOT(vec_dot_q6_k_q8_k_avx512);
BLOOMERY_X86_DOT(vec_dot_mxfp4_q8_0_avx512);
BLOOMERY_X86_DOT(vec_dot_iq4_xs_q8_k_avx512);
// dot_iq_avx512.cc: the codebook types with signs.
BLOOMERY_X86_DOT(vec_dot_iq2_xxs_q8_k_avx512);
BLOOMERY_X86_DOT(vec_dot_iq2_xs_q8_k_avx512);
BLOOMERY_X86_DOT(vec_dot_iq2_s_q8_k_avx512);
BLOOMERY_X86_DOT(vec_dot_iq3_xxs_q8_k_avx512);
BLOOMERY_X86_DOT(vec_dot_iq3_s_q8_k_avx512);
BLOOMERY_X86_DOT(vec_dot_iq1_s_q8_k_avx512);
BLOOMERY_X86_DOT(vec_dot_iq1_m_q8_k_avx512);
// dot_iq_rows_avx512.cc: the 1- to 3-bit types' several-row dots.
BLOOMERY_X86_DOT_ROWS(vec_dot_rows_iq2_xxs_q8_k_avx512);
BLOOMERY_X86_DOT_ROWS(vec_dot_rows_iq2_xs_q8_k_avx512);
BLOOMERY_X86_DOT_ROWS(vec_dot_rows_iq2_s_q8_k_avx512);
BLOOMERY_X86_DOT_ROWS(vec_dot_rows_iq3_xxs_q8_k_avx512);
BLOOMERY_X86_DOT_ROWS(vec_dot_rows_iq3_s_q8_k_avx512);
BLOOMERY_X86_DOT_ROWS(vec_dot_rows_iq1_s_q8_k_avx512);
BLOOMERY_X86_DOT_ROWS(vec_dot_rows_iq1_m_q8_k_avx512);
BLOOMERY_X86_DOT_ROWS(vec_dot_rows_tq1_0_q8_k_avx512);
BLOOMERY_X86_DOT_ROWS(vec_dot_rows_tq2_0_q8_k_avx512);

// In the order of llama.cpp's repacked products (kernels.h, vec_dot_repacked).
BLOOMERY_X86_DOT(vec_dot_q4_0_q8_0_repacked_avx2);
BLOOMERY_X86_DOT(vec_dot_iq4_nl_q8_0_repacked_avx2);
BLOOMERY_X86_DOT(vec_dot_mxfp4_q8_0_repacked_avx2);
// Q8_0 in its own layout (llama.cpp repacks it on no x86 host).
BLOOMERY_X86_DOT_WEIGHT_ROWS(vec_dot_weight_rows_q8_0_q8_0_avx2);
BLOOMERY_X86_DOT_WEIGHT_ROWS(vec_dot_weight_rows_q8_0_q8_0_vnni);
BLOOMERY_X86_DOT_WEIGHT_ROWS(vec_dot_weight_rows_q4_0_q8_0_repacked_avx2);
BLOOMERY_X86_DOT_WEIGHT_ROWS(vec_dot_weight_rows_iq4_nl_q8_0_repacked_avx2);
BLOOMERY_X86_DOT_WEIGHT_ROWS(vec_dot_weight_rows_mxfp4_q8_0_repacked_avx2);
BLOOMERY_X86_DOT_WEIGHT_ROWS(vec_dot_weight_rows_q4_0_q8_0_repacked_vnni);
BLOOMERY_X86_DOT_WEIGHT_ROWS(vec_dot_weight_rows_iq4_nl_q8_0_repacked_vnni);
BLOOMERY_X86_DOT_WEIGHT_ROWS(vec_dot_weight_rows_mxfp4_q8_0_repacked_vnni);
BLOOMERY_X86_DOT(vec_dot_q4_k_q8_k_repacked_avx2);
BLOOMERY_X86_DOT(vec_dot_q2_k_q8_k_repacked_avx2);
BLOOMERY_X86_DOT(vec_dot_q4_k_q8_k_repacked_avx512);
BLOOMERY_X86_DOT_ROWS(vec_dot_rows_q4_k_q8_k_repacked_avx512);

// Multi-row dots (kernels.h's VecDotRowsFn), each bit-identical to its single-row dot above.
BLOOMERY_X86_DOT_ROWS(vec_dot_rows_q3_k_q8_k_avx512);
BLOOMERY_X86_DOT_ROWS(vec_dot_rows_q4_k_q8_k_avx512);
BLOOMERY_X86_DOT_ROWS(vec_dot_rows_q6_k_q8_k_avx512);

}  // namespace bloomery::quant
