// Softmax in place, as ggml computes it: max subtracted, the sum of exponentials in double.
#pragma once

#include <cstdint>

namespace bloomery::cpu {

void softmax(float* x, int64_t n);

}  // namespace bloomery::cpu
