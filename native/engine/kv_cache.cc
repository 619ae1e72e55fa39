#include "engine/kv_cache.h"

#include <algorithm>

#include "quant/float_formats.h"

namespace bloomery::engine {

KvCache::KvCache(const model::HyperParams& params, int64_t capacity)
    : capacity_(capacity), row_width_(params.kv_heads * params.head_dim) {
  const size_t elements = static_cast<size_t>(capacity_ * row_width_);
  keys_.assign(static_cast<size_t>(params.layers), std::vector<uint16_t>(elements));
  values_.assign(static_cast<size_t>(params.layers), std::vector<uint16_t>(elements));
}

void KvCache::store(int64_t layer, int64_t first, int64_t n, const float* keys, const float* values) {
  uint16_t* k = keys_[layer].data() + first * row_width_;
  uint16_t* v = values_[layer].data() + first * row_width_;
  for (int64_t i = 0; i < n * row_width_; ++i) {
    k[i] = quant::fp32_to_fp16(keys[i]);
    v[i] = quant::fp32_to_fp16(values[i]);
  }
}

void KvCache::copy_out(int64_t n, int64_t packed, uint16_t* keys, uint16_t* values) const {
  const int64_t elements = n * row_width_, stride = packed * row_width_;
  for (size_t layer = 0; layer < keys_.size(); ++layer) {
    std::copy_n(keys_[layer].data(), elements, keys + layer * stride);
    std::copy_n(values_[layer].data(), elements, values + layer * stride);
  }
}

void KvCache::copy_in(int64_t n, int64_t packed, const uint16_t* keys, const uint16_t* values) {
  const int64_t elements = n * row_width_, stride = packed * row_width_;
  for (size_t layer = 0; layer < keys_.size(); ++layer) {
    std::copy_n(keys + layer * stride, elements, keys_[layer].data());
    std::copy_n(values + layer * stride, elements, values_[layer].data());
  }
}

}  // namespace bloomery::engine
