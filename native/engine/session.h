// A model ready to run (weights, thread pool, context size) and the sequences that use it.
// One forward pass runs at a time per model: the later scheduler batches sessions into one
// pass; until then they take turns.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/forward.h"
#include "engine/gpu_forward.h"
#include "engine/kv_cache.h"
#include "model/model.h"

namespace bloomery::engine {

struct RuntimeOptions {
  uint32_t threads = 0;           // 0: one per physical core
  int64_t context_size = 0;       // per sequence; 0: the model's trained context, at most kDefaultContextSize
  std::optional<GpuOptions> gpu;  // set: on the GPU, with gpu->gpu_experts resident there (see gpu_forward.h)
};

inline constexpr int64_t kDefaultContextSize = 4096;

// The context size a runtime uses for `requested` (0: the model's trained context, at most
// kDefaultContextSize). Throws CONTEXT_TOO_LONG beyond the trained context.
int64_t resolve_context_size(const model::HyperParams& p, int64_t requested);

class Runtime {
 public:
  // Throws CONTEXT_TOO_LONG when options.context_size exceeds the model's trained context.
  Runtime(std::unique_ptr<model::Model> model, const RuntimeOptions& options);

  const model::Model& model() const { return *model_; }
  int64_t context_size() const { return context_size_; }
  uint32_t threads() const { return pool_.size(); }
  bool on_gpu() const { return gpu_ != nullptr; }
  GpuModel* gpu() const { return gpu_.get(); }

 private:
  friend class Session;
  std::unique_ptr<model::Model> model_;
  int64_t context_size_;
  cpu::ThreadPool pool_;
  std::mutex compute_;
  std::shared_ptr<GpuModel> gpu_;
};

class Session {
 public:
  explicit Session(std::shared_ptr<Runtime> runtime);

  // Appends `tokens` and returns the logits after the last one (vocab floats), or after each
  // one with LogitRows::kAll. INVALID_ARGUMENT for an empty batch or a token outside the
  // vocabulary, CONTEXT_TOO_LONG when the tokens do not fit the context; the state is
  // unchanged after an error.
  std::vector<float> evaluate(std::span<const int32_t> tokens, LogitRows rows = LogitRows::kLast);

  // Forgets every token.
  void reset();
  int64_t position() const { return position_; }

 private:
  std::shared_ptr<Runtime> runtime_;
  KvCache cache_;  // empty when the model runs on the GPU
  std::shared_ptr<GpuSequence> gpu_;
  ForwardScratch scratch_;
  int64_t position_ = 0;
};

}  // namespace bloomery::engine
