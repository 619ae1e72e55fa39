// Prompt passes of a hybrid model: for many rows, copying a layer's host experts over PCIe
// and running every expert on the GPU costs less than the CPU running them (measured on the
// H200 host: ~8 ms to copy a Qwen3-30B-A3B layer's 128 experts at ~50 GB/s, against ~0.13 ms
// per row per layer on 16 cores, so from about 64 rows on). The layer's experts are gathered
// in expert order into one device staging stack: host experts from the page-locked file
// mapping, GPU-resident ones from their slots.
#pragma once

#ifdef BLOOMERY_CUDA

#include <cstdint>
#include <memory>
#include <vector>

#include "cuda/ops.h"
#include "cuda/runtime.h"
#include "model/model.h"

namespace bloomery::engine {

// One layer's three expert matrices and the table the expert kernels find slots with.
struct ExpertStacks {
  cuda::DeviceMatrix gate, up, down;
  const int32_t* slot_of_expert = nullptr;
};

class ExpertStream {
 public:
  // Passes of at least this many rows stream their host experts.
  static constexpr int64_t kMinRows = 64;

  // Device bytes of the staging stack (the largest streamed layer's experts, and an identity
  // table); 0 when no layer is. `streamed`: per layer, whether prompts may stream its experts
  // (not where the GPU's kernels cannot serve its expert stacks).
  static uint64_t staging_bytes(const model::Model& model, const std::vector<bool>& streamed);

  // Page-locks the file range holding the streamed layers' routed experts (INSUFFICIENT_MEMORY
  // if the host cannot) and allocates the staging stack. `slot_tables`: per layer, expert ->
  // slot (-1: host). At least one layer must be streamed.
  ExpertStream(const model::Model& model, std::vector<std::vector<int32_t>> slot_tables, std::vector<bool> streamed);

  // Whether prompts stream layer `layer`'s host experts (otherwise the CPU runs them).
  bool streams(int64_t layer) const { return streamed_[static_cast<size_t>(layer)]; }

  // Queues the copies that gather layer `layer`'s experts (resident ones read from
  // `resident`'s pools) and returns the stack, whose slots are the expert ids.
  ExpertStacks queue_layer(int64_t layer, const ExpertStacks& resident, cuda::StreamHandle stream);

 private:
  const model::Model& model_;
  std::vector<std::vector<int32_t>> slot_tables_;
  std::vector<bool> streamed_;
  std::unique_ptr<cuda::HostRegistration> pinned_;
  cuda::DeviceBuffer gate_, up_, down_, identity_;
};

}  // namespace bloomery::engine

#endif
