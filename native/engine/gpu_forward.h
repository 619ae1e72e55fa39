// A model on one GPU: its dense weights and its GPU-resident routed experts uploaded at
// load (each layer's experts in a pool of slots, found through a per-layer expert->slot
// table in device memory, -1 for an expert left in host memory), each sequence's KV cache
// in device memory, and the forward pass as the same sequence of named ops as forward.cc,
// run by the kernels of native/cuda. With experts in host memory the pass is hybrid: per
// MoE layer the CPU's thread pool runs the host experts of the routed rows while the GPU
// runs its own (engine/host_experts.h). Decode steps (one token) replay a CUDA graph
// captured on the sequence's first step; a hybrid step's graph waits for the host through
// flags in mapped memory, so it stays one graph. A CPU-only build compiles this interface;
// it refuses GPU_UNAVAILABLE.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/forward.h"
#include "engine/host_experts.h"
#include "model/model.h"

namespace bloomery::engine {

struct GpuOptions {
  int device = 0;
  uint64_t budget = 0;  // bytes of device memory bloomery may use; 0: what the card has free
  // Per layer, the routed experts resident on the GPU (any order, each once); the others run
  // on the CPU from host memory. Empty: every expert of every layer on the GPU.
  std::vector<std::vector<int32_t>> gpu_experts;
};

// A weight the GPU's kernels cannot serve. A routed-expert stack's experts must stay in host
// memory (the CPU runs them); any other such tensor keeps the model off the GPU.
struct GpuKernelGap {
  std::string tensor;         // its name in the file, as "blk.3.ffn_down_exps.weight"
  std::string reason;         // a sentence naming the tensor, its type and what the GPU lacks
  int64_t expert_layer = -1;  // the layer of a routed-expert stack; -1 for any other tensor
};

// The device memory a model needs, term by term: what the offload planner (src/plan.ts)
// divides the budget with, and what upload_model checks. The one owner of these sizes, and of
// which tensors the GPU cannot serve.
struct GpuFootprint {
  int64_t context_size = 0;  // tokens of the one sequence the KV term holds
  int64_t experts = 0;       // routed experts per layer
  // Every weight but the routed experts, plus the slot tables and the slot pools' alignment.
  uint64_t dense_bytes = 0;
  std::vector<uint64_t> expert_bytes;  // per layer: one routed expert's gate, up and down (0: a dense layer)
  uint64_t kv_bytes = 0;
  uint64_t workspace_bytes = 0;
  uint64_t stream_bytes = 0;   // staging for prompts that copy host experts to the GPU (only with some on the host)
  uint64_t reserve_bytes = 0;  // left free for the CUDA context, graphs and kernels
  std::vector<GpuKernelGap> kernel_gaps;
};
// `context_size` as the runtime resolved it. Throws GPU_UNAVAILABLE in a CPU-only build.
GpuFootprint gpu_footprint(const model::Model& model, int64_t context_size);

class GpuModel;
class GpuSequence;

// Uploads `model`'s dense weights and options.gpu_experts, and allocates the pass's workspace,
// after checking that they and one sequence of `context_size` tokens fit. A hybrid model's
// host experts run on `pool`, which must outlive the GpuModel. Throws GPU_UNAVAILABLE (no
// usable device, naming why), INSUFFICIENT_MEMORY (naming each term), INVALID_ARGUMENT (a
// gpu_experts list that does not fit the model), UNSUPPORTED_QUANT (a dense tensor the GPU
// cannot serve, or GPU experts in a layer whose expert stacks it cannot: see GpuKernelGap)
// or UNSUPPORTED_MODEL.
std::shared_ptr<GpuModel> upload_model(const model::Model& model, const GpuOptions& options, int64_t context_size,
                                       cpu::ThreadPool& pool);

// A sequence's KV cache on the card. Throws INSUFFICIENT_MEMORY when it does not fit.
std::shared_ptr<GpuSequence> create_gpu_sequence(GpuModel& model, int64_t context_size);

// forward() on the GPU: the same contract (the caller checks tokens and positions).
void gpu_forward(GpuModel& model, GpuSequence& sequence, std::span<const int32_t> tokens, int64_t first_position,
                 LogitRows rows, std::vector<float>& logits);

// Where a hybrid model's time went since load (all zero when every expert is on the GPU).
OffloadStats offload_stats(GpuModel& model);
// Copies the keys and values of positions [0, n) to / from host memory, packed layer after
// layer with `packed` rows per layer (n <= packed), as KvCache::copy_out does: how sessions
// are saved and restored.
void copy_kv_to_host(GpuModel& model, const GpuSequence& sequence, int64_t n, int64_t packed, uint16_t* keys,
                     uint16_t* values);
void copy_kv_to_device(GpuModel& model, GpuSequence& sequence, int64_t n, int64_t packed, const uint16_t* keys,
                       const uint16_t* values);

}  // namespace bloomery::engine
