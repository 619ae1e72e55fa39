// A model ready to run (weights, thread pool, context size, scheduler) and the sequences
// that use it. Every forward pass runs on the model's scheduler thread (scheduler.h), which
// puts the next tokens of all running sequences into one pass.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/forward.h"
#include "engine/gpu_forward.h"
#include "engine/kv_cache.h"
#include "model/model.h"

namespace bloomery::engine {

class Request;
class Scheduler;

inline constexpr int64_t kDefaultContextSize = 4096;
inline constexpr uint32_t kDefaultParallel = 2;
// Rows of one pass: decode tokens first, then prompt chunks up to this many rows, so a long
// prompt delays the running streams by one bounded pass at a time.
inline constexpr int64_t kDefaultStepTokens = 256;

struct RuntimeOptions {
  uint32_t threads = 0;                  // 0: one per physical core
  int64_t context_size = 0;              // per sequence; 0: the model's trained context, at most kDefaultContextSize
  uint32_t parallel = kDefaultParallel;  // sequences that run together; more wait their turn
  int64_t step_tokens = kDefaultStepTokens;  // rows of one pass (at least `parallel`)
  std::optional<GpuOptions> gpu;             // set: the whole model on the GPU (see gpu_forward.h)
};

class Runtime {
 public:
  // Throws CONTEXT_TOO_LONG when options.context_size exceeds the model's trained context,
  // INVALID_ARGUMENT for a parallel of 0 or a step smaller than parallel.
  Runtime(std::unique_ptr<model::Model> model, const RuntimeOptions& options);
  ~Runtime();

  const model::Model& model() const { return *model_; }
  int64_t context_size() const { return context_size_; }
  uint32_t threads() const { return pool_.size(); }
  uint32_t parallel() const { return parallel_; }
  int64_t step_tokens() const { return step_tokens_; }
  bool on_gpu() const { return gpu_ != nullptr; }
  Scheduler& scheduler() { return *scheduler_; }

  // Held by every forward pass. Code that reads or writes a session's KV cache outside the
  // scheduler (a saved state, a fork) holds it too.
  std::mutex& compute_mutex() { return compute_; }

 private:
  friend class Session;
  friend class Scheduler;
  std::unique_ptr<model::Model> model_;
  int64_t context_size_;
  uint32_t parallel_;
  int64_t step_tokens_;
  cpu::ThreadPool pool_;
  std::mutex compute_;
  std::shared_ptr<GpuModel> gpu_;
  std::shared_ptr<Scheduler> scheduler_;  // its thread runs the passes; stopped first in ~Runtime
};

// One sequence: its KV cache and how many tokens it holds. Its tokens are evaluated by
// requests to the model's scheduler (Scheduler::evaluate, Scheduler::generate).
class Session {
 public:
  explicit Session(std::shared_ptr<Runtime> runtime);

  Runtime& runtime() { return *runtime_; }
  int64_t position() const { return position_.load(); }

 private:
  friend class Scheduler;
  std::shared_ptr<Runtime> runtime_;
  KvCache cache_;  // empty when the model runs on the GPU
  std::shared_ptr<GpuSequence> gpu_;
  // Written by the scheduler under its mutex; read anywhere.
  std::atomic<int64_t> position_{0};
  const Request* running_ = nullptr;  // the request of this session that runs now (guarded by the scheduler's mutex)
};

}  // namespace bloomery::engine
