// Prompt passes of a hybrid model: for many rows, copying each layer's host experts over
// PCIe and running every expert on the GPU costs less than the CPU running them. The layer's
// experts are gathered in expert order into a device staging stack (host experts from the
// page-locked file mapping, GPU-resident ones from their slots). Two stacks form a ring: a
// copy stream fills the next host layer's stack while the compute stream runs this one's,
// so the PCIe copies hide behind the GPU's work.
//
// Which passes stream is chosen by measured cost (see StreamCosts): the copy stream's own
// timing of its copies against the CPU's measured expert time per row.
#pragma once

#include <cstdint>

namespace bloomery::engine {

// Whether a hybrid pass of `rows` rows should stream its host experts, given one layer's
// measured copy time and the CPU's estimated time for those rows of one layer (0: not measured
// yet). Under kFloorRows a layer copy is never amortized on a real model (it moves every host
// expert for a few rows); from kCeilingRows on, the rows' CPU time always exceeds it; between
// them the measurements decide, and before there are any, kDefaultRows does.
struct StreamChoice {
  static constexpr int64_t kFloorRows = 16;
  static constexpr int64_t kDefaultRows = 64;
  static constexpr int64_t kCeilingRows = 512;
  static bool stream(int64_t rows, double copy_layer_seconds, double cpu_layer_seconds);
};

// The CPU's time per layer for a pass of n rows, learned from the passes it ran: an
// exponential average per power-of-two bucket of rows. A pass of rows no bucket measured is
// estimated from the nearest measured bucket below, scaled by the rows (which overstates the
// CPU's time, as rows share experts' reads), else 0.
class RowCostTable {
 public:
  void observe(int64_t rows, double layer_seconds);
  double estimate(int64_t rows) const;

 private:
  static constexpr int kBuckets = 16;
  static int bucket(int64_t rows);
  double seconds_[kBuckets] = {};  // per bucket: layer seconds per row, 0 = unmeasured
};

}  // namespace bloomery::engine

#ifdef BLOOMERY_CUDA

#include <array>
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
  // Device bytes of the staging ring (two stacks of the largest streamed layer's experts, and
  // an identity table); 0 when no layer is. `streamed`: per layer, whether prompts may stream
  // its experts (not where the GPU's kernels cannot serve its expert stacks: see GpuKernelGap).
  static uint64_t staging_bytes(const model::Model& model, const std::vector<bool>& streamed);

  // Page-locks the file range holding the streamed layers' routed experts (INSUFFICIENT_MEMORY
  // if the host cannot; adaptive residency copies host experts to GPU slots from these pages
  // too, and only streamed layers have slots) and allocates the ring. `slot_tables`: per layer,
  // expert -> slot (-1: host), the host's copy of the device tables, which residency rewrites
  // between passes (read, not copied); `pools`: per layer, the resident experts' device stacks;
  // `streamed`: as for staging_bytes, at least one layer.
  ExpertStream(const model::Model& model, const std::vector<std::vector<int32_t>>& slot_tables,
               std::vector<ExpertStacks> pools, std::vector<bool> streamed);

  // Whether streamed passes copy layer `layer`'s host experts (the others' rows go to the CPU).
  bool streams(int64_t layer) const { return streamed_[static_cast<size_t>(layer)]; }

  // One layer's measured copy time (the average streamed host layer's bytes at the measured
  // rate); 0 before the first streamed pass.
  double copy_layer_seconds();

  // A streamed pass: begin_pass queues the first host layer's copies; queue_layer makes
  // `stream` wait for layer `layer`'s copies, queues the next host layer's into the other
  // stack, and returns this layer's stack (slots = expert ids); layer_done, after the
  // layer's expert kernels are queued, frees its stack for the copy after next.
  void begin_pass();
  ExpertStacks queue_layer(int64_t layer, cuda::StreamHandle stream);
  void layer_done(cuda::StreamHandle stream);

 private:
  struct Stage {
    cuda::DeviceBuffer gate, up, down;
    cuda::Event copied, used, copy_start{true}, copy_end{true};
    uint64_t timed_bytes = 0;  // of the copy between copy_start and copy_end, not yet read
  };

  // The bytes a streamed pass copies from the host for layer `layer` (0 for a layer not streamed).
  uint64_t host_bytes(int64_t layer) const;
  int64_t next_host_layer(int64_t after) const;
  void queue_copy(int64_t layer, Stage& stage);
  void harvest_timing(Stage& stage);

  const model::Model& model_;
  const std::vector<std::vector<int32_t>>& slot_tables_;
  std::vector<ExpertStacks> pools_;
  std::vector<bool> streamed_;
  std::unique_ptr<cuda::HostRegistration> pinned_;
  cuda::Stream copies_;
  std::array<Stage, 2> stages_;
  cuda::DeviceBuffer identity_;
  int64_t streamed_layers_ = 0;  // of this pass: stage streamed_layers_ % 2 is the current one
  double seconds_per_byte_ = 0;  // copies' measured rate, exponentially averaged; 0 = none yet
};

}  // namespace bloomery::engine

#endif
