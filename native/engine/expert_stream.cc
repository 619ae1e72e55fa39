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

// Where a stack's gather takes an expert from: nowhere (the stack lacks it), the host's file
// pages, or the GPU's slot pool.
enum class Source : uint8_t { kNone, kHost, kPool };

// Most copies a stack's gather takes before it copies the whole stack from the host instead,
// where at least half of it comes from there anyway. Residency scatters the GPU's experts over
// a layer, cutting the host's experts into short runs, and each copy costs the host
// microseconds to queue.
constexpr int kMaxGatherCopies = 16;

// The end of the run of experts from `first` that one copy takes: host experts (adjacent in
// the file) or pool ones in consecutive slots; a run of experts taken from nowhere copies nothing.
int64_t run_end(const std::vector<Source>& sources, const std::vector<int32_t>& slots, int64_t first) {
  const auto experts = static_cast<int64_t>(sources.size());
  int64_t end = first + 1;
  while (end < experts && sources[end] == sources[first] &&
         (sources[first] != Source::kPool || slots[end] == slots[end - 1] + 1)) {
    ++end;
  }
  return end;
}

// Copies a stack's experts into `stack` in expert order, each from its source, a run per copy.
// Returns the bytes copied from the host.
size_t gather(const cpu::ExpertMatrices& host, const cuda::DeviceMatrix& pool, const std::vector<int32_t>& slots,
              const std::vector<Source>& sources, uint8_t* stack, cuda::StreamHandle stream) {
  const size_t bytes = expert_bytes(host);
  const auto experts = static_cast<int64_t>(sources.size());
  size_t from_host = 0;
  for (int64_t first = 0; first < experts;) {
    const int64_t end = run_end(sources, slots, first);
    const size_t run = static_cast<size_t>(end - first) * bytes;
    if (sources[first] == Source::kHost) {
      cuda::copy_async(stack + static_cast<size_t>(first) * bytes, host.expert(first).data, run, stream);
      from_host += run;
    } else if (sources[first] == Source::kPool) {
      cuda::copy_async(stack + static_cast<size_t>(first) * bytes,
                       pool.data + static_cast<size_t>(slots[first]) * bytes, run, stream);
    }
    first = end;
  }
  return from_host;
}

