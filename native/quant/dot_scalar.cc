#include "quant/dot_scalar.h"

#include <cstring>

#include "quant/blocks.h"
#include "quant/float_formats.h"
#include "quant/iq_codes.h"

namespace bloomery::quant {

// The float dots accumulate in double, as ggml's scalar ggml_vec_dot_f16/f32 do.
float vec_dot_f32_f32(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * y[i]);
  return static_cast<float>(sum);
}

float vec_dot_f16_f16(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]));
  return static_cast<float>(sum);
}

float vec_dot_bf16_bf16(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(bf16_to_fp32(x[i]) * bf16_to_fp32(y[i]));
  return static_cast<float>(sum);
}

namespace {

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Sum of q[j] * y[j] over a 32-element block whose 4-bit codes map through `decode`
// (element j in the low nibble of qs[j], element j+16 in the high nibble).
template <typename Decode>
int dot_nibbles(const uint8_t* qs, const int8_t* y, Decode decode) {
  int sum = 0;
  for (int j = 0; j < kQK / 2; ++j) sum += decode(qs[j] & 0x0f, j) * y[j] + decode(qs[j] >> 4, j + 16) * y[j + 16];
  return sum;
}

}  // namespace

float vec_dot_q4_0_q8_0(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const int s = dot_nibbles(x[i].qs, y[i].qs, [](int q, int) { return q - 8; });
    sum += static_cast<float>(s) * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d));
  }
  return sum;
}

float vec_dot_q4_1_q8_1(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const int s = dot_nibbles(x[i].qs, y[i].qs, [](int q, int) { return q; });
    sum += static_cast<float>(s) * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d)) +
           fp16_to_fp32(x[i].m) * fp16_to_fp32(y[i].s);
  }
  return sum;
}

float vec_dot_q5_0_q8_0(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const uint32_t qh = load_u32(x[i].qh);
    const int s = dot_nibbles(x[i].qs, y[i].qs, [qh](int q, int j) { return (q | (((qh >> j) & 1) << 4)) - 16; });
    sum += static_cast<float>(s) * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d));
  }
  return sum;
}

float vec_dot_q5_1_q8_1(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const uint32_t qh = load_u32(x[i].qh);
    const int s = dot_nibbles(x[i].qs, y[i].qs, [qh](int q, int j) { return q | (((qh >> j) & 1) << 4); });
    sum += static_cast<float>(s) * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d)) +
           fp16_to_fp32(x[i].m) * fp16_to_fp32(y[i].s);
  }
  return sum;
}

float vec_dot_q8_0_q8_0(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int s = 0;
    for (int j = 0; j < kQK; ++j) s += x[i].qs[j] * y[i].qs[j];
    sum += static_cast<float>(s) * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d));
  }
  return sum;
}

float vec_dot_iq4_nl_q8_0(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_NL*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const int s = dot_nibbles(x[i].qs, y[i].qs, [](int q, int) { return kIq4nlValues[q]; });
    sum += static_cast<float>(s) * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d));
  }
  return sum;
}

float vec_dot_mxfp4_q8_0(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockMXFP4*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const int s = dot_nibbles(x[i].qs, y[i].qs, [](int q, int) { return kMxfp4Values[q]; });
    sum += static_cast<float>(s) * (fp16_to_fp32(y[i].d) * e8m0_to_fp32_half(x[i].e));
  }
  return sum;
}

// The K-quant dots: per super-block, sum_j scale_j * (q . y over sub-block j) exactly in
// int, then one multiply by d * y.d; the mins (Q2_K/Q4_K/Q5_K) reuse Q8_K's per-16 sums.

float vec_dot_q2_k_q8_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int scaled = 0, mins = 0;
    for (int e = 0; e < kQKK; e += 16) {
      const int sub = e / 16, half = e / 128, shift = 2 * ((e % 128) / 32), offset = e % 32;
      int s = 0;
      for (int l = 0; l < 16; ++l) s += ((x[i].qs[32 * half + offset + l] >> shift) & 3) * y[i].qs[e + l];
      scaled += (x[i].scales[sub] & 0x0f) * s;
      mins += (x[i].scales[sub] >> 4) * y[i].bsums[sub];
    }
    sum += y[i].d * fp16_to_fp32(x[i].d) * static_cast<float>(scaled) -
           y[i].d * fp16_to_fp32(x[i].dmin) * static_cast<float>(mins);
  }
  return sum;
}

float vec_dot_q3_k_q8_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int scaled = 0;
    for (int e = 0; e < kQKK; e += 16) {
      const int half = e / 128, pair = (e % 128) / 32, offset = e % 32;
      const int high_bit = 1 << (4 * half + pair);
      int s = 0;
      for (int l = 0; l < 16; ++l) {
        const int low = (x[i].qs[32 * half + offset + l] >> (2 * pair)) & 3;
        s += (low - ((x[i].hmask[offset + l] & high_bit) ? 0 : 4)) * y[i].qs[e + l];
      }
      scaled += q3k_scale(x[i].scales, e / 16) * s;
    }
    sum += y[i].d * fp16_to_fp32(x[i].d) * static_cast<float>(scaled);
  }
  return sum;
}

