// Quantization of float activation rows into the formats the dot kernels read them in
// (Q8_0, Q8_1, Q8_K, F16, BF16). Rounding follows ggml's reference quantizers exactly,
// so a row quantized here is byte-identical to llama.cpp's.
#pragma once

#include <cstdint>

namespace bloomery::quant {

void quantize_row_f32(const float* src, void* dst, int64_t n);
void quantize_row_f16(const float* src, void* dst, int64_t n);
void quantize_row_bf16(const float* src, void* dst, int64_t n);
void quantize_row_q8_0(const float* src, void* dst, int64_t n);
void quantize_row_q8_1(const float* src, void* dst, int64_t n);
void quantize_row_q8_k(const float* src, void* dst, int64_t n);

}  // namespace bloomery::quant
