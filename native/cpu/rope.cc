#include "cpu/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace bloomery::cpu {

namespace {

// The dimension below which rotations of `rotations` turns over the original context are
// extrapolated (ggml_rope_yarn_corr_dim).
float yarn_corr_dim(const RopeParams& p, float rotations) {
  return static_cast<float>(p.dims) *
         std::log(static_cast<float>(p.original_context) / (rotations * 2.0f * std::numbers::pi_v<float>)) /
         (2.0f * std::log(p.freq_base));
}

// Whether pair `pair` of an interleaved multi-axis rope takes its angle from the fourth axis
// (position 0 for text): ggml's mrope cache, imrope branch.
bool fourth_axis(const std::array<int32_t, 4>& sections, int64_t pair) {
  const int64_t sum = sections[0] + sections[1] + sections[2] + sections[3];
  if (sum == 0) return false;
  const int64_t sector = pair % sum;
  const int64_t axis = sector % 3;
  return sector >= 3 * sections[static_cast<size_t>(axis)];
}

}  // namespace

RopeConstants rope_constants(const RopeParams& params) {
  RopeConstants k;
  k.theta_scale = std::pow(params.freq_base, -2.0f / static_cast<float>(params.dims));
  k.mscale = params.attn_factor;
  if (params.ext_factor != 0.0f) {
    k.ramp_low = std::max(0.0f, std::floor(yarn_corr_dim(params, params.beta_fast)));
    k.ramp_high = std::min(static_cast<float>(params.dims - 1), std::ceil(yarn_corr_dim(params, params.beta_slow)));
    k.mscale *= std::fma(0.1f, std::log(1.0f / params.freq_scale), 1.0f);
  }
  return k;
}

void rope_angles(const RopeParams& params, int64_t position, std::vector<float>& angles) {
  angles.resize(static_cast<size_t>(params.dims));
  const RopeConstants k = rope_constants(params);
  float theta_base = static_cast<float>(position);
  for (int64_t i = 0; i < params.dims; i += 2) {
    const float factor = params.freq_factors ? params.freq_factors[i / 2] : 1.0f;
    const float extrapolated = (fourth_axis(params.sections, i / 2) ? 0.0f : theta_base) / factor;
    float theta = params.freq_scale * extrapolated;
    if (params.ext_factor != 0.0f) {
      const float y = (static_cast<float>(i / 2) - k.ramp_low) / std::max(0.001f, k.ramp_high - k.ramp_low);
      const float ramp = (1.0f - std::min(1.0f, std::max(0.0f, y))) * params.ext_factor;
      theta = std::fma(theta, 1.0f - ramp, extrapolated * ramp);
    }
    angles[i] = std::cos(theta) * k.mscale;
    angles[i + 1] = std::sin(theta) * k.mscale;
    theta_base *= k.theta_scale;
  }
}

void rope_apply(float* x, int64_t heads, int64_t head_dim, const RopeParams& params, const std::vector<float>& angles,
                int64_t stride) {
  const int64_t half = params.dims / 2;
  if (stride == 0) stride = head_dim;
  for (int64_t h = 0; h < heads; ++h) {
    float* head = x + h * stride;
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
