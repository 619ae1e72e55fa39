// Prompt passes of a hybrid model: for many rows, copying each layer's host experts over
// PCIe and running every expert on the GPU costs less than the CPU running them. The layer's
// experts are gathered in expert order into a device staging stack (host experts from the
// page-locked file mapping, GPU-resident ones from their slots). Two stacks form a ring: a
// copy stream fills the next host layer's stack while the compute stream runs this one's,
// so the PCIe copies hide behind the GPU's work.
//
// A layer's copy cannot wait for its router (it runs a layer ahead), so where the last
// streamed call routed rows to fewer than half of a layer's host experts (routing that favours
// a few), it copies only those; then the pass reads the router's choices back before the
// layer's expert kernels and copies the chosen experts the stage lacks (the host waits for the
// GPU there, once per such layer). Otherwise (a model that spreads its rows) it copies them all.
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
#include <mutex>
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

  // After each forward call, the routing counts (per layer and expert, cumulative: the
  // GpuModel's host copy): a call with a streamed pass sets, per layer, the experts whose
  // counts grew as the ones the next streamed passes predict.
  void observe_call(const uint32_t* counts, bool streamed);

  // One layer's measured copy time (the average streamed host layer's bytes at the measured
  // rate); 0 before the first streamed pass.
  double copy_layer_seconds();

  // What the streamed passes copied from the host since load: its bytes, and the rate of the
  // copies timed so far (bytes per second over their summed time; 0 before any). Any thread.
  struct CopyTotals {
    uint64_t bytes = 0;
    double bytes_per_second = 0;
  };
  CopyTotals copy_totals() const;

  // A streamed pass: begin_pass queues the first host layer's copies; queue_layer makes
  // `stream` wait for layer `layer`'s copies, queues the next host layer's into the other
  // stack, and returns this layer's stack (slots = expert ids); layer_done, after the
  // layer's expert kernels are queued, frees its stack for the copy after next.
  // `predicted`: the pass may copy only the predicted host experts and complete each stack
  // after its router (not in a pass whose host experts the CPU serves between the GPU's
  // layers: the host would wait for a GPU that waits for it); otherwise it copies them all.
  void begin_pass(bool predicted);
  ExpertStacks queue_layer(int64_t layer, cuda::StreamHandle stream);
  // Whether the current layer's stack may lack an expert the router chose: then, after the
  // router and before the expert kernels, complete_layer reads the grouping back (the host
  // waits for `stream`) and copies, on `stream`, the chosen host experts the stack lacks.
  bool layer_incomplete() const;
  void complete_layer(const cuda::ExpertGroups& groups, cuda::StreamHandle stream);
  void layer_done(cuda::StreamHandle stream);

 private:
  struct Stage {
    cuda::DeviceBuffer gate, up, down;
    cuda::Event copied, used, copy_start{true}, copy_end{true}, routed;
    uint64_t timed_bytes = 0;  // of the copy between copy_start and copy_end, not yet read
    int64_t layer = -1;
    std::vector<uint8_t> held;  // per expert of `layer`: whether the stack holds it
  };

  // A layer's host experts, and how many of them the last streamed call routed rows to.
  struct HostCounts {
    int64_t on_host = 0;
    int64_t predicted = 0;
  };
  HostCounts host_counts(int64_t layer) const;
  // Whether a predicting pass copies only a layer's predicted host experts ahead: fewer than half.
  static bool copies_partly(const HostCounts& c) { return 2 * c.predicted < c.on_host; }
  // Whether streamed passes copy some of layer `layer`'s experts from the host.
  bool has_host_experts(int64_t layer) const;
  // The bytes a predicting streamed pass copies ahead from the host for layer `layer` (0 for a
  // layer not streamed).
  uint64_t host_bytes(int64_t layer) const;
  int64_t next_host_layer(int64_t after) const;
  void queue_copy(int64_t layer, Stage& stage);
  void harvest_timing(Stage& stage);
  void count_copied(uint64_t bytes);

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
  bool predicting_ = false;      // of this pass: see begin_pass
  // Per layer and expert: whether the last streamed call routed rows to it (all at first).
  std::vector<std::vector<uint8_t>> predicted_;
  std::vector<uint32_t> counts_seen_;  // the counts observe_call last saw
  cuda::PinnedBuffer readback_;        // complete_layer's copy of the grouping
  size_t readback_ints_ = 0;
  // copy_totals' sums, written by the thread running the passes.
  mutable std::mutex totals_mutex_;
  uint64_t copied_bytes_ = 0;
  uint64_t timed_bytes_ = 0;
  double timed_seconds_ = 0;
};

}  // namespace bloomery::engine

#endif
