// The whole model on one GPU: its weights uploaded at load, each sequence's KV cache in
// device memory, and the forward pass as the same sequence of named ops as forward.cc,
// run by the kernels of native/cuda. Decode steps (one token) replay a CUDA graph captured
// on the sequence's first step. A CPU-only build compiles this interface; it refuses
// GPU_UNAVAILABLE.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/forward.h"
#include "model/model.h"

namespace bloomery::engine {

struct GpuOptions {
  int device = 0;
  uint64_t budget = 0;  // bytes of device memory bloomery may use; 0: what the card has free
};

class GpuModel;
class GpuSequence;

// Uploads `model`'s weights and allocates the pass's workspace, after checking that they and
// one sequence of `context_size` tokens fit. Throws GPU_UNAVAILABLE (no usable device, naming
// why), INSUFFICIENT_MEMORY (naming each term), UNSUPPORTED_QUANT (a tensor whose type has no
// GPU kernel) or UNSUPPORTED_MODEL.
std::shared_ptr<GpuModel> upload_model(const model::Model& model, const GpuOptions& options, int64_t context_size);

// A sequence's KV cache on the card. Throws INSUFFICIENT_MEMORY when it does not fit.
std::shared_ptr<GpuSequence> create_gpu_sequence(GpuModel& model, int64_t context_size);

// forward() on the GPU: the same contract (the caller checks tokens and positions).
void gpu_forward(GpuModel& model, GpuSequence& sequence, std::span<const int32_t> tokens, int64_t first_position,
                 LogitRows rows, std::vector<float>& logits);

// Copies the keys and values of positions [0, n) to / from host memory, packed layer after
// layer with `packed` rows per layer (n <= packed), as KvCache::copy_out does: how sessions
// are saved and restored.
void copy_kv_to_host(GpuModel& model, const GpuSequence& sequence, int64_t n, int64_t packed, uint16_t* keys,
                     uint16_t* values);
void copy_kv_to_device(GpuModel& model, GpuSequence& sequence, int64_t n, int64_t packed, const uint16_t* keys,
                       const uint16_t* values);

}  // namespace bloomery::engine
