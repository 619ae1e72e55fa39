// Adaptive residency's host half: per layer and expert, decaying counts of how often the
// router picks it (on every path: CPU engine, GPU, hybrid), which tier served those calls,
// and the policy that picks, between steps, which host experts take which GPU slots. The
// device half (copies, the expert->slot tables) is engine/gpu_residency.h. Everything here
// is a function of the routing history alone, so a given request history moves the same
// experts in the same steps.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

namespace bloomery::engine {

// Each step multiplies every count by this before adding the step's calls: a half-life of 32
// steps. On a trained model's routing (bench/traces/, the routing donor's and the default
// model's), half-lives of 16 and 32 ranked best of 4-256, for the GPU's slots and for the disk
// tier's arena alike, and 32 moves fewer experts between the GPU and host: a longer memory keeps a prompt's favourites
// (a prompt's rows add tens of calls an expert) long after decode has moved on, so the arena fell behind plain LRU for
// the first tens of steps.
inline constexpr double kRoutingDecay = 0.9786;  // 2^(-1/32)

// Routed expert calls (one row routed to one expert), by the tier that served them.
struct TierHits {
  uint64_t gpu = 0;
  uint64_t host = 0;  // run by the CPU from host RAM: the file's pages, or a disk tier's arena that held them
  uint64_t disk = 0;  // run by the CPU after the disk tier read their expert from the file for them
};

class RoutingCounts {
 public:
  RoutingCounts(int64_t layers, int64_t experts);

  int64_t layers() const { return layers_; }
  int64_t experts() const { return experts_; }
  // One step: every count decays by kRoutingDecay, then gains the step's calls (`calls`: layers *
  // experts rows routed, layer after layer). `slot_tables` (per layer, expert -> GPU slot, -1 for
  // an expert in host memory) says where each call ran; empty: all on the host (the CPU engine).
  // `disk_calls`: of the host's calls, those the disk tier read their expert for.
  void add_step(std::span<const uint32_t> calls, const std::vector<std::vector<int32_t>>& slot_tables,
                uint64_t disk_calls = 0);

  double count(int64_t layer, int32_t expert) const { return counts_[static_cast<size_t>(layer * experts_ + expert)]; }
  const std::vector<double>& counts() const { return counts_; }  // layer after layer
  const TierHits& hits() const { return hits_; }
  uint64_t steps() const { return steps_; }

 private:
  int64_t layers_, experts_;
  std::vector<double> counts_;
  TierHits hits_;
  uint64_t steps_ = 0;
};

// One move: `seated` takes GPU slot `slot` of `layer` from `evicted`, which the CPU serves from then on.
struct Swap {
  int32_t layer = 0;
  int32_t slot = 0;
  int32_t evicted = 0;
  int32_t seated = 0;
};

struct SwapLimits {
  double margin = 0;      // a host expert's count must beat the GPU expert's it replaces by more than this
  int64_t max_swaps = 0;  // over all layers, per step
};

// Limits between decode steps: a few swaps each, and a margin of two calls against churn.
inline constexpr SwapLimits kDecodeSwaps{2.0, 16};
// After a step with prompt rows: each layer seats the experts the prompt used most at once.
inline constexpr SwapLimits kPromptSwaps{2.0, 1 << 20};

// The swaps worth making: per layer, the hottest host experts paired with the coldest GPU
// ones (ties to the lower expert id), as long as the hot one's count beats the cold one's by
// more than the margin; then the largest gains over all layers, at most max_swaps of them.
// `slot_experts[l][s]`: the expert GPU slot s of layer l holds (or is being copied into it).
// Pure and deterministic.
std::vector<Swap> choose_swaps(const RoutingCounts& counts, const std::vector<std::vector<int32_t>>& slot_experts,
                               const SwapLimits& limits);

class ExpertArena;
class GpuModel;

struct ResidencyStats {
  TierHits hits;
  uint64_t steps = 0;
  uint64_t moves = 0;     // swaps begun (each copy lands a step or so later)
  bool adaptive = false;  // experts move (a hybrid GPU model with residency "adaptive")
};

// A runtime's routing counts and, on a hybrid GPU model, its adaptive residency.
class Residency {
 public:
  // `gpu`: the model's GPU half, or null on the CPU. `adaptive` only matters with host experts.
  // `arena`: the disk tier (null: none), which counts its disk calls and ranks by these counts.
  Residency(int64_t layers, int64_t experts, GpuModel* gpu, bool adaptive, ExpertArena* arena);

  // After each step's passes, on the scheduler thread with the compute lock held: counts the
  // step's routing (`cpu_calls`: the CPU engine's tally, ForwardScratch::routed; the GPU keeps
  // its own) and the disk tier's calls, hands the counts to the disk tier, then, adaptive, seats the experts whose
  // copies landed and begins the next swaps (more after a step with prompt rows).
  void after_step(std::span<const uint32_t> cpu_calls, bool prompt);

  // Any thread.
  ResidencyStats stats() const;
  std::vector<double> counts() const;  // layer after layer
  std::vector<Swap> take_moves();      // swaps begun since the last call
  // While on, each step's calls (layers * experts) are kept; turning it off returns them.
  std::vector<std::vector<uint32_t>> trace(bool on);

 private:
  mutable std::mutex mutex_;
  RoutingCounts counts_;
  GpuModel* gpu_;
  bool adaptive_;
  ExpertArena* arena_;
  uint64_t moves_ = 0;
  std::vector<Swap> unreported_;
  std::vector<uint32_t> calls_;
  bool tracing_ = false;
  std::vector<std::vector<uint32_t>> trace_;
};

}  // namespace bloomery::engine
