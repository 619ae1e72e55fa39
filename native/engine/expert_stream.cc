#include "engine/expert_stream.h"

#ifdef BLOOMERY_CUDA

#include <algorithm>
#include <numeric>
#include <tuple>

namespace bloomery::engine {

namespace {

size_t stack_bytes(const cpu::ExpertMatrices& m) {
  return static_cast<size_t>(m.count) * static_cast<size_t>(m.first.rows) * m.first.row_bytes;
}

size_t largest(const model::Model& model, const std::vector<bool>& streamed,
               const cpu::ExpertMatrices model::LayerWeights::*which) {
  size_t bytes = 0;
  for (size_t l = 0; l < model.layers.size(); ++l) {
    if (streamed[l]) bytes = std::max(bytes, stack_bytes(model.layers[l].*which));
  }
  return bytes;
}

// Copies a stack's experts into `stack` in expert order: runs of host experts (adjacent in
// the file) and runs of resident ones in consecutive slots each go as one copy.
void gather(const cpu::ExpertMatrices& host, const cuda::DeviceMatrix& pool, const std::vector<int32_t>& slots,
            uint8_t* stack, cuda::StreamHandle stream) {
  const size_t bytes = static_cast<size_t>(host.first.rows) * host.first.row_bytes;
  const auto experts = static_cast<int64_t>(slots.size());
  for (int64_t first = 0; first < experts;) {
    const bool on_host = slots[first] < 0;
    int64_t end = first + 1;
    while (end < experts && (slots[end] < 0) == on_host && (on_host || slots[end] == slots[end - 1] + 1)) ++end;
    const void* source = on_host ? static_cast<const void*>(host.expert(first).data)
                                 : static_cast<const void*>(pool.data + static_cast<size_t>(slots[first]) * bytes);
    cuda::copy_async(stack + static_cast<size_t>(first) * bytes, source, static_cast<size_t>(end - first) * bytes,
                     stream);
    first = end;
  }
}

}  // namespace

uint64_t ExpertStream::staging_bytes(const model::Model& model, const std::vector<bool>& streamed) {
  if (std::find(streamed.begin(), streamed.end(), true) == streamed.end()) return 0;
  return largest(model, streamed, &model::LayerWeights::expert_gate) +
         largest(model, streamed, &model::LayerWeights::expert_up) +
         largest(model, streamed, &model::LayerWeights::expert_down) +
         static_cast<uint64_t>(model.params.experts) * sizeof(int32_t);
}

ExpertStream::ExpertStream(const model::Model& model, std::vector<std::vector<int32_t>> slot_tables,
                           std::vector<bool> streamed)
    : model_(model), slot_tables_(std::move(slot_tables)), streamed_(std::move(streamed)) {
  const uint8_t* first = nullptr;
  const uint8_t* end = nullptr;
  for (size_t l = 0; l < model.layers.size(); ++l) {
    if (!streamed_[l]) continue;
    const model::LayerWeights& w = model.layers[l];
    for (const cpu::ExpertMatrices* m : {&w.expert_gate, &w.expert_up, &w.expert_down}) {
      first = first ? std::min(first, m->first.data) : m->first.data;
      end = std::max(end, m->first.data + stack_bytes(*m));
    }
  }
  pinned_ = std::make_unique<cuda::HostRegistration>(first, static_cast<size_t>(end - first),
                                                     "the routed experts' file pages (prompt streaming)");
  gate_ = cuda::DeviceBuffer(largest(model, streamed_, &model::LayerWeights::expert_gate), "expert staging (gate)");
  up_ = cuda::DeviceBuffer(largest(model, streamed_, &model::LayerWeights::expert_up), "expert staging (up)");
  down_ = cuda::DeviceBuffer(largest(model, streamed_, &model::LayerWeights::expert_down), "expert staging (down)");
  std::vector<int32_t> identity(static_cast<size_t>(model.params.experts));
  std::iota(identity.begin(), identity.end(), 0);
  identity_ = cuda::DeviceBuffer(identity.size() * sizeof(int32_t), "expert staging (table)");
  cuda::upload(identity_.data(), identity.data(), identity.size() * sizeof(int32_t));
}

ExpertStacks ExpertStream::queue_layer(int64_t layer, const ExpertStacks& resident, cuda::StreamHandle stream) {
  const model::LayerWeights& w = model_.layers[layer];
  const std::vector<int32_t>& slots = slot_tables_[layer];
  ExpertStacks stacks = resident;
  const auto experts = static_cast<int64_t>(slots.size());
  for (auto [matrix, host, buffer] :
       {std::tuple{&stacks.gate, &w.expert_gate, &gate_}, std::tuple{&stacks.up, &w.expert_up, &up_},
        std::tuple{&stacks.down, &w.expert_down, &down_}}) {
    gather(*host, *matrix, slots, buffer->as<uint8_t>(), stream);
    matrix->data = buffer->as<uint8_t>();
    matrix->count = experts;
  }
  stacks.slot_of_expert = identity_.as<int32_t>();
  return stacks;
}

}  // namespace bloomery::engine

#endif
