// The CPU's half of a hybrid MoE pass. Per MoE layer the GPU routes the rows, copies the
// normed rows and their chosen experts and weights to mapped host memory and raises a flag;
// here the thread pool runs the experts that live in host memory (the mmap'd file's pages, or
// the disk tier's arena) over those rows, writes their weighted sum to mapped memory and raises the answering
// flag; the GPU, which ran its resident experts meanwhile, waits for it and adds the sum.
// Only the CUDA build has a GPU side; this file is compiled by the host compiler.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace bloomery::engine {

// Where a hybrid model's time went, summed over its passes since load.
struct OffloadStats {
  uint64_t passes = 0;                   // passes whose host experts the CPU ran
  uint64_t streamed_passes = 0;          // prompt passes that copied the host experts to the GPU instead
  double wall_seconds = 0;               // from the pass's first launch to its logits on the host
  double cpu_expert_seconds = 0;         // the thread pool running host experts
  double cpu_wait_seconds = 0;           // the host waiting for the GPU's routed rows
  double gpu_wait_seconds = 0;           // the GPU waiting for the CPU's sums
  uint64_t streamed_bytes = 0;           // host experts' bytes the streamed passes copied to the GPU
  double streamed_bytes_per_second = 0;  // those copies' measured rate (0 before one was timed)
};

}  // namespace bloomery::engine

#ifdef BLOOMERY_CUDA

#include "cpu/moe.h"
#include "cpu/thread_pool.h"
#include "cuda/runtime.h"
#include "engine/expert_arena.h"
#include "engine/expert_stream.h"
#include "model/model.h"

namespace bloomery::engine {

class HostExperts {
 public:
  // on_host[l][e] != 0: expert e of layer l runs on the CPU, from the file's pages or, for
  // those `arena` pages (the disk tier; null: none), from its slots. Buffers hold `max_rows` rows.
  HostExperts(const model::Model& model, std::vector<std::vector<uint8_t>> on_host, int64_t max_rows,
              cpu::ThreadPool& pool, ExpertArena* arena);
  ~HostExperts();
  HostExperts(const HostExperts&) = delete;
  HostExperts& operator=(const HostExperts&) = delete;

  // Whether layer l has experts in host memory (the others need no handoff).
  bool has_host_experts(int64_t layer) const { return layer_active_[layer]; }
  // Between passes (adaptive residency): whether the CPU serves expert e of layer l from the
  // next pass on. A layer keeps its count of host experts, so has_host_experts stays.
  void set_on_host(int64_t layer, int32_t expert, bool on_host) { on_host_[layer][expert] = on_host ? 1 : 0; }

  // --- queued on the GPU stream (capturable into a graph) ---
  void queue_begin_pass(cuda::StreamHandle stream);
  void queue_publish(int64_t layer, int64_t n, const float* rows, const int32_t* chosen, const float* weights,
                     cuda::StreamHandle stream);
  void queue_collect(int64_t layer, int64_t n, float* residual, cuda::StreamHandle stream);

  // --- the host's side of one pass, in layer order ---
  void start_pass();
  // Waits for layer l's rows (checking the stream for failures), runs its host experts and
  // answers. Throws CUDA_ERROR if the GPU failed or finished without publishing.
  void serve(int64_t layer, int64_t n, const cuda::Stream& stream);
  // After a failure: answers every layer, so no GPU wait is left spinning, waits for the
  // stream, and sets the GPU's step to the host's (a pass that failed before its first
  // launch would leave them apart).
  void recover(const cuda::Stream& stream);

  // The CPU's estimated time for one layer's host experts over `rows` rows, from the layers
  // it ran (0 before the first).
  double cpu_layer_seconds(int64_t rows) const;

  void add_pass_time(double seconds);
  void count_streamed_pass();
  // Any time: the GPU's wait counter is read as it stands.
  OffloadStats stats() const;

 private:
  const model::Model& model_;
  std::vector<std::vector<uint8_t>> on_host_;
  std::vector<bool> layer_active_;
  cpu::ThreadPool& pool_;
  ExpertArena* arena_;
  int64_t used_, width_;
  cuda::PinnedBuffer rows_, chosen_, weights_, sums_, ready_, done_;
  // uint32 [0]: the step, [1]: publish's block counter; uint64 [1]: nanoseconds the GPU waited.
  cuda::DeviceBuffer counters_;
  uint32_t step_ = 0;
  cpu::Routing routing_;
  cpu::MoeScratch scratch_;
  mutable std::mutex stats_mutex_;  // stats() may run on another thread than the passes
  OffloadStats stats_;
  RowCostTable cpu_costs_;
};

}  // namespace bloomery::engine

#endif
