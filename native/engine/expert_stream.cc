#include "engine/expert_stream.h"

#include <algorithm>
#include <bit>

namespace bloomery::engine {

namespace {

// Weight of a new measurement in the running averages.
constexpr double kNewWeight = 0.25;

double blend(double average, double sample) { return average > 0 ? average + kNewWeight * (sample - average) : sample; }

}  // namespace

bool StreamChoice::stream(int64_t rows, double copy_layer_seconds, double cpu_layer_seconds) {
  if (rows < kFloorRows) return false;
  if (rows >= kCeilingRows) return true;
  if (copy_layer_seconds <= 0 || cpu_layer_seconds <= 0) return rows >= kDefaultRows;
  return cpu_layer_seconds > copy_layer_seconds;
}

int RowCostTable::bucket(int64_t rows) {
  return std::min(kBuckets - 1,
                  static_cast<int>(std::bit_width(static_cast<uint64_t>(std::max<int64_t>(rows, 1)))) - 1);
}

void RowCostTable::observe(int64_t rows, double layer_seconds) {
  if (rows <= 0 || layer_seconds <= 0) return;
  double& per_row = seconds_[bucket(rows)];
  per_row = blend(per_row, layer_seconds / static_cast<double>(rows));
}

double RowCostTable::estimate(int64_t rows) const {
  for (int b = bucket(rows); b >= 0; --b) {
    if (seconds_[b] > 0) return seconds_[b] * static_cast<double>(rows);
  }
  return 0;
}

}  // namespace bloomery::engine

#ifdef BLOOMERY_CUDA

#include <numeric>
#include <tuple>

