#include "cpu/swiglu.h"

#include <cmath>

namespace bloomery::cpu {

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace bloomery::cpu
