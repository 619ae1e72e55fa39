// The keys and values of one sequence, in f16 as llama.cpp keeps them: per layer, one row of
// keys and one of values per position (model::cache_row: a layer of MLA has no value rows),
// for positions [0, capacity).
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"

namespace bloomery::engine {

class KvCache {
 public:
  KvCache(const model::HyperParams& params, int64_t capacity);

  int64_t capacity() const { return capacity_; }
  const model::CacheRow& row() const { return row_; }

  uint16_t* keys(int64_t layer) { return keys_[layer].data(); }
  uint16_t* values(int64_t layer) { return values_[layer].data(); }

  // Stores n rows of keys and values (floats, of the row's widths) at positions [first, first + n).
  void store(int64_t layer, int64_t first, int64_t n, const float* keys, const float* values);

  // Copies the rows of positions [0, n) of every layer to / from `keys` and `values`, packed
  // layer after layer as a SessionState holds them, `packed` rows per layer (n <= packed).
  void copy_out(int64_t n, int64_t packed, uint16_t* keys, uint16_t* values) const;
  void copy_in(int64_t n, int64_t packed, const uint16_t* keys, const uint16_t* values);

 private:
  int64_t capacity_;
  model::CacheRow row_;
  std::vector<std::vector<uint16_t>> keys_;
  std::vector<std::vector<uint16_t>> values_;
};

}  // namespace bloomery::engine
