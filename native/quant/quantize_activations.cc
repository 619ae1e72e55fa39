#include "quant/quantize_activations.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/float_formats.h"

namespace bloomery::quant {

namespace {

// ggml's nearest_int: round half to even through the float mantissa (|v| < 2^22).
int nearest_int(float v) {
  const int32_t bits = std::bit_cast<int32_t>(v + 12582912.f);
  return (bits & 0x007fffff) - 0x00400000;
}

// Shared by Q8_0 and Q8_1: symmetric scale from the block's largest magnitude. The inverse
// scale (127 / amax) and the rounding (half to even) are those of llama.cpp's x86 SIMD path,
// not of ggml's scalar reference (1 / d, half away from zero): the activations llama.cpp
// actually multiplies on x86 hosts, so that the same tokens give the same distributions
// (on a trained model the reference's rounding moved KL against llama.cpp from 1.5e-3 to
// 2.6e-3). Returns the int sum.
int quantize_block_q8(const float* x, int8_t* qs, float& d) {
  float amax = 0;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  d = amax / 127;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  // nearest_int is nearbyintf here (|x * id| <= 127, the default rounding mode), without a libm
  // call per value, so the loop vectorizes.
  int sum = 0;
  for (int j = 0; j < kQK; ++j) {
    qs[j] = static_cast<int8_t>(nearest_int(x[j] * id));
    sum += qs[j];
  }
  return sum;
}

}  // namespace

void quantize_row_f32(const float* src, void* dst, int64_t n) { std::memcpy(dst, src, n * sizeof(float)); }

void quantize_row_f16(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(src[i]);
}

void quantize_row_bf16(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_bf16(src[i]);
}

void quantize_row_q8_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) {
    float d;
    quantize_block_q8(src, y[i].qs, d);
    y[i].d = fp32_to_fp16(d);
  }
}

void quantize_row_q8_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, src += kQK) {
    float d;
    const int sum = quantize_block_q8(src, y[i].qs, d);
    y[i].d = fp32_to_fp16(d);
    y[i].s = fp32_to_fp16(static_cast<float>(sum) * d);
  }
}

// Q8_K scales by the signed value of largest magnitude, so that value maps to -127
// exactly (ggml's choice, which keeps every quant in [-127, 127] for the sign tricks of
// the SIMD dots).
void quantize_row_q8_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i, src += kQKK) {
    float max = 0, amax = 0;
    for (int j = 0; j < kQKK; ++j) {
      const float ax = std::fabs(src[j]);
      if (ax > amax) {
        amax = ax;
        max = src[j];
      }
    }
    if (amax == 0) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQKK; ++j) y[i].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * src[j])));
    for (int j = 0; j < kQKK / 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[16 * j + l];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

}  // namespace bloomery::quant
