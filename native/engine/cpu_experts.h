// The routed experts the CPU runs for one MoE layer, wherever their weights are: in the
// model file's pages, or on the disk tier, read into the arena as the pass needs them
// (engine/expert_arena.h). The one place both the CPU engine (forward.cc) and the CPU's half
// of a hybrid GPU pass (host_experts.cc) run experts through.
#pragma once

#include <cstdint>
#include <span>

#include "cpu/moe.h"
#include "cpu/thread_pool.h"
#include "engine/expert_arena.h"
#include "model/model.h"

namespace bloomery::engine {

// out (n rows of the embedding) = the routed experts of `w`, the file's layer `layer`, over x (n rows), limited to
// `run_expert` (one flag per expert; empty: all). With an arena, the layer's paged experts the
// rows chose are leased at once (their reads several in flight) and run in waves as they
// arrive, the resident ones first; the sum is the same, bit for bit, as with every expert in RAM.
// A pass of prompt size also asks the arena to read ahead the next layer's hottest experts.
void run_cpu_experts(const model::Model& model, const model::LayerWeights& w, int64_t layer, const float* x, int64_t n,
                     const cpu::Routing& routing, std::span<const uint8_t> run_expert, ExpertArena* arena, float* out,
                     cpu::MoeScratch& s, cpu::ThreadPool& pool);

}  // namespace bloomery::engine
