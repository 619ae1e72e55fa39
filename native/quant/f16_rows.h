// Float rows against f16 rows: the inner loops of attention over an f16 KV cache. Each
// has a scalar reference and an AVX2 + F16C path (the hardware conversion replaces the
// bit-twiddling of fp16_to_fp32); both sum in float.
#pragma once

#include <cstdint>

#include "quant/kernels.h"

namespace bloomery::quant {

using DotF16Fn = float (*)(const uint16_t* x, const float* y, int64_t n);
using AxpyF16Fn = void (*)(float a, const uint16_t* x, float* y, int64_t n);

struct F16RowKernels {
  DotF16Fn dot;    // sum of x[i] * y[i]
  AxpyF16Fn axpy;  // y[i] += a * x[i]
};

// The kernels for a CPU of `tier` (AVX-512 CPUs use the AVX2 ones).
const F16RowKernels& f16_row_kernels(SimdTier tier);

float dot_f16_scalar(const uint16_t* x, const float* y, int64_t n);
void axpy_f16_scalar(float a, const uint16_t* x, float* y, int64_t n);
float dot_f16_avx2(const uint16_t* x, const float* y, int64_t n);
void axpy_f16_avx2(float a, const uint16_t* x, float* y, int64_t n);

}  // namespace bloomery::quant
