#include "engine/kv_cache.h"

#include <algorithm>

#include "quant/float_formats.h"

namespace bloomery::engine {

namespace {

void to_f16(const float* from, int64_t count, uint16_t* to) {
  for (int64_t i = 0; i < count; ++i) to[i] = quant::fp32_to_fp16(from[i]);
}

}  // namespace

KvCache::KvCache(const model::HyperParams& params, int64_t capacity)
    : capacity_(capacity), row_(model::cache_row(params)) {
  keys_.assign(static_cast<size_t>(params.layers), std::vector<uint16_t>(static_cast<size_t>(capacity_ * row_.keys)));
  values_.assign(static_cast<size_t>(params.layers),
                 std::vector<uint16_t>(static_cast<size_t>(capacity_ * row_.values)));
}

void KvCache::store(int64_t layer, int64_t first, int64_t n, const float* keys, const float* values) {
  to_f16(keys, n * row_.keys, keys_[layer].data() + first * row_.keys);
  to_f16(values, n * row_.values, values_[layer].data() + first * row_.values);
}

void KvCache::copy_out(int64_t n, int64_t packed, uint16_t* keys, uint16_t* values) const {
  for (size_t layer = 0; layer < keys_.size(); ++layer) {
    std::copy_n(keys_[layer].data(), n * row_.keys, keys + layer * packed * row_.keys);
    std::copy_n(values_[layer].data(), n * row_.values, values + layer * packed * row_.values);
  }
}

void KvCache::copy_in(int64_t n, int64_t packed, const uint16_t* keys, const uint16_t* values) {
  for (size_t layer = 0; layer < keys_.size(); ++layer) {
    std::copy_n(keys + layer * packed * row_.keys, n * row_.keys, keys_[layer].data());
    std::copy_n(values + layer * packed * row_.values, n * row_.values, values_[layer].data());
  }
}

}  // namespace bloomery::engine
