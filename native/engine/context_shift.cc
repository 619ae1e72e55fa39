#include "engine/context_shift.h"

#include <algorithm>
#include <vector>

#include "cpu/rope.h"
#include "quant/float_formats.h"

namespace bloomery::engine {

ShiftSpan shift_span(int64_t requested_keep, int64_t n_past, int64_t context) {
  ShiftSpan span;
  span.keep = std::max<int64_t>(0, std::min(context - 4, requested_keep));
  const int64_t left = n_past - span.keep;
  span.discard = std::clamp<int64_t>(left / 2, 0, std::max<int64_t>(0, left - 1));
  return span;
}

void shift_layer_rows(const model::HyperParams& p, int64_t n, const ShiftSpan& span, uint16_t* keys, uint16_t* values) {
  const model::CacheRow row = model::cache_row(p);
  const int64_t from = span.keep + span.discard;
  if (span.discard <= 0 || from >= n) return;
  std::copy(keys + from * row.keys, keys + n * row.keys, keys + span.keep * row.keys);
  if (row.values > 0) std::copy(values + from * row.values, values + n * row.values, values + span.keep * row.values);
  // The rotary part of each key: GQA's kv_heads heads (their leading rope.dims elements), or
  // MLA's one rotary key after the latent.
  const bool latent = p.mla.kv_lora_rank > 0;
  const int64_t offset = latent ? p.mla.kv_lora_rank : 0;
  const int64_t heads = latent ? 1 : p.kv_heads;
  const int64_t head_dim = latent ? p.mla.rope_dim : p.head_dim;
  std::vector<float> angles;
  cpu::rope_angles(p.rope, -span.discard, angles);
  std::vector<float> head(static_cast<size_t>(heads * head_dim));
  for (int64_t r = span.keep; r < n - span.discard; ++r) {
    uint16_t* key = keys + r * row.keys + offset;
    for (size_t i = 0; i < head.size(); ++i) head[i] = quant::fp16_to_fp32(key[i]);
    cpu::rope_apply(head.data(), heads, head_dim, p.rope, angles);
    for (size_t i = 0; i < head.size(); ++i) key[i] = quant::fp32_to_fp16(head[i]);
  }
}

}  // namespace bloomery::engine
