// The SIMD dot kernels, same contract as dot_scalar.h. Each is compiled for its tier
// with a function target attribute and must only run where kernels.h's tier allows.
#pragma once

#include <cstdint>

#include "quant/kernels.h"

namespace bloomery::quant {

float vec_dot_f32_f32_avx2(const void* w, const void* a, int64_t n);
float vec_dot_f16_f16_avx2(const void* w, const void* a, int64_t n);
float vec_dot_bf16_bf16_avx2(const void* w, const void* a, int64_t n);
float vec_dot_q4_0_q8_0_avx2(const void* w, const void* a, int64_t n);
float vec_dot_q4_1_q8_1_avx2(const void* w, const void* a, int64_t n);
float vec_dot_q5_0_q8_0_avx2(const void* w, const void* a, int64_t n);
float vec_dot_q5_1_q8_1_avx2(const void* w, const void* a, int64_t n);
float vec_dot_q2_k_q8_k_avx2(const void* w, const void* a, int64_t n);
float vec_dot_q8_0_q8_0_avx2(const void* w, const void* a, int64_t n);
float vec_dot_q3_k_q8_k_avx2(const void* w, const void* a, int64_t n);
float vec_dot_q4_k_q8_k_avx2(const void* w, const void* a, int64_t n);
float vec_dot_q5_k_q8_k_avx2(const void* w, const void* a, int64_t n);
float vec_dot_q6_k_q8_k_avx2(const void* w, const void* a, int64_t n);
float vec_dot_iq4_nl_q8_0_avx2(const void* w, const void* a, int64_t n);
float vec_dot_iq4_xs_q8_k_avx2(const void* w, const void* a, int64_t n);
float vec_dot_mxfp4_q8_0_avx2(const void* w, const void* a, int64_t n);

float vec_dot_f32_f32_avx512(const void* w, const void* a, int64_t n);
float vec_dot_f16_f16_avx512(const void* w, const void* a, int64_t n);
float vec_dot_bf16_bf16_avx512(const void* w, const void* a, int64_t n);
// Only where the CPU has AVX-512 BF16 (dpbf16).
float vec_dot_bf16_bf16_avx512_bf16(const void* w, const void* a, int64_t n);
float vec_dot_q3_k_q8_k_avx512(const void* w, const void* a, int64_t n);
float vec_dot_q4_k_q8_k_avx512(const void* w, const void* a, int64_t n);
float vec_dot_q5_k_q8_k_avx512(const void* w, const void* a, int64_t n);
float vec_dot_q6_k_q8_k_avx512(const void* w, const void* a, int64_t n);
float vec_dot_mxfp4_q8_0_avx512(const void* w, const void* a, int64_t n);
float vec_dot_iq4_xs_q8_k_avx512(const void* w, const void* a, int64_t n);

// In the order of llama.cpp's repacked products (kernels.h, vec_dot_repacked).
float vec_dot_q4_0_q8_0_repacked_avx2(const void* w, const void* a, int64_t n);
float vec_dot_iq4_nl_q8_0_repacked_avx2(const void* w, const void* a, int64_t n);
float vec_dot_mxfp4_q8_0_repacked_avx2(const void* w, const void* a, int64_t n);
float vec_dot_q4_k_q8_k_repacked_avx2(const void* w, const void* a, int64_t n);
float vec_dot_q2_k_q8_k_repacked_avx2(const void* w, const void* a, int64_t n);
float vec_dot_q4_k_q8_k_repacked_avx512(const void* w, const void* a, int64_t n);
void vec_dot_rows_q4_k_q8_k_repacked_avx512(const void* w, const void* const* a, int rows, int64_t n, float* out);

// Multi-row dots (kernels.h's VecDotRowsFn), each bit-identical to its single-row dot above.
void vec_dot_rows_q3_k_q8_k_avx512(const void* w, const void* const* a, int rows, int64_t n, float* out);
void vec_dot_rows_q4_k_q8_k_avx512(const void* w, const void* const* a, int rows, int64_t n, float* out);
void vec_dot_rows_q6_k_q8_k_avx512(const void* w, const void* const* a, int rows, int64_t n, float* out);

}  // namespace bloomery::quant
