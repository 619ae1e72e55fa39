#include "engine/kv_cache.h"

#include <algorithm>

#include "cpu/attention.h"
#include "engine/context_shift.h"
#include "engine/state.h"
#include "quant/float_formats.h"

namespace bloomery::engine {

namespace {

void to_f16(const float* from, int64_t count, uint16_t* to) {
  for (int64_t i = 0; i < count; ++i) to[i] = quant::fp32_to_fp16(from[i]);
}

std::vector<uint8_t> linear_layers(const model::Model& model) {
  std::vector<uint8_t> linear;
  for (const model::LayerWeights& layer : model.layers) {
    linear.push_back(layer.attention.kind == model::AttentionKind::kDeltaNet ? 1 : 0);
  }
  return linear;
}

}  // namespace

KvCache::KvCache(const model::Model& model, int64_t capacity)
    : KvCache(model.params, model::windowed_layers(model), linear_layers(model), capacity) {}

KvCache::KvCache(const model::HyperParams& params, std::span<const uint8_t> windowed, int64_t capacity)
    : KvCache(params, windowed, {}, capacity) {}

KvCache::KvCache(const model::HyperParams& params, std::span<const uint8_t> windowed, std::span<const uint8_t> linear,
                 int64_t capacity)
    : KvCache(params, params.layers, windowed, linear, capacity) {}

KvCache KvCache::nextn(const model::Model& model, int64_t capacity) {
  const uint8_t windowed = model.nextn_layers.front().blocks.attention.windowed ? 1 : 0;
  return KvCache(model.params, 1, std::span(&windowed, 1), {}, capacity);
}

KvCache::KvCache(const model::HyperParams& params, int64_t layers, std::span<const uint8_t> windowed,
                 std::span<const uint8_t> linear, int64_t capacity)
    : params_(params), capacity_(capacity), row_(model::cache_row(params)) {
  layers_.resize(static_cast<size_t>(layers));
  for (int64_t l = 0; l < layers; ++l) {
    Layer& layer = layers_[l];
    layer.windowed = !windowed.empty() && windowed[l] != 0;
    if (!linear.empty() && linear[l] != 0) {
      layer.recurrent.resize(static_cast<size_t>(params_.delta_net.state_floats()));
      continue;
    }
    // Compressed attention's layers of the pass (a next-token-prediction layer attends its window alone).
    if (!params_.compressed.ratios.empty() && layers == params_.layers) {
      const int64_t ratio = params_.compressed.ratios[static_cast<size_t>(l)];
      layer.compressed_width = model::compressed_row_width(params_, l);
      if (ratio > 0) layer.compressed.resize(static_cast<size_t>(capacity_ / ratio * layer.compressed_width));
      layer.recurrent.resize(
          static_cast<size_t>(params_.compressed.state_floats(ratio, params_.head_dim, params_.indexer.head_dim)));
    }
    const int64_t rows = layer.windowed ? model::window_cells(params_, capacity_) : capacity_;
    layer.keys.resize(static_cast<size_t>(rows * row_.keys));
    layer.values.resize(static_cast<size_t>(rows * row_.values));
  }
}

int64_t KvCache::window_first() const {
  int64_t first = 0;
  for (const Layer& layer : layers_) first = std::max(first, layer.first);
  return first;
}

void KvCache::store(int64_t layer, int64_t first, int64_t n, const float* keys, const float* values) {
  Layer& l = layers_[layer];
  if (first == 0) l.first = 0;  // a context begun again
  if (l.windowed) {
    const int64_t rows = static_cast<int64_t>(l.keys.size()) / row_.keys;
    if (first + n - l.first > rows) {
      // Keep the held positions [from, first) that the rows being stored can still see.
      const int64_t from = cpu::aligned_window_start(first, params_.sliding_window);
      const int64_t kept = first - from;
      std::copy_n(l.keys.data() + (from - l.first) * row_.keys, kept * row_.keys, l.keys.data());
      std::copy_n(l.values.data() + (from - l.first) * row_.values, kept * row_.values, l.values.data());
      l.first = from;
    }
  }
  to_f16(keys, n * row_.keys, l.keys.data() + (first - l.first) * row_.keys);
  to_f16(values, n * row_.values, l.values.data() + (first - l.first) * row_.values);
}

void KvCache::store_compressed(int64_t layer, int64_t block, int64_t offset, int64_t count, const float* row) {
  Layer& l = layers_[layer];
  to_f16(row, count, l.compressed.data() + block * l.compressed_width + offset);
}

void KvCache::copy_out(int64_t n, uint16_t* keys, uint16_t* values, float* recurrent, uint16_t* compressed) const {
  const int64_t window_from = window_first();
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    if (!l.compressed.empty()) {
      const int64_t count = n / params_.compressed.ratios[i] * l.compressed_width;
      compressed = std::copy_n(l.compressed.data(), count, compressed);
    }
    if (!l.recurrent.empty()) {
      if (recurrent) recurrent = std::copy(l.recurrent.begin(), l.recurrent.end(), recurrent);
      if (l.keys.empty()) continue;
    }
    const int64_t from = l.windowed ? window_from : 0;
    const int64_t rows = n - from;
    std::copy_n(l.keys.data() + (from - l.first) * row_.keys, rows * row_.keys, keys);
    std::copy_n(l.values.data() + (from - l.first) * row_.values, rows * row_.values, values);
    keys += rows * row_.keys;
    values += rows * row_.values;
  }
}

int64_t KvCache::recurrent_floats() const {
  int64_t n = 0;
  for (const Layer& l : layers_) n += static_cast<int64_t>(l.recurrent.size());
  return n;
}

int64_t KvCache::recurrent_offset(int64_t layer) const {
  int64_t n = 0;
  for (int64_t l = 0; l < layer; ++l) n += static_cast<int64_t>(layers_[l].recurrent.size());
  return n;
}

void KvCache::copy_recurrent_out(float* recurrent) const {
  for (const Layer& l : layers_) recurrent = std::copy(l.recurrent.begin(), l.recurrent.end(), recurrent);
}

void KvCache::copy_recurrent_in(const float* recurrent) {
  for (Layer& l : layers_) {
    std::copy_n(recurrent, l.recurrent.size(), l.recurrent.data());
    recurrent += l.recurrent.size();
  }
}

void KvCache::copy_in(int64_t n, const SessionState& state) {
  const int64_t packed = static_cast<int64_t>(state.tokens.size());
  const uint16_t* keys = state.keys.data();
  const uint16_t* values = state.values.data();
  const float* recurrent = state.recurrent.data();
  const uint16_t* compressed = state.compressed.data();
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = layers_[i];
    if (!l.compressed.empty()) {
      const int64_t ratio = params_.compressed.ratios[i];
      std::copy_n(compressed, n / ratio * l.compressed_width, l.compressed.data());
      compressed += packed / ratio * l.compressed_width;
    }
    if (!l.recurrent.empty()) {
      std::copy_n(recurrent, l.recurrent.size(), l.recurrent.data());
      recurrent += l.recurrent.size();
      if (l.keys.empty()) continue;
    }
    l.first = l.windowed ? state.window_first : 0;
    const int64_t rows = n - l.first, held = packed - l.first;
    std::copy_n(keys, rows * row_.keys, l.keys.data());
    std::copy_n(values, rows * row_.values, l.values.data());
    keys += held * row_.keys;
    values += held * row_.values;
  }
}

void KvCache::shift(int64_t n, const ShiftSpan& span) {
  for (Layer& l : layers_) shift_layer_rows(params_, n, span, l.keys.data(), l.values.data());
}

}  // namespace bloomery::engine