namespace bloomery::engine {

namespace {

size_t stack_bytes(const cpu::ExpertMatrices& m) {
  return static_cast<size_t>(m.count) * static_cast<size_t>(m.first.rows) * m.first.row_bytes;
}

size_t largest(const model::Model& model, const std::vector<bool>& streamed,
               const cpu::ExpertMatrices model::RoutedExperts::*which) {
  size_t bytes = 0;
  for (size_t l = 0; l < model.layers.size(); ++l) {
    if (streamed[l]) bytes = std::max(bytes, stack_bytes(model.layers[l].ffn.routed.*which));
  }
  return bytes;
}

size_t expert_bytes(const cpu::ExpertMatrices& m) { return static_cast<size_t>(m.first.rows) * m.first.row_bytes; }

// Most copies a stack's gather may take. Residency scatters the GPU's experts over a layer,
// cutting the host's experts into short runs; past this many copies, each costing the host
// microseconds to queue, copying the whole stack from the host (resident experts included)
// costs less than the PCIe bytes it saves.
constexpr int kMaxGatherCopies = 16;

// Copies a stack's experts into `stack` in expert order: runs of host experts (adjacent in
// the file) and runs of resident ones in consecutive slots each go as one copy, or the whole
// stack from the host when that would take more than kMaxGatherCopies. Returns the bytes
// copied from the host.
size_t gather(const cpu::ExpertMatrices& host, const cuda::DeviceMatrix& pool, const std::vector<int32_t>& slots,
              uint8_t* stack, cuda::StreamHandle stream) {
  const size_t bytes = expert_bytes(host);
  const auto experts = static_cast<int64_t>(slots.size());
  const auto run_end = [&](int64_t first) {
    const bool on_host = slots[first] < 0;
    int64_t end = first + 1;
    while (end < experts && (slots[end] < 0) == on_host && (on_host || slots[end] == slots[end - 1] + 1)) ++end;
    return end;
  };
  int runs = 0;
  for (int64_t first = 0; first < experts; first = run_end(first)) ++runs;
  if (runs > kMaxGatherCopies) {
    cuda::copy_async(stack, host.expert(0).data, static_cast<size_t>(experts) * bytes, stream);
    return static_cast<size_t>(experts) * bytes;
  }
  size_t from_host = 0;
  for (int64_t first = 0; first < experts;) {
    const bool on_host = slots[first] < 0;
    const int64_t end = run_end(first);
    const size_t run = static_cast<size_t>(end - first) * bytes;
    const void* source = on_host ? static_cast<const void*>(host.expert(first).data)
                                 : static_cast<const void*>(pool.data + static_cast<size_t>(slots[first]) * bytes);
    cuda::copy_async(stack + static_cast<size_t>(first) * bytes, source, run, stream);
    from_host += on_host ? run : 0;
    first = end;
  }
  return from_host;
}

}  // namespace

uint64_t ExpertStream::staging_bytes(const model::Model& model, const std::vector<bool>& streamed) {
  if (std::find(streamed.begin(), streamed.end(), true) == streamed.end()) return 0;
  const uint64_t stack = largest(model, streamed, &model::RoutedExperts::gate) +
                         largest(model, streamed, &model::RoutedExperts::up) +
                         largest(model, streamed, &model::RoutedExperts::down);
  return 2 * stack + static_cast<uint64_t>(model.params.experts) * sizeof(int32_t);
}

ExpertStream::ExpertStream(const model::Model& model, const std::vector<std::vector<int32_t>>& slot_tables,
                           std::vector<ExpertStacks> pools, std::vector<bool> streamed)
    : model_(model), slot_tables_(slot_tables), pools_(std::move(pools)), streamed_(std::move(streamed)) {
  const uint8_t* first = nullptr;
  const uint8_t* end = nullptr;
  for (size_t l = 0; l < model.layers.size(); ++l) {
    if (!streamed_[l]) continue;
    const model::LayerWeights& w = model.layers[l];
    for (const cpu::ExpertMatrices* m : {&w.ffn.routed.gate, &w.ffn.routed.up, &w.ffn.routed.down}) {
      first = first ? std::min(first, m->first.data) : m->first.data;
      end = std::max(end, m->first.data + stack_bytes(*m));
    }
  }
  pinned_ = std::make_unique<cuda::HostRegistration>(first, static_cast<size_t>(end - first),
                                                     "the routed experts' file pages (prompt streaming)");
  for (size_t i = 0; i < stages_.size(); ++i) {
    const std::string which = std::to_string(i + 1) + " of 2)";
    stages_[i].gate =
        cuda::DeviceBuffer(largest(model, streamed_, &model::RoutedExperts::gate), "expert staging (gate " + which);
    stages_[i].up =
        cuda::DeviceBuffer(largest(model, streamed_, &model::RoutedExperts::up), "expert staging (up " + which);
    stages_[i].down =
        cuda::DeviceBuffer(largest(model, streamed_, &model::RoutedExperts::down), "expert staging (down " + which);
  }
  std::vector<int32_t> identity(static_cast<size_t>(model.params.experts));
  std::iota(identity.begin(), identity.end(), 0);
  identity_ = cuda::DeviceBuffer(identity.size() * sizeof(int32_t), "expert staging (table)");
  cuda::upload(identity_.data(), identity.data(), identity.size() * sizeof(int32_t));
}

void ExpertStream::harvest_timing(Stage& stage) {
  if (stage.timed_bytes == 0 || !stage.copy_end.done()) return;
  const double seconds = stage.copy_end.elapsed_ms(stage.copy_start) * 1e-3;
  if (seconds > 0) seconds_per_byte_ = blend(seconds_per_byte_, seconds / static_cast<double>(stage.timed_bytes));
  stage.timed_bytes = 0;
}

uint64_t ExpertStream::host_bytes(int64_t layer) const {
  if (!streams(layer)) return 0;
  const model::LayerWeights& w = model_.layers[layer];
  const uint64_t expert =
      expert_bytes(w.ffn.routed.gate) + expert_bytes(w.ffn.routed.up) + expert_bytes(w.ffn.routed.down);
  const std::vector<int32_t>& slots = slot_tables_[layer];
  return expert * static_cast<uint64_t>(std::count_if(slots.begin(), slots.end(), [](int32_t s) { return s < 0; }));
}

double ExpertStream::copy_layer_seconds() {
  for (Stage& stage : stages_) harvest_timing(stage);
  uint64_t bytes = 0;
  int64_t layers = 0;
  for (int64_t l = 0; l < static_cast<int64_t>(slot_tables_.size()); ++l) {
    const uint64_t host = host_bytes(l);
    bytes += host;
    layers += host > 0 ? 1 : 0;
  }
  return layers > 0 ? seconds_per_byte_ * static_cast<double>(bytes) / static_cast<double>(layers) : 0;
}

int64_t ExpertStream::next_host_layer(int64_t after) const {
  for (auto l = after + 1; l < static_cast<int64_t>(slot_tables_.size()); ++l) {
    if (host_bytes(l) > 0) return l;
  }
  return -1;
}

void ExpertStream::queue_copy(int64_t layer, Stage& stage) {
  const cuda::StreamHandle stream = copies_.handle();
  stage.used.wait_in(stream);  // the stage's previous layer's kernels are done with it
  harvest_timing(stage);
  const bool timed = stage.timed_bytes == 0;  // else the last timing is still unread: skip this one
  if (timed) stage.copy_start.record(stream);
  const model::LayerWeights& w = model_.layers[layer];
  const ExpertStacks& pool = pools_[layer];
  const std::vector<int32_t>& slots = slot_tables_[layer];
  const size_t from_host = gather(w.ffn.routed.gate, pool.gate, slots, stage.gate.as<uint8_t>(), stream) +
                           gather(w.ffn.routed.up, pool.up, slots, stage.up.as<uint8_t>(), stream) +
                           gather(w.ffn.routed.down, pool.down, slots, stage.down.as<uint8_t>(), stream);
  if (timed) {
    stage.copy_end.record(stream);
    stage.timed_bytes = from_host;
  }
  stage.copied.record(stream);
}

void ExpertStream::begin_pass() {
  streamed_layers_ = 0;
  const int64_t first = next_host_layer(-1);
  if (first >= 0) queue_copy(first, stages_[0]);
}

ExpertStacks ExpertStream::queue_layer(int64_t layer, cuda::StreamHandle stream) {
  Stage& stage = stages_[streamed_layers_ % 2];
  stage.copied.wait_in(stream);
  const int64_t next = next_host_layer(layer);
  if (next >= 0) queue_copy(next, stages_[(streamed_layers_ + 1) % 2]);
  ExpertStacks stacks = pools_[layer];
  const auto experts = static_cast<int64_t>(slot_tables_[layer].size());
  for (auto [matrix, buffer] : {std::tuple{&stacks.gate, &stage.gate}, std::tuple{&stacks.up, &stage.up},
                                std::tuple{&stacks.down, &stage.down}}) {
    matrix->data = buffer->as<uint8_t>();
    matrix->count = experts;
  }
  stacks.slot_of_expert = identity_.as<int32_t>();
  return stacks;
}

void ExpertStream::layer_done(cuda::StreamHandle stream) {
  stages_[streamed_layers_ % 2].used.record(stream);
  ++streamed_layers_;
}

}  // namespace bloomery::engine

#endif
