// Adaptive residency's device half: moves experts between a hybrid model's host memory and
// its GPU slots between steps, so no decode step waits for a copy and no graph is rebuilt
// (kernels find experts through the per-layer expert->slot tables). A swap (engine/residency.h
// picks them) goes in three stages:
//   1. retire: the evicted expert's table entry becomes -1, in order on the compute stream, and
//      the CPU's mask takes it, so from the next step on the CPU serves it;
//   2. copy: on a separate stream, after an event that marks the last step that read the old
//      expert, the new one's gate, up and down go from its page-locked file pages into the slot;
//   3. seat: once the copy's event has passed (queried, never waited for), the new expert's
//      entry points at the slot and the CPU's mask lets go of it.
// Between stages the expert is served by the CPU, so every step computes each routed expert
// exactly once, on one side.
#pragma once

#ifdef BLOOMERY_CUDA

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cuda/ops.h"
#include "cuda/runtime.h"
#include "engine/host_experts.h"
#include "engine/residency.h"
#include "model/model.h"

namespace bloomery::engine {

// One layer's slot pools on the device and its expert->slot table.
struct SlotPools {
  uint8_t* gate = nullptr;
  uint8_t* up = nullptr;
  uint8_t* down = nullptr;
  int32_t* slot_of_expert = nullptr;
};

class GpuResidency {
 public:
  // `slot_tables`: the host's view of the device tables (GpuWeights::slot_tables), kept in step
  // with them; `host`: the CPU half whose masks follow. Both outlive this.
  GpuResidency(const model::Model& model, std::vector<SlotPools> pools, std::vector<std::vector<int32_t>>& slot_tables,
               HostExperts& host);

  // Per layer, the expert each slot holds or is being copied into.
  const std::vector<std::vector<int32_t>>& slot_experts() const { return slot_experts_; }
  // Stages 1 and 2 of each swap. A swap whose evicted expert's copy has not landed yet drops that copy.
  void begin(std::span<const Swap> swaps, cuda::StreamHandle compute);
  // Stage 3 for every copy that has landed.
  void seat_copied(cuda::StreamHandle compute);

 private:
  struct Copy {
    Swap swap;
    std::unique_ptr<cuda::Event> landed;
  };
  // A copy no longer followed (landed and seated, or its slot taken again): its event goes to the
  // spares, which take_event reuses, as a decode step begins several copies. Returns the next copy.
  std::vector<Copy>::iterator forget(std::vector<Copy>::iterator copy);
  std::unique_ptr<cuda::Event> take_event();

  const model::Model& model_;
  std::vector<SlotPools> pools_;
  std::vector<std::vector<int32_t>>& slot_tables_;
  HostExperts& host_;
  std::vector<std::vector<int32_t>> slot_experts_;
  cuda::Stream copies_;
  cuda::Event retired_;
  std::vector<Copy> in_flight_;
  std::vector<std::unique_ptr<cuda::Event>> spare_events_;
  std::vector<cuda::SlotWrite> writes_;  // one call's table writes, launched together
};

}  // namespace bloomery::engine

#endif
