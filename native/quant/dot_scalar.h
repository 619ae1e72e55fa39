// Scalar reference dot products of a weight row with an activation row, each in the
// activation format ggml pairs the weight type with (see kernels.h). `n` is the element
// count (a whole number of blocks). Integer sums per (sub-)block are exact; the float
// steps follow ggml's formulas, so results match ggml's to float rounding.
#pragma once

#include <cstdint>

namespace bloomery::quant {

float vec_dot_f32_f32(const void* w, const void* a, int64_t n);
float vec_dot_f16_f16(const void* w, const void* a, int64_t n);
float vec_dot_bf16_bf16(const void* w, const void* a, int64_t n);
float vec_dot_q4_0_q8_0(const void* w, const void* a, int64_t n);
float vec_dot_q4_1_q8_1(const void* w, const void* a, int64_t n);
float vec_dot_q5_0_q8_0(const void* w, const void* a, int64_t n);
float vec_dot_q5_1_q8_1(const void* w, const void* a, int64_t n);
float vec_dot_q8_0_q8_0(const void* w, const void* a, int64_t n);
float vec_dot_q2_k_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_q3_k_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_q4_k_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_q5_k_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_q6_k_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_iq4_nl_q8_0(const void* w, const void* a, int64_t n);
float vec_dot_iq4_xs_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_mxfp4_q8_0(const void* w, const void* a, int64_t n);
float vec_dot_iq2_xxs_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_iq2_xs_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_iq2_s_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_iq3_xxs_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_iq3_s_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_iq1_s_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_iq1_m_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_tq1_0_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_tq2_0_q8_k(const void* w, const void* a, int64_t n);

}  // namespace bloomery::quant
