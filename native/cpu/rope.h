// Rotary position embedding in ggml's two layouts: "normal" rotates adjacent pairs
// (x[2i], x[2i+1]) (llama), "neox" rotates halves (x[i], x[i + dims/2]) (qwen). The angle
// table is built the way ggml builds it (theta multiplied up in float, YaRN's ramp between
// interpolated and extrapolated angles), so positions far into the context round the same
// way as in llama.cpp. Where ggml's source multiplies and adds, its x86 build (every variant
// with FMA) fuses the first product with the sum, and so do we: each rotated element is
// fma(x0, cos, -(x1 sin)) / fma(x0, sin, x1 cos), YaRN's mix fma(interpolated, 1 - ramp,
// extrapolated ramp) and its magnitude factor fma(0.1, log(1 / freq_scale), 1).
#pragma once

#include <array>
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
  // YaRN (ext_factor 0: none): angles ramp from interpolated to extrapolated between the
  // dimensions that beta_fast and beta_slow rotations span over original_context positions.
  float ext_factor = 0.0f;
  float attn_factor = 1.0f;  // cos and sin are scaled by it (and, with YaRN, by YaRN's mscale)
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  int64_t original_context = 0;
  // Interleaved multi-axis rope (Qwen3.5's imrope) at text positions: pair i's angle is the
  // position's where i % (the sections' sum) falls in a section of the first three axes (each
  // cycles through them: i % 3), and 0 (no rotation) in the fourth, as ggml_rope_multi gives a
  // text token positions [p, p, p, 0]. All zero: plain rope.
  std::array<int32_t, 4> sections{};
};

// What the angles of every position share: ggml's theta_scale, YaRN's ramp between two
// dimensions, and the factor cos and sin are scaled by. The GPU's rotation takes these too.
struct RopeConstants {
  float theta_scale = 1.0f;
  float ramp_low = 0.0f, ramp_high = 0.0f;
  float mscale = 1.0f;
};
RopeConstants rope_constants(const RopeParams& params);

// cos/sin pairs for one position: dims floats.
void rope_angles(const RopeParams& params, int64_t position, std::vector<float>& angles);

// Rotates `heads` heads of `head_dim` floats in place, `stride` floats apart (default: contiguous),
// with angles from rope_angles.
void rope_apply(float* x, int64_t heads, int64_t head_dim, const RopeParams& params, const std::vector<float>& angles,
                int64_t stride = 0);

}  // namespace bloomery::cpu
