// Context shift, as llama-server's --context-shift does it: when a generation fills its context,
// the positions [keep, keep + discard) are dropped and those after them move down by `discard`.
// The cache holds keys after their rotation (RoPE at their old positions), so the moved keys are
// rotated again by -discard, as llama.cpp's K-shift does (ggml_rope_ext on the cached keys with the
// model's rope settings); values and MLA's latent part do not rotate.
#pragma once

#include <cstdint>

#include "model/model.h"

namespace bloomery::engine {

// What llama-server discards of a full context of n_past tokens: at most context - 4 kept, half
// of the rest dropped (at least none, at most all but one of them).
struct ShiftSpan {
  int64_t keep = 0;
  int64_t discard = 0;
};
ShiftSpan shift_span(int64_t requested_keep, int64_t n_past, int64_t context);

// Shifts one layer's rows [0, n) in place: rows [keep + discard, n) move to [keep, n - discard),
// their keys' rotary part rotated by -discard. `keys` holds n rows of model::cache_row(p).keys
// f16 elements, `values` n rows of its values (none for MLA).
void shift_layer_rows(const model::HyperParams& p, int64_t n, const ShiftSpan& span, uint16_t* keys, uint16_t* values);

}  // namespace bloomery::engine