float vec_dot_q4_k_q8_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int scaled = 0, mins = 0;
    for (int sub = 0; sub < 8; ++sub) {
      const uint8_t* q = x[i].qs + 32 * (sub / 2);
      const int shift = 4 * (sub % 2);
      int s = 0;
      for (int l = 0; l < 32; ++l) s += ((q[l] >> shift) & 0x0f) * y[i].qs[32 * sub + l];
      const ScaleMin sm = k4_scale_min(x[i].scales, sub);
      scaled += sm.scale * s;
      mins += sm.min * (y[i].bsums[2 * sub] + y[i].bsums[2 * sub + 1]);
    }
    sum += y[i].d * fp16_to_fp32(x[i].d) * static_cast<float>(scaled) -
           y[i].d * fp16_to_fp32(x[i].dmin) * static_cast<float>(mins);
  }
  return sum;
}

float vec_dot_q5_k_q8_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int scaled = 0, mins = 0;
    for (int sub = 0; sub < 8; ++sub) {
      const uint8_t* q = x[i].qs + 32 * (sub / 2);
      const int shift = 4 * (sub % 2);
      int s = 0;
      for (int l = 0; l < 32; ++l) {
        const int value = ((q[l] >> shift) & 0x0f) | (((x[i].qh[l] >> sub) & 1) << 4);
        s += value * y[i].qs[32 * sub + l];
      }
      const ScaleMin sm = k4_scale_min(x[i].scales, sub);
      scaled += sm.scale * s;
      mins += sm.min * (y[i].bsums[2 * sub] + y[i].bsums[2 * sub + 1]);
    }
    sum += y[i].d * fp16_to_fp32(x[i].d) * static_cast<float>(scaled) -
           y[i].d * fp16_to_fp32(x[i].dmin) * static_cast<float>(mins);
  }
  return sum;
}

float vec_dot_q6_k_q8_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int scaled = 0;
    for (int e = 0; e < kQKK; e += 16) {
      const int half = e / 128, quarter = (e % 128) / 32, offset = e % 32;
      const uint8_t* ql = x[i].ql + 64 * half + 32 * (quarter % 2);
      const uint8_t* qh = x[i].qh + 32 * half;
      int s = 0;
      for (int l = offset; l < offset + 16; ++l) {
        const int low = (ql[l] >> (4 * (quarter / 2))) & 0x0f;
        const int high = (qh[l] >> (2 * quarter)) & 3;
        s += ((low | (high << 4)) - 32) * y[i].qs[e + l - offset];
      }
      scaled += x[i].scales[e / 16] * s;
    }
    sum += y[i].d * fp16_to_fp32(x[i].d) * static_cast<float>(scaled);
  }
  return sum;
}

float vec_dot_iq4_xs_q8_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockIQ4_XS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int scaled = 0;
    for (int sub = 0; sub < 8; ++sub) {
      const int s = dot_nibbles(x[i].qs + 16 * sub, y[i].qs + 32 * sub, [](int q, int) { return kIq4nlValues[q]; });
      scaled += iq4xs_scale(x[i], sub) * s;
    }
    sum += y[i].d * fp16_to_fp32(x[i].d) * static_cast<float>(scaled);
  }
  return sum;
}

// The 1- to 3-bit types: per block, sum_s scale_s * (q . y over the 16 elements of s) exactly in
// int, and for IQ1_S/IQ1_M the deltas' sum_g scale * sign_g * (the sum of y over group g).
namespace {
template <typename Block>
float dot_iq(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  IqCodes c;
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    decode_iq(x[i], c);
    int scaled = 0, deltas = 0;
    for (int s = 0; s < kQKK / 16; ++s) {
      int dot = 0;
      for (int l = 16 * s; l < 16 * s + 16; ++l) dot += c.q[l] * y[i].qs[l];
      scaled += c.scale[s] * dot;
    }
    for (int g = 0; g < kQKK / 8; ++g) {
      int group_sum = 0;
      for (int l = 8 * g; l < 8 * g + 8; ++l) group_sum += y[i].qs[l];
      deltas += c.scale[g / 2] * c.delta_sign[g] * group_sum;
    }
    sum += c.d * y[i].d * (c.factor * static_cast<float>(scaled) + kIq1Delta * static_cast<float>(deltas));
  }
  return sum;
}
}  // namespace

float vec_dot_iq2_xxs_q8_k(const void* w, const void* a, int64_t n) { return dot_iq<BlockIQ2_XXS>(w, a, n); }
float vec_dot_iq2_xs_q8_k(const void* w, const void* a, int64_t n) { return dot_iq<BlockIQ2_XS>(w, a, n); }
float vec_dot_iq2_s_q8_k(const void* w, const void* a, int64_t n) { return dot_iq<BlockIQ2_S>(w, a, n); }
float vec_dot_iq3_xxs_q8_k(const void* w, const void* a, int64_t n) { return dot_iq<BlockIQ3_XXS>(w, a, n); }
float vec_dot_iq3_s_q8_k(const void* w, const void* a, int64_t n) { return dot_iq<BlockIQ3_S>(w, a, n); }
float vec_dot_iq1_s_q8_k(const void* w, const void* a, int64_t n) { return dot_iq<BlockIQ1_S>(w, a, n); }
float vec_dot_iq1_m_q8_k(const void* w, const void* a, int64_t n) { return dot_iq<BlockIQ1_M>(w, a, n); }
float vec_dot_tq1_0_q8_k(const void* w, const void* a, int64_t n) { return dot_iq<BlockTQ1_0>(w, a, n); }
float vec_dot_tq2_0_q8_k(const void* w, const void* a, int64_t n) { return dot_iq<BlockTQ2_0>(w, a, n); }

}  // namespace bloomery::quant
