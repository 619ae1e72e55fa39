// The rotation the GPU's kernels take (cuda::RopeShape) for the CPU path's rope parameters: the
// constants the host computes with its own libm, as the CPU path does, the file's frequency
// factors already on the device, and the multi-axis sections. The engine and the kernels' tests
// make it here alone.
#pragma once

#include "cpu/rope.h"
#include "cuda/ops.h"

namespace bloomery::engine {

inline cuda::RopeShape gpu_rope_shape(const cpu::RopeParams& rope, const float* device_freq_factors) {
  const cpu::RopeConstants k = cpu::rope_constants(rope);
  return {rope.style == cpu::RopeStyle::kNeox,
          rope.dims,
          rope.freq_scale,
          device_freq_factors,
          rope.ext_factor,
          k.theta_scale,
          k.ramp_low,
          k.ramp_high,
          k.mscale,
          {rope.sections[0], rope.sections[1], rope.sections[2], rope.sections[3]}};
}

}  // namespace bloomery::engine
