#include "quant/dequantize.h"

#include <cstring>

#include "quant/blocks.h"
#include "quant/float_formats.h"
#include "quant/iq_codes.h"

namespace bloomery::quant {

void dequantize_row_f32(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, n * sizeof(float)); }

void dequantize_row_f16(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(x[i]);
}

void dequantize_row_bf16(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(x[i]);
}

void dequantize_row_q4_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[j] = static_cast<float>((x[i].qs[j] & 0x0f) - 8) * d;
      dst[j + kQK / 2] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_row_q4_1(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[j] = static_cast<float>(x[i].qs[j] & 0x0f) * d + m;
      dst[j + kQK / 2] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

namespace {
uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
}  // namespace

void dequantize_row_q5_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = fp16_to_fp32(x[i].d);
    const uint32_t qh = load_u32(x[i].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int low = (x[i].qs[j] & 0x0f) | (((qh >> j) & 1) << 4);
      const int high = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      dst[j] = static_cast<float>(low - 16) * d;
      dst[j + kQK / 2] = static_cast<float>(high - 16) * d;
    }
  }
}

void dequantize_row_q5_1(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
    const uint32_t qh = load_u32(x[i].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int low = (x[i].qs[j] & 0x0f) | (((qh >> j) & 1) << 4);
      const int high = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      dst[j] = static_cast<float>(low) * d + m;
      dst[j + kQK / 2] = static_cast<float>(high) * d + m;
    }
  }
}

void dequantize_row_q8_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void dequantize_row_q8_1(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ8_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

// The 2-bit and 3-bit K-quants pack four elements per byte: in each 128-element half,
// byte l holds elements l, l+32, l+64 and l+96 in bit pairs 0, 2, 4 and 6.
void dequantize_row_q2_k(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int sub = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part, ++sub) {
          const float dl = d * static_cast<float>(x[i].scales[sub] & 0x0f);
          const float ml = dmin * static_cast<float>(x[i].scales[sub] >> 4);
          for (int l = 0; l < 16; ++l) *dst++ = dl * static_cast<float>((q[16 * part + l] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void dequantize_row_q3_k(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const uint8_t* q = x[i].qs;
    int sub = 0;
    uint8_t high_bit = 1;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, high_bit <<= 1) {
        for (int part = 0; part < 2; ++part, ++sub) {
          const float dl = d * static_cast<float>(q3k_scale(x[i].scales, sub));
          for (int l = 16 * part; l < 16 * part + 16; ++l) {
            const int value = ((q[l] >> shift) & 3) - ((x[i].hmask[l] & high_bit) ? 0 : 4);
            *dst++ = dl * static_cast<float>(value);
          }
        }
      }
    }
  }
}

// Q4_K/Q5_K: each 64 elements share 32 bytes, the first 32 elements in the low nibbles
// and the next 32 in the high nibbles, each with its own scale and min.
void dequantize_row_q4_k(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int sub = 0; sub < 8; sub += 2, q += 32) {
      const ScaleMin lo = k4_scale_min(x[i].scales, sub), hi = k4_scale_min(x[i].scales, sub + 1);
      const float d1 = d * lo.scale, m1 = dmin * lo.min, d2 = d * hi.scale, m2 = dmin * hi.min;
      for (int l = 0; l < 32; ++l) *dst++ = d1 * static_cast<float>(q[l] & 0x0f) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void dequantize_row_q5_k(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int sub = 0; sub < 8; sub += 2, q += 32) {
      const ScaleMin lo = k4_scale_min(x[i].scales, sub), hi = k4_scale_min(x[i].scales, sub + 1);
      const float d1 = d * lo.scale, m1 = dmin * lo.min, d2 = d * hi.scale, m2 = dmin * hi.min;
      for (int l = 0; l < 32; ++l) {
        const int value = (q[l] & 0x0f) | (((x[i].qh[l] >> sub) & 1) << 4);
        *dst++ = d1 * static_cast<float>(value) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        const int value = (q[l] >> 4) | (((x[i].qh[l] >> (sub + 1)) & 1) << 4);
        *dst++ = d2 * static_cast<float>(value) - m2;
      }
    }
  }
}

