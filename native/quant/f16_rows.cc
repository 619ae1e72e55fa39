#include "quant/f16_rows.h"

#include "quant/float_formats.h"

namespace bloomery::quant {

float dot_f16_scalar(const uint16_t* x, const float* y, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += fp16_to_fp32(x[i]) * y[i];
  return sum;
}

void axpy_f16_scalar(float a, const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * fp16_to_fp32(x[i]);
}

const F16RowKernels& f16_row_kernels(SimdTier tier) {
  static constexpr F16RowKernels kScalar{dot_f16_scalar, axpy_f16_scalar};
  static constexpr F16RowKernels kAvx2{dot_f16_avx2, axpy_f16_avx2};
  return tier >= SimdTier::kAvx2 ? kAvx2 : kScalar;
}

}  // namespace bloomery::quant