// A layer's three stacks (gate, up, down) gathered alike into `gate`, `up` and `down`.
size_t gather_all(const model::RoutedExperts& host, const ExpertStacks& pool, const std::vector<int32_t>& slots,
                  const std::vector<Source>& sources, uint8_t* gate, uint8_t* up, uint8_t* down,
                  cuda::StreamHandle stream) {
  return gather(host.gate, pool.gate, slots, sources, gate, stream) +
         gather(host.up, pool.up, slots, sources, up, stream) +
         gather(host.down, pool.down, slots, sources, down, stream);
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
    : model_(model),
      slot_tables_(slot_tables),
      pools_(std::move(pools)),
      streamed_(std::move(streamed)),
      predicted_(slot_tables.size(), std::vector<uint8_t>(static_cast<size_t>(model.params.experts), 1)),
      counts_seen_(slot_tables.size() * static_cast<size_t>(model.params.experts), 0) {
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
  if (seconds > 0) {
    seconds_per_byte_ = blend(seconds_per_byte_, seconds / static_cast<double>(stage.timed_bytes));
    std::lock_guard lock(totals_mutex_);
    timed_bytes_ += stage.timed_bytes;
    timed_seconds_ += seconds;
  }
  stage.timed_bytes = 0;
}

ExpertStream::CopyTotals ExpertStream::copy_totals() const {
  std::lock_guard lock(totals_mutex_);
  return {copied_bytes_, timed_seconds_ > 0 ? static_cast<double>(timed_bytes_) / timed_seconds_ : 0};
}

void ExpertStream::count_copied(uint64_t bytes) {
  std::lock_guard lock(totals_mutex_);
  copied_bytes_ += bytes;
}

bool ExpertStream::has_host_experts(int64_t layer) const {
  const std::vector<int32_t>& slots = slot_tables_[layer];
  return streams(layer) && std::any_of(slots.begin(), slots.end(), [](int32_t s) { return s < 0; });
}

uint64_t ExpertStream::host_bytes(int64_t layer) const {
  if (!streams(layer)) return 0;
  const model::LayerWeights& w = model_.layers[layer];
  const uint64_t expert =
      expert_bytes(w.ffn.routed.gate) + expert_bytes(w.ffn.routed.up) + expert_bytes(w.ffn.routed.down);
  const HostCounts c = host_counts(layer);
  return expert * static_cast<uint64_t>(copies_partly(c) ? c.predicted : c.on_host);
}

ExpertStream::HostCounts ExpertStream::host_counts(int64_t layer) const {
  const std::vector<int32_t>& slots = slot_tables_[layer];
  const std::vector<uint8_t>& predicted = predicted_[layer];
  HostCounts c;
  for (size_t e = 0; e < slots.size(); ++e) {
    c.on_host += slots[e] < 0 ? 1 : 0;
    c.predicted += slots[e] < 0 && predicted[e] ? 1 : 0;
  }
  return c;
}

double ExpertStream::copy_layer_seconds() {
  for (Stage& stage : stages_) harvest_timing(stage);
  uint64_t bytes = 0;
  int64_t layers = 0;
  for (int64_t l = 0; l < static_cast<int64_t>(slot_tables_.size()); ++l) {
    bytes += host_bytes(l);
    layers += has_host_experts(l) ? 1 : 0;
  }
  return layers > 0 ? seconds_per_byte_ * static_cast<double>(bytes) / static_cast<double>(layers) : 0;
}

int64_t ExpertStream::next_host_layer(int64_t after) const {
  for (auto l = after + 1; l < static_cast<int64_t>(slot_tables_.size()); ++l) {
    if (has_host_experts(l)) return l;
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
  const auto experts = static_cast<int64_t>(slots.size());
  const bool partial = predicting_ && copies_partly(host_counts(layer));
  std::vector<Source> sources(slots.size());
  int64_t from_host_count = 0;
  for (int64_t e = 0; e < experts; ++e) {
    const bool wanted = !partial || predicted_[layer][e];
    sources[e] = slots[e] >= 0 ? Source::kPool : wanted ? Source::kHost : Source::kNone;
    from_host_count += sources[e] == Source::kHost ? 1 : 0;
  }
  int runs = 0;
  for (int64_t first = 0; first < experts; first = run_end(sources, slots, first)) ++runs;
  if (runs > kMaxGatherCopies && 2 * from_host_count >= experts)
    std::fill(sources.begin(), sources.end(), Source::kHost);
  stage.layer = layer;
  stage.held.resize(sources.size());
  for (size_t e = 0; e < sources.size(); ++e) stage.held[e] = sources[e] != Source::kNone ? 1 : 0;
  const size_t from_host = gather_all(w.ffn.routed, pool, slots, sources, stage.gate.as<uint8_t>(),
                                      stage.up.as<uint8_t>(), stage.down.as<uint8_t>(), stream);
  if (timed) {
    stage.copy_end.record(stream);
    stage.timed_bytes = from_host;
  }
  stage.copied.record(stream);
  count_copied(from_host);
}

void ExpertStream::observe_call(const uint32_t* counts, bool streamed) {
  const size_t experts = static_cast<size_t>(model_.params.experts);
  for (size_t l = 0; l < predicted_.size(); ++l) {
    for (size_t e = 0; e < experts; ++e) {
      const size_t i = l * experts + e;
      if (streamed) predicted_[l][e] = counts[i] != counts_seen_[i] ? 1 : 0;
      counts_seen_[i] = counts[i];
    }
  }
}

void ExpertStream::begin_pass(bool predicted) {
  predicting_ = predicted;
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

bool ExpertStream::layer_incomplete() const {
  const Stage& stage = stages_[streamed_layers_ % 2];
  return std::find(stage.held.begin(), stage.held.end(), 0) != stage.held.end();
}

void ExpertStream::complete_layer(const cuda::ExpertGroups& groups, cuda::StreamHandle stream) {
  Stage& stage = stages_[streamed_layers_ % 2];
  const size_t ints = 1 + 3 * static_cast<size_t>(groups.max_chunks);
  if (readback_ints_ < ints) {
    readback_ = cuda::PinnedBuffer(ints * sizeof(int32_t), "the router's grouping (prompt streaming)");
    readback_ints_ = ints;
  }
  int32_t* back = readback_.host<int32_t>();
  cuda::copy_to_host(back, groups.chunk_count, sizeof(int32_t), stream);
  cuda::copy_to_host(back + 1, groups.chunks, (ints - 1) * sizeof(int32_t), stream);
  stage.routed.record(stream);
  stage.routed.synchronize();
  // The stack's slots are expert ids (queue_layer's identity table).
  std::vector<Source> missing(stage.held.size(), Source::kNone);
  bool any = false;
  for (int32_t c = 0; c < back[0]; ++c) {
    const auto expert = static_cast<size_t>(back[1 + 3 * c]);
    if (stage.held[expert]) continue;
    missing[expert] = Source::kHost;
    stage.held[expert] = 1;
    any = true;
  }
  if (!any) return;
  count_copied(gather_all(model_.layers[stage.layer].ffn.routed, pools_[stage.layer], slot_tables_[stage.layer],
                          missing, stage.gate.as<uint8_t>(), stage.up.as<uint8_t>(), stage.down.as<uint8_t>(), stream));
}

void ExpertStream::layer_done(cuda::StreamHandle stream) {
  stages_[streamed_layers_ % 2].used.record(stream);
  ++streamed_layers_;
}

}  // namespace bloomery::engine

#endif