// Q6_K: per 128-element half, ql bytes 0..31 hold elements 0..31 (low nibbles) and
// 64..95 (high), bytes 32..63 hold 32..63 and 96..127; qh byte l holds the top two bits
// of elements l, l+32, l+64, l+96.
void dequantize_row_q6_k(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, dst += 128) {
      for (int l = 0; l < 32; ++l) {
        const int s = l / 16;
        const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        dst[l] = d * static_cast<float>(sc[s]) * static_cast<float>(q1);
        dst[l + 32] = d * static_cast<float>(sc[s + 2]) * static_cast<float>(q2);
        dst[l + 64] = d * static_cast<float>(sc[s + 4]) * static_cast<float>(q3);
        dst[l + 96] = d * static_cast<float>(sc[s + 6]) * static_cast<float>(q4);
      }
    }
  }
}

void dequantize_row_q8_k(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i, dst += kQKK) {
    for (int j = 0; j < kQKK; ++j) dst[j] = x[i].d * static_cast<float>(x[i].qs[j]);
  }
}

void dequantize_row_iq4_nl(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[j] = d * static_cast<float>(kIq4nlValues[x[i].qs[j] & 0x0f]);
      dst[j + kQK / 2] = d * static_cast<float>(kIq4nlValues[x[i].qs[j] >> 4]);
    }
  }
}

void dequantize_row_iq4_xs(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_XS*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int sub = 0; sub < 8; ++sub, dst += 32) {
      const float dl = d * static_cast<float>(iq4xs_scale(x[i], sub));
      const uint8_t* q = x[i].qs + 16 * sub;
      for (int j = 0; j < 16; ++j) {
        dst[j] = dl * static_cast<float>(kIq4nlValues[q[j] & 0x0f]);
        dst[j + 16] = dl * static_cast<float>(kIq4nlValues[q[j] >> 4]);
      }
    }
  }
}

void dequantize_row_mxfp4(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const BlockMXFP4*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = e8m0_to_fp32_half(x[i].e);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[j] = static_cast<float>(kMxfp4Values[x[i].qs[j] & 0x0f]) * d;
      dst[j + kQK / 2] = static_cast<float>(kMxfp4Values[x[i].qs[j] >> 4]) * d;
    }
  }
}

// The 1- to 3-bit types, through their unpacked form (iq_codes.h gives the order of float steps).
namespace {
template <typename Block>
void dequantize_iq(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const Block*>(src);
  IqCodes c;
  for (int64_t i = 0; i < n / kQKK; ++i, dst += kQKK) {
    decode_iq(x[i], c);
    for (int e = 0; e < kQKK; ++e) {
      const float dl = c.d * static_cast<float>(c.scale[e / 16]) * c.factor;
      const int8_t delta_sign = c.delta_sign[e / 8];
      dst[e] = delta_sign ? dl * (static_cast<float>(c.q[e]) + kIq1Delta * static_cast<float>(delta_sign))
                          : dl * static_cast<float>(c.q[e]);
    }
  }
}
}  // namespace

void dequantize_row_iq2_xxs(const void* src, float* dst, int64_t n) { dequantize_iq<BlockIQ2_XXS>(src, dst, n); }
void dequantize_row_iq2_xs(const void* src, float* dst, int64_t n) { dequantize_iq<BlockIQ2_XS>(src, dst, n); }
void dequantize_row_iq2_s(const void* src, float* dst, int64_t n) { dequantize_iq<BlockIQ2_S>(src, dst, n); }
void dequantize_row_iq3_xxs(const void* src, float* dst, int64_t n) { dequantize_iq<BlockIQ3_XXS>(src, dst, n); }
void dequantize_row_iq3_s(const void* src, float* dst, int64_t n) { dequantize_iq<BlockIQ3_S>(src, dst, n); }
void dequantize_row_iq1_s(const void* src, float* dst, int64_t n) { dequantize_iq<BlockIQ1_S>(src, dst, n); }
void dequantize_row_iq1_m(const void* src, float* dst, int64_t n) { dequantize_iq<BlockIQ1_M>(src, dst, n); }
void dequantize_row_tq1_0(const void* src, float* dst, int64_t n) { dequantize_iq<BlockTQ1_0>(src, dst, n); }
void dequantize_row_tq2_0(const void* src, float* dst, int64_t n) { dequantize_iq<BlockTQ2_0>(src, dst, n); }

}  // namespace bloomery::quant
