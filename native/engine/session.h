// A model ready to run (weights, thread pool, context size) and the sequences that use it.
// One forward pass runs at a time per model: the later scheduler batches sessions into one
// pass; until then they take turns.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/forward.h"
#include "engine/gpu_forward.h"
#include "engine/kv_cache.h"
#include "engine/prompt_cache.h"
#include "engine/state.h"
#include "model/model.h"

namespace bloomery::engine {

struct RuntimeOptions {
  uint32_t threads = 0;           // 0: one per physical core
  int64_t context_size = 0;       // per sequence; 0: the model's trained context, at most kDefaultContextSize
  std::optional<GpuOptions> gpu;  // set: on the GPU, with gpu->gpu_experts resident there (see gpu_forward.h)
  uint64_t cache_ram = 0;         // bytes of host RAM for the prompt-state cache; 0: no cache
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
  PromptCache& prompt_cache() { return prompt_cache_; }
  // The identity saved states carry (model_fingerprint), computed on first use.
  uint64_t fingerprint();

 private:
  friend class Session;
  std::unique_ptr<model::Model> model_;
  int64_t context_size_;
  cpu::ThreadPool pool_;
  std::mutex compute_;
  std::shared_ptr<GpuModel> gpu_;
  PromptCache prompt_cache_;
  std::once_flag fingerprint_once_;
  uint64_t fingerprint_ = 0;
};

// Where prepare_prompt left the context.
struct PromptReuse {
  int64_t first = 0;        // the prompt's tokens before this one are in the context already
  bool from_cache = false;  // they came from the prompt-state cache (else from the session's own state)
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

  // Makes the context the longest computed prefix of `tokens`: the session's own (cut to the
  // prefix it shares with them) or, when longer, a state of the model's prompt-state cache.
  // The last token is always left to evaluate, so that its logits come from a pass. Before
  // cutting its own state, the session stores it in the cache. The caller evaluates
  // tokens[first...] next.
  PromptReuse prepare_prompt(std::span<const int32_t> tokens);

  // Stores the state in the model's prompt-state cache unless the cache holds it already, it
  // is empty, or it is larger than the whole cache. Returns whether the cache holds it. The
  // cache is an optimisation: when host memory runs short, the state is not cached.
  bool store_in_cache();

  // A copy of the state: its tokens, keys and values.
  std::shared_ptr<const SessionState> save();
  // Replaces the state by `state`. STATE_MODEL_MISMATCH when it was saved from another model,
  // CONTEXT_TOO_LONG when it does not fit the context; the session is unchanged after an error.
  void restore(const SessionState& state);
  // The same through a file (see state.h for the file's errors).
  void save(const std::string& path);
  void restore(const std::string& path);
  // A new session of the same model with a copy of this one's state.
  std::shared_ptr<Session> fork();

 private:
  // The state of the first n tokens; the caller holds the runtime's compute lock.
  std::shared_ptr<SessionState> snapshot(int64_t n);
  // Loads the first n tokens of `state`; the caller holds the lock and has checked the state.
  void load(const SessionState& state, int64_t n);
  void check_restorable(const SessionState& state);
  bool store_locked();

  std::shared_ptr<Runtime> runtime_;
  KvCache cache_;  // empty when the model runs on the GPU
  std::shared_ptr<GpuSequence> gpu_;
  ForwardScratch scratch_;
  int64_t position_ = 0;
  std::vector<int32_t> history_;  // the tokens whose keys and values the context holds
  bool in_cache_ = false;         // the prompt-state cache holds this state (or one it begins)
};

}  // namespace bloomery::engine
