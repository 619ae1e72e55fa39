#include "cpu/rope.h"

#include <cmath>

namespace bloomery::cpu {

void rope_angles(const RopeParams& params, int64_t position, std::vector<float>& angles) {
  angles.resize(static_cast<size_t>(params.dims));
  const float theta_scale = std::pow(params.freq_base, -2.0f / static_cast<float>(params.dims));
  float theta_base = static_cast<float>(position);
  for (int64_t i = 0; i < params.dims; i += 2) {
    const float factor = params.freq_factors ? params.freq_factors[i / 2] : 1.0f;
    const float theta = params.freq_scale * (theta_base / factor);
    angles[i] = std::cos(theta);
    angles[i + 1] = std::sin(theta);
    theta_base *= theta_scale;
  }
}

void rope_apply(float* x, int64_t heads, int64_t head_dim, const RopeParams& params, const std::vector<float>& angles) {
  const int64_t half = params.dims / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* head = x + h * head_dim;
    for (int64_t i = 0; i < params.dims; i += 2) {
      const float cos_theta = angles[i];
      const float sin_theta = angles[i + 1];
      float& a = params.style == RopeStyle::kNeox ? head[i / 2] : head[i];
      float& b = params.style == RopeStyle::kNeox ? head[i / 2 + half] : head[i + 1];
      const float x0 = a;
      const float x1 = b;
      a = std::fma(x0, cos_theta, -(x1 * sin_theta));
      b = std::fma(x0, sin_theta, x1 * cos_theta);
    }
  }
}

}  // namespace bloomery::cpu
