#include "engine/cpu_experts.h"

#include <vector>

namespace bloomery::engine {

namespace {

// Experts a prompt-sized pass reads ahead for the next layer: one per I/O thread (the arena's
// default), about what the disk reads while the layer's last experts and the next layer's
// attention compute.
constexpr int64_t kReadAheadExperts = 8;

}  // namespace

void run_cpu_experts(const model::Model& model, const model::LayerWeights& w, int64_t layer, const float* x, int64_t n,
                     const cpu::Routing& routing, std::span<const uint8_t> run_expert, ExpertArena* arena, float* out,
                     cpu::MoeScratch& s, cpu::ThreadPool& pool) {
  const model::RoutedExperts& r = w.ffn.routed;
  const cpu::ExpertActivation& activation = model.params.activation;
  if (!arena || !arena->pages_layer(layer)) {
    cpu::moe_swiglu(x, n, routing, r.gate, r.up, r.down, r.biases, activation, out, s, pool, run_expert);
    return;
  }
  cpu::moe_prepare(x, n, routing, w.ffn.routed.gate, w.ffn.routed.up, w.ffn.routed.down, s, pool, run_expert);
  s.slices.resize(static_cast<size_t>(w.ffn.routed.gate.count));
  std::vector<int32_t> wave, paged;
  std::vector<uint32_t> calls;
  for (const int32_t e : s.in_use) {
    if (arena->is_paged(layer, e)) {
      paged.push_back(e);
      calls.push_back(static_cast<uint32_t>(s.group_begin[e + 1] - s.group_begin[e]));
    } else {
      s.slices[e] = cpu::stack_slices(w.ffn.routed.gate, w.ffn.routed.up, w.ffn.routed.down, e);
      wave.push_back(e);
    }
  }
  ExpertArena::Lease lease = arena->lease(layer, paged, calls);
  // A pass with as many routed calls as the layer has experts likely needs most of the next
  // layer's too: a decode step's few rows would read ahead experts it does not use.
  if (layer + 1 < model.params.layers && n * routing.used >= w.ffn.routed.gate.count) {
    arena->read_ahead(layer + 1, kReadAheadExperts);
  }
  for (std::vector<int32_t> ready = lease.next_ready(wave.empty());; ready = lease.next_ready(true)) {
    for (const int32_t e : ready) {
      s.slices[e] = lease.slices(e);
      wave.push_back(e);
    }
    if (wave.empty()) break;
    cpu::moe_run_experts(wave, s.slices, r.gate, r.up, r.down, r.biases, activation, s, pool);
    wave.clear();
  }
  cpu::moe_combine(n, routing, w.ffn.routed.down.first.rows, out, s);
}

}  // namespace bloomery::engine
