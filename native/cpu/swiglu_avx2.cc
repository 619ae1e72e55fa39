#include "cpu/avx2_math.h"
#include "cpu/swiglu.h"

namespace bloomery::cpu {

BLOOMERY_CPU_AVX2 void swiglu_avx2(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu_avx2(_mm256_loadu_ps(gate + i)), _mm256_loadu_ps(up + i)));
  }
  swiglu_scalar(gate + i, up + i, n - i, out + i);
}

BLOOMERY_CPU_AVX2 void vec_silu_avx2(const float* x, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, silu_avx2(_mm256_loadu_ps(x + i)));
  vec_silu_scalar(x + i, n - i, out + i);
}

}  // namespace bloomery::cpu
