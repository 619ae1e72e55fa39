#include "cpu/avx512_math.h"
#include "cpu/swiglu.h"

// GCC 12's AVX-512 intrinsics build their "undefined" operands by self-initialization,
// which -Wuninitialized reports wherever they inline under a target attribute.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace bloomery::cpu {

BLOOMERY_CPU_AVX512 void swiglu_avx512(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(out + i, _mm512_mul_ps(silu_avx512(_mm512_loadu_ps(gate + i)), _mm512_loadu_ps(up + i)));
  }
  swiglu_scalar(gate + i, up + i, n - i, out + i);
}

BLOOMERY_CPU_AVX512 void vec_silu_avx512(const float* x, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, silu_avx512(_mm512_loadu_ps(x + i)));
  vec_silu_scalar(x + i, n - i, out + i);
}

}  // namespace bloomery::cpu
