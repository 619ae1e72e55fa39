#include "engine/residency.h"

#include <algorithm>
#include <utility>

#include "engine/expert_arena.h"
#include "engine/gpu_forward.h"

namespace bloomery::engine {

RoutingCounts::RoutingCounts(int64_t layers, int64_t experts)
    : layers_(layers), experts_(experts), counts_(static_cast<size_t>(layers * experts), 0.0) {}

void RoutingCounts::add_step(std::span<const uint32_t> calls, const std::vector<std::vector<int32_t>>& slot_tables,
                             uint64_t disk_calls) {
  ++steps_;
  for (int64_t l = 0; l < layers_; ++l) {
    for (int64_t e = 0; e < experts_; ++e) {
      const auto i = static_cast<size_t>(l * experts_ + e);
      counts_[i] = counts_[i] * kRoutingDecay + calls[i];
      const bool on_gpu = !slot_tables.empty() && slot_tables[l][e] >= 0;
      (on_gpu ? hits_.gpu : hits_.host) += calls[i];
    }
  }
  hits_.host -= disk_calls;
  hits_.disk += disk_calls;
}

std::vector<Swap> choose_swaps(const RoutingCounts& counts, const std::vector<std::vector<int32_t>>& slot_experts,
                               const SwapLimits& limits) {
  struct Candidate {
    double gain;
    int64_t rank;
    Swap swap;
  };
  std::vector<Candidate> candidates;
  // Ranks past max_swaps in a layer are never chosen: the layer's own lower ranks gain at least as
  // much and come first. So only that many hottest host and coldest GPU experts are ranked; this
  // runs between decode steps, where sorting every layer whole cost ~0.2 ms a step.
  std::vector<bool> on_gpu;
  std::vector<int32_t> host, gpu_slots;
  for (int64_t l = 0; l < counts.layers(); ++l) {
    const std::vector<int32_t>& slots = slot_experts[l];
    on_gpu.assign(static_cast<size_t>(counts.experts()), false);
    for (const int32_t e : slots) on_gpu[e] = true;
    host.clear();
    for (int32_t e = 0; e < counts.experts(); ++e) {
      if (!on_gpu[e]) host.push_back(e);
    }
    const auto count = [&](int32_t e) { return counts.count(l, e); };
    // Most layers have nothing to swap between two decode steps: skip them before ranking.
    if (host.empty() || slots.empty()) continue;
    double hottest_host = count(host[0]), coldest_gpu = count(slots[0]);
    for (const int32_t e : host) hottest_host = std::max(hottest_host, count(e));
    for (const int32_t e : slots) coldest_gpu = std::min(coldest_gpu, count(e));
    if (hottest_host - coldest_gpu <= limits.margin) continue;
    gpu_slots.resize(slots.size());
    for (size_t s = 0; s < slots.size(); ++s) gpu_slots[s] = static_cast<int32_t>(s);
    const auto ranked = static_cast<std::ptrdiff_t>(
        std::min({host.size(), gpu_slots.size(), static_cast<size_t>(std::max<int64_t>(limits.max_swaps, 0))}));
    std::partial_sort(host.begin(), host.begin() + ranked, host.end(),
                      [&](int32_t a, int32_t b) { return count(a) > count(b) || (count(a) == count(b) && a < b); });
    std::partial_sort(gpu_slots.begin(), gpu_slots.begin() + ranked, gpu_slots.end(), [&](int32_t a, int32_t b) {
      const int32_t ea = slots[a], eb = slots[b];
      return count(ea) < count(eb) || (count(ea) == count(eb) && ea < eb);
    });
    for (std::ptrdiff_t i = 0; i < ranked; ++i) {
      const int32_t hot = host[i], slot = gpu_slots[i], cold = slots[slot];
      const double gain = count(hot) - count(cold);
      if (gain <= limits.margin) break;
      candidates.push_back({gain, static_cast<int64_t>(i), {static_cast<int32_t>(l), slot, cold, hot}});
    }
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.gain != b.gain) return a.gain > b.gain;
    if (a.swap.layer != b.swap.layer) return a.swap.layer < b.swap.layer;
    return a.rank < b.rank;
  });
  if (static_cast<int64_t>(candidates.size()) > limits.max_swaps)
    candidates.resize(static_cast<size_t>(limits.max_swaps));
  std::vector<Swap> swaps;
  for (const Candidate& c : candidates) swaps.push_back(c.swap);
  return swaps;
}

Residency::Residency(int64_t layers, int64_t experts, GpuModel* gpu, bool adaptive, ExpertArena* arena)
    : counts_(layers, experts),
      gpu_(gpu),
      adaptive_(adaptive && gpu && experts > 0 && gpu_can_move_experts(*gpu)),
      arena_(arena) {}

void Residency::after_step(std::span<const uint32_t> cpu_calls, bool prompt) {
  if (counts_.experts() == 0) return;
  std::lock_guard lock(mutex_);
  const uint64_t disk_calls = arena_ ? arena_->take_disk_calls() : 0;
  if (!gpu_) {
    counts_.add_step(cpu_calls, {}, disk_calls);
    if (arena_) arena_->rank_by(counts_.counts());
    if (tracing_) trace_.emplace_back(cpu_calls.begin(), cpu_calls.end());
    return;
  }
  calls_.assign(static_cast<size_t>(counts_.layers() * counts_.experts()), 0);
  take_routed_calls(*gpu_, calls_);
  counts_.add_step(calls_, gpu_slot_tables(*gpu_), disk_calls);
  if (arena_) arena_->rank_by(counts_.counts());
  if (tracing_) trace_.push_back(calls_);
  if (!adaptive_) return;
  seat_copied_experts(*gpu_);
  const std::vector<Swap> swaps = choose_swaps(counts_, gpu_slot_experts(*gpu_), prompt ? kPromptSwaps : kDecodeSwaps);
  if (swaps.empty()) return;
  begin_swaps(*gpu_, swaps);
  moves_ += swaps.size();
  unreported_.insert(unreported_.end(), swaps.begin(), swaps.end());
}

ResidencyStats Residency::stats() const {
  std::lock_guard lock(mutex_);
  return {counts_.hits(), counts_.steps(), moves_, adaptive_};
}

std::vector<double> Residency::counts() const {
  std::lock_guard lock(mutex_);
  return counts_.counts();
}

std::vector<std::vector<uint32_t>> Residency::trace(bool on) {
  std::lock_guard lock(mutex_);
  tracing_ = on;
  return std::exchange(trace_, {});
}

std::vector<Swap> Residency::take_moves() {
  std::lock_guard lock(mutex_);
  return std::exchange(unreported_, {});
}

}  // namespace bloomery::engine
