// glibc's logf reproduced on the GPU, for the one router gating (DeepSeek-V4's sqrt-softplus) whose
// weights the CPU oracle takes through libm's log.
#pragma once

#include <cstdint>

namespace bloomery::cuda {

// A float's log as glibc's logf returns it (up to 0.82 ulp off, so no correctly rounded log can
// stand in): its algorithm, a table of 16 reciprocals and their logs around which a degree-3
// polynomial in double takes the rest, for positive normal x. Its host twin matched glibc's logf on
// every float in [1, 5e8] (the router's 1 + exp(w)), with and without fused multiply-adds.
__device__ __forceinline__ float log_as_libm(float x) {
  constexpr double kInvC[16] = {
      0x1.661ec79f8f3bep+0, 0x1.571ed4aaf883dp+0, 0x1.49539f0f010bp+0,  0x1.3c995b0b80385p+0, 0x1.30d190c8864a5p+0,
      0x1.25e227b0b8eap+0,  0x1.1bb4a4a1a343fp+0, 0x1.12358f08ae5bap+0, 0x1.0953f419900a7p+0, 0x1p+0,
      0x1.e608cfd9a47acp-1, 0x1.ca4b31f026aap-1,  0x1.b2036576afce6p-1, 0x1.9c2d163a1aa2dp-1, 0x1.886e6037841edp-1,
      0x1.767dcf5534862p-1};
  constexpr double kLogC[16] = {
      -0x1.57bf7808caadep-2, -0x1.2bef0a7c06ddbp-2, -0x1.01eae7f513a67p-2, -0x1.b31d8a68224e9p-3, -0x1.6574f0ac07758p-3,
      -0x1.1aa2bc79c81p-3,   -0x1.a4e76ce8c0e5ep-4, -0x1.1973c5a611cccp-4, -0x1.252f438e10c1ep-5, 0x0p+0,
      0x1.aa5aa5df25984p-5,  0x1.c5e53aa362eb4p-4,  0x1.526e57720db08p-3,  0x1.bc2860d22477p-3,   0x1.1058bc8a07ee1p-2,
      0x1.4043057b6ee09p-2};
  constexpr double kLn2 = 0x1.62e42fefa39efp-1;
  constexpr double kA0 = -0x1.00ea348b88334p-2, kA1 = 0x1.5575b0be00b6ap-2, kA2 = -0x1.ffffef20a4123p-2;
  const uint32_t ix = __float_as_uint(x);
  if (ix == 0x3f800000u) return 0.0f;
  const uint32_t tmp = ix - 0x3f330000u;  // x's exponent and top mantissa bits, from about 0.7 up
  const int i = static_cast<int>((tmp >> 19) % 16);
  const int k = static_cast<int32_t>(tmp) >> 23;
  const double z = __uint_as_float(ix - (tmp & (0x1ffu << 23)));
  const double r = __fma_rn(z, kInvC[i], -1.0);
  const double y0 = __fma_rn(static_cast<double>(k), kLn2, kLogC[i]);
  const double r2 = __dmul_rn(r, r);
  double y = __fma_rn(kA1, r, kA2);
  y = __fma_rn(kA0, r2, y);
  y = __fma_rn(y, r2, __dadd_rn(y0, r));
  return __double2float_rn(y);
}

}  // namespace bloomery::cuda
