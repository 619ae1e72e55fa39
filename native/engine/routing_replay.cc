#include "engine/routing_replay.h"

#include <algorithm>
#include <string>

#include "base/error.h"

namespace bloomery::engine {

RoutingReplay::RoutingReplay(const model::Model& model, std::span<const int32_t> moe_layers,
                             std::span<const int32_t> ids)
    : layers_(moe_layers.begin(), moe_layers.end()), used_(model.params.experts_used), ids_(ids.begin(), ids.end()) {
  const int64_t experts = model.params.experts;
  for (const int32_t l : layers_) {
    if (l < 0 || l >= model.params.layers || model.layers[static_cast<size_t>(l)].ffn.kind != model::FfnKind::kMoe) {
      throw Error("INVALID_ARGUMENT", "the routing trace names layer " + std::to_string(l) +
                                          ", which is not one of the model's MoE layers");
    }
  }
  const auto per_step = static_cast<int64_t>(layers_.size()) * used_;
  if (per_step == 0 || ids_.empty() || static_cast<int64_t>(ids_.size()) % per_step != 0) {
    throw Error("INVALID_ARGUMENT", "the routing trace holds " + std::to_string(ids_.size()) +
                                        " ids, not a whole number of steps of " + std::to_string(per_step));
  }
  steps_ = static_cast<int64_t>(ids_.size()) / per_step;
  for (size_t i = 0; i < ids_.size(); i += static_cast<size_t>(used_)) {
    for (int64_t k = 0; k < used_; ++k) {
      const int32_t e = ids_[i + static_cast<size_t>(k)];
      if (e < 0 || e >= experts) {
        throw Error("INVALID_ARGUMENT",
                    "the routing trace names expert " + std::to_string(e) + " of " + std::to_string(experts));
      }
      for (int64_t j = 0; j < k; ++j) {
        if (ids_[i + static_cast<size_t>(j)] == e) {
          throw Error("INVALID_ARGUMENT", "the routing trace chooses expert " + std::to_string(e) + " twice in a step");
        }
      }
    }
  }
}

void RoutingReplay::next(int64_t rows, int64_t layers, std::vector<int32_t>& out) {
  out.resize(static_cast<size_t>(layers * rows * used_));
  const int64_t first = cursor_;
  cursor_ = (cursor_ + rows) % steps_;
  const auto moe = static_cast<int64_t>(layers_.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t step = (first + r) % steps_;
    for (int64_t m = 0; m < moe; ++m) {
      const int32_t* from = ids_.data() + (step * moe + m) * used_;
      std::copy_n(from, used_, out.data() + (layers_[static_cast<size_t>(m)] * rows + r) * used_);
    }
  }
}

}  // namespace bloomery::engine
