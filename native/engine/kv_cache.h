// The keys and values of one sequence, in f16 as llama.cpp keeps them: per layer, one row of
// keys and one of values per position (model::cache_row: a layer of MLA has no value rows).
// A layer of full attention holds positions [0, capacity); a windowed layer holds only its
// last positions (model::window_cells rows): when a store would overflow it, the rows the
// window still needs move to the front, starting at a multiple of model::kWindowAlign, and
// first_cached says which position its first row holds. A layer of linear attention holds no
// rows but the sequence's recurrent state after its last position (model::DeltaNetParams).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/model.h"

namespace bloomery::engine {

class KvCache {
 public:
  KvCache(const model::Model& model, int64_t capacity);
  // `windowed`: per layer, 1 for a sliding-window layer (empty: none); `linear`: 1 for a layer of
  // linear attention (empty: none).
  KvCache(const model::HyperParams& params, std::span<const uint8_t> windowed, int64_t capacity);
  KvCache(const model::HyperParams& params, std::span<const uint8_t> windowed, std::span<const uint8_t> linear,
          int64_t capacity);
  // The keys and values of the model's first next-token-prediction layer, as its layer 0
  // (forward_nextn).
  static KvCache nextn(const model::Model& model, int64_t capacity);

  int64_t capacity() const { return capacity_; }
  const model::CacheRow& row() const { return row_; }

  uint16_t* keys(int64_t layer) { return layers_[layer].keys.data(); }
  uint16_t* values(int64_t layer) { return layers_[layer].values.data(); }
  // A layer of linear attention's recurrent state (DeltaNetParams::state_floats: the
  // convolution's, then the rule's); null for other layers.
  float* recurrent(int64_t layer) {
    return layers_[layer].recurrent.empty() ? nullptr : layers_[layer].recurrent.data();
  }
  // A layer of compressed attention's compressed rows (model::compressed_row_width each, one per
  // block of its ratio's positions from position 0 on); null for other layers.
  const uint16_t* compressed(int64_t layer) const {
    return layers_[layer].compressed.empty() ? nullptr : layers_[layer].compressed.data();
  }
  // Stores `count` floats at element `offset` of compressed row `block` of `layer`.
  void store_compressed(int64_t layer, int64_t block, int64_t offset, int64_t count, const float* row);
  // The position of the layer's first row (0 but for windowed layers).
  int64_t first_cached(int64_t layer) const { return layers_[layer].first; }
  // The first position every windowed layer still holds (0 without windowed layers): a context
  // can be cut back to n tokens only where model::window_floor(n) is at least this.
  int64_t window_first() const;

  // Stores n rows of keys and values (floats, of the row's widths) at positions [first, first + n).
  // A windowed layer takes at most model::kWindowSlice rows at once, and `first` must not need
  // positions it dropped (window_floor(first) >= first_cached).
  void store(int64_t layer, int64_t first, int64_t n, const float* keys, const float* values);

  // Copies the rows of positions [0, n) of every layer (of a windowed layer: [window_first(), n))
  // to `keys` and `values`, layer after layer as a SessionState holds them, the recurrent states
  // to `recurrent` unless it is null (they are the states after the cache's last position, which
  // the caller knows to be n), and the compressed rows of the blocks before n to `compressed`.
  void copy_out(int64_t n, uint16_t* keys, uint16_t* values, float* recurrent, uint16_t* compressed = nullptr) const;
  // Loads the first n positions of `state` (model::window_floor(n) >= state.window_first), its
  // compressed rows of the blocks before n, and its recurrent states (those after its last token:
  // with recurrent layers, n is its token count).
  void copy_in(int64_t n, const struct SessionState& state);

  // The recurrent states alone (every linear layer's, in layer order, as copy_out writes them):
  // a session's checkpoints, whose positions' rows the cache still holds.
  int64_t recurrent_floats() const;
  // Where a layer's recurrent state begins in that layout: the floats of the layers' before it.
  int64_t recurrent_offset(int64_t layer) const;
  void copy_recurrent_out(float* recurrent) const;
  void copy_recurrent_in(const float* recurrent);

  // Drops positions [span.keep, span.keep + span.discard) of the n held and moves the later
  // rows down, their keys rotated again (engine/context_shift.h). Not for windowed layers.
  void shift(int64_t n, const struct ShiftSpan& span);

 private:
  struct Layer {
    bool windowed = false;
    int64_t first = 0;  // the position of row 0
    std::vector<uint16_t> keys, values;
    std::vector<float> recurrent;      // linear attention's state, or a compressor's (CompressedParams)
    std::vector<uint16_t> compressed;  // compressed attention's compressed rows
    int64_t compressed_width = 0;
  };
  // `layers` layers (of the pass, or the nextn layer).
  KvCache(const model::HyperParams& params, int64_t layers, std::span<const uint8_t> windowed,
          std::span<const uint8_t> linear, int64_t capacity);

  const model::HyperParams& params_;
  int64_t capacity_;
  model::CacheRow row_;
  std::vector<Layer> layers_;
};

}  // namespace bloomery::engine
