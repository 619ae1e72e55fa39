#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/model.h"

namespace bloomery::engine {

// Benchmarks only (bench/residency.mjs --routing): routing taken from a recorded trace instead of
// the model's routers, so that a large file with random weights moves the bytes a trained model's
// routing would (issue 28). The trace holds, per step (one token), the experts each MoE layer
// chose; a pass's rows take the next steps in order, wrapping at the end. Each replayed expert
// gets the weight router.scale / used (uniform gating). Set through the addon's
// modelReplayRouting, which src/ exposes only behind Model's registered symbol REPLAY_ROUTING.
class RoutingReplay {
 public:
  // `ids`: steps x moe_layers.size() x the model's experts used, expert ids. Throws INVALID_ARGUMENT
  // for a layer that is not one of the model's MoE layers, an id outside [0, experts), a step
  // choosing an expert twice, or no steps.
  RoutingReplay(const model::Model& model, std::span<const int32_t> moe_layers, std::span<const int32_t> ids);

  // The next `rows` steps' choices as [layer][row][used] over all `layers` of the model (a dense
  // layer's entries are left alone), into `out`, resized to layers * rows * used. Called by the
  // scheduler's passes, under the runtime's compute lock (as Runtime::replay_routing is).
  void next(int64_t rows, int64_t layers, std::vector<int32_t>& out);

  int64_t steps() const { return steps_; }

 private:
  std::vector<int32_t> layers_;  // the trace's layers, as the model numbers them
  int64_t used_;
  int64_t steps_;
  std::vector<int32_t> ids_;
  int64_t cursor_ = 0;
};

}  // namespace bloomery::engine
