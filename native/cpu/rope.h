// Rotary position embedding in ggml's two layouts: "normal" rotates adjacent pairs
// (x[2i], x[2i+1]) (llama), "neox" rotates halves (x[i], x[i + dims/2]) (qwen). The angle
// table is built the way ggml builds it (theta multiplied up in float), so positions far
// into the context round the same way as in llama.cpp, and each rotated element is one FMA
// over the other product (x0 cos - x1 sin as fma(x0, cos, -(x1 sin))), as the compiler
// contracts ggml's rotation on every x86 host with FMA.
#pragma once

#include <cstdint>
#include <vector>

namespace bloomery::cpu {

enum class RopeStyle : uint8_t { kNormal, kNeox };

struct RopeParams {
  RopeStyle style = RopeStyle::kNormal;
  int64_t dims = 0;  // leading elements of each head that rotate; the rest pass through
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;              // 1 / linear scaling factor
  const float* freq_factors = nullptr;  // dims / 2 divisors of theta (llama 3 scaling), or none
};

// cos/sin pairs for one position: dims floats.
void rope_angles(const RopeParams& params, int64_t position, std::vector<float>& angles);

// Rotates `heads` contiguous heads of `head_dim` floats in place, with angles from rope_angles.
void rope_apply(float* x, int64_t heads, int64_t head_dim, const RopeParams& params, const std::vector<float>& angles);

}  // namespace bloomery::cpu
