#include "engine/gpu_residency.h"

#ifdef BLOOMERY_CUDA

#include <algorithm>

#include "cuda/ops.h"

namespace bloomery::engine {

namespace {

size_t expert_bytes(const cpu::ExpertMatrices& m) { return static_cast<size_t>(m.first.rows) * m.first.row_bytes; }

}  // namespace

GpuResidency::GpuResidency(const model::Model& model, std::vector<SlotPools> pools,
                           std::vector<std::vector<int32_t>>& slot_tables, HostExperts& host)
    : model_(model), pools_(std::move(pools)), slot_tables_(slot_tables), host_(host) {
  for (const std::vector<int32_t>& table : slot_tables_) {
    std::vector<int32_t> experts;
    for (size_t e = 0; e < table.size(); ++e) {
      if (table[e] < 0) continue;
      if (static_cast<size_t>(table[e]) >= experts.size()) experts.resize(static_cast<size_t>(table[e]) + 1, -1);
      experts[static_cast<size_t>(table[e])] = static_cast<int32_t>(e);
    }
    slot_experts_.push_back(std::move(experts));
  }
}

void GpuResidency::begin(std::span<const Swap> swaps, cuda::StreamHandle compute) {
  writes_.clear();
  for (const Swap& s : swaps) {
    if (slot_tables_[s.layer][s.evicted] >= 0) {
      writes_.push_back({pools_[s.layer].slot_of_expert, s.evicted, -1});
      slot_tables_[s.layer][s.evicted] = -1;
      host_.set_on_host(s.layer, s.evicted, true);
    }
    for (auto c = in_flight_.begin(); c != in_flight_.end();) {
      c = c->swap.layer == s.layer && c->swap.slot == s.slot ? forget(c) : c + 1;
    }
    slot_experts_[s.layer][s.slot] = s.seated;
  }
  cuda::set_expert_slots(writes_, compute);
  retired_.record(compute);
  retired_.wait_in(copies_.handle());
  for (const Swap& s : swaps) {
    const model::LayerWeights& w = model_.layers[s.layer];
    const SlotPools& pools = pools_[s.layer];
    for (const auto& [stack, pool] : {std::pair{&w.ffn.routed.gate, pools.gate}, std::pair{&w.ffn.routed.up, pools.up},
                                      std::pair{&w.ffn.routed.down, pools.down}}) {
      const size_t bytes = expert_bytes(*stack);
      cuda::copy_async(pool + static_cast<size_t>(s.slot) * bytes, stack->expert(s.seated).data, bytes,
                       copies_.handle());
    }
    Copy copy{s, take_event()};
    copy.landed->record(copies_.handle());
    in_flight_.push_back(std::move(copy));
  }
}

void GpuResidency::seat_copied(cuda::StreamHandle compute) {
  writes_.clear();
  for (auto c = in_flight_.begin(); c != in_flight_.end();) {
    if (!c->landed->done()) {
      ++c;
      continue;
    }
    const Swap& s = c->swap;
    writes_.push_back({pools_[s.layer].slot_of_expert, s.seated, s.slot});
    slot_tables_[s.layer][s.seated] = s.slot;
    host_.set_on_host(s.layer, s.seated, false);
    c = forget(c);
  }
  cuda::set_expert_slots(writes_, compute);
}

std::vector<GpuResidency::Copy>::iterator GpuResidency::forget(std::vector<Copy>::iterator copy) {
  spare_events_.push_back(std::move(copy->landed));
  return in_flight_.erase(copy);
}

std::unique_ptr<cuda::Event> GpuResidency::take_event() {
  if (spare_events_.empty()) return std::make_unique<cuda::Event>();
  std::unique_ptr<cuda::Event> event = std::move(spare_events_.back());
  spare_events_.pop_back();
  return event;
}

}  // namespace bloomery::engine

#endif
