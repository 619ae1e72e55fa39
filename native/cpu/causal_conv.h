// The short causal convolution of Gated DeltaNet (ggml_ssm_conv): per channel, each output is
// the dot of the channel's `kernel` taps with its last `kernel` inputs, the earliest first;
// before a sequence's first input, the state holds the inputs that came before (zeros at the
// start). The state is kept as ggml keeps it: per channel, its last kernel - 1 inputs.
#pragma once

#include <cstdint>

namespace bloomery::cpu {

// Convolves n rows of `channels` inputs (rows `stride` floats apart) in place, each row of outputs
// then passed through SiLU (cpu::vec_silu, as ggml_silu over the row), and moves `state` ([channels][kernel - 1]) on
// past them. `taps` is [channels][kernel].
void causal_conv_silu(float* rows, int64_t n, int64_t stride, int64_t channels, int64_t kernel, const float* taps,
                      float* state);

}  // namespace bloomery::cpu
