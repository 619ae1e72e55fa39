// A model ready to run (weights, thread pool, context size, scheduler) and the sequences
// that use it. Every forward pass runs on the model's scheduler thread (scheduler.h), which
// puts the next tokens of all running sequences into one pass.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/kept_blocks.h"
#include "cpu/thread_pool.h"
#include "engine/draft.h"
#include "engine/forward.h"
#include "engine/gpu_forward.h"
#include "engine/kv_cache.h"
#include "engine/load_progress.h"
#include "engine/mtp_draft.h"
#include "engine/prompt_cache.h"
#include "engine/residency.h"
#include "engine/routing_replay.h"
#include "engine/state.h"
#include "model/model.h"

namespace bloomery::engine {

class Request;
class Scheduler;

inline constexpr int64_t kDefaultContextSize = 4096;
inline constexpr uint32_t kDefaultParallel = 2;
// Rows of one pass: decode tokens first, then prompt chunks up to this many rows, so a long
// prompt delays the running streams by one bounded pass at a time.
inline constexpr int64_t kDefaultStepTokens = 256;
// With recurrent layers, a prompt's state is stored in the prompt-state cache at the positions this
// many tokens, then twice, four times ... as many, before its end, and at the end of a generation's
// prompt (checkpoints: a later prompt restores the nearest one inside the prefix it shares); an
// evaluation's end stays the session's own checkpoint.
inline constexpr int64_t kCheckpointSpacing = 512;
// A generation's prompt also leaves the session a checkpoint of its own this many tokens before its
// end (as llama-server does), so that the same prompt again (a regenerated answer, a client's retry,
// a chat turn whose template renders the prompt's last tokens anew) evaluates only those tokens.
inline constexpr int64_t kPromptTailCheckpoint = 4;
// A session keeps the recurrent states of its own last checkpoints, this many at most (the oldest
// out first): those of one prompt of up to 64 times kCheckpointSpacing tokens, or of a few turns.
inline constexpr size_t kSessionCheckpoints = 8;
// Page-locked blocks a GPU session with recurrent layers keeps made ahead for its next checkpoints:
// a generation's prompt of 4,096 tokens takes five before its first token (at 2,048, 3,072 and
// 3,584, its tail and its end), most of them inside one pass (Session::take_pass_checkpoints).
inline constexpr size_t kReadyCheckpoints = 5;
// Freed host memory of a CPU model's states (sessions' checkpoints, the prompt-state cache's states)
// kept for the next state, at most this much: its pages are touched already (base/kept_blocks.h).
// It holds four of Qwen3.6-35B-A3B's 63 MiB of recurrent states. A GPU model keeps its states
// page-locked instead (state_memory).
inline constexpr size_t kKeptHostStates = size_t{256} << 20;

// The disk tier: routed experts read from the model file into an arena of `arena_bytes` as
// passes need them (expert_arena.h). Per layer, the experts it pages; none: no disk tier.
struct DiskTierOptions {
  std::vector<std::vector<int32_t>> experts;
  uint64_t arena_bytes = 0;
};

struct RuntimeOptions {
  uint32_t threads = 0;                  // 0: one per physical core; at most one per logical core
  int64_t context_size = 0;              // per sequence; 0: the model's trained context, at most kDefaultContextSize
  uint32_t parallel = kDefaultParallel;  // sequences that run together; more wait their turn
  int64_t step_tokens =
      kDefaultStepTokens;          // rows of one step (at least `parallel`; on the GPU at least gpu_pass_rows)
  std::optional<GpuOptions> gpu;   // set: on the GPU, gpu->gpu_experts resident there (gpu_forward.h)
  uint64_t cache_ram = 0;          // bytes of host RAM for the prompt-state cache; 0: no cache
  bool adaptive_residency = true;  // with experts split between GPU and host, move them as routing asks
  DiskTierOptions disk;
  // Read the mapped weights the CPU uses into RAM before the first pass (load_progress.h fault_in).
  bool fault_in_weights = false;
  LoadProgress progress;    // told of the weights uploaded and faulted in; may be empty
  std::string draft_model;  // set: the file of a draft model for DraftSource::kModel (engine/draft.h), on the CPU
  bool mtp_drafts = false;  // runs draft with the model's MTP layer by default: check_mtp_drafts at load
};

// The context size a runtime uses for `requested` (0: the model's trained context, at most
// kDefaultContextSize). Throws CONTEXT_TOO_LONG beyond the trained context.
int64_t resolve_context_size(const model::HyperParams& p, int64_t requested);

class Runtime {
 public:
  // Throws CONTEXT_TOO_LONG when options.context_size exceeds the model's trained context,
  // INVALID_ARGUMENT for more threads than logical cores, a parallel of 0 or a step smaller than parallel, or disk
  // experts that do not fit the model or are also on the GPU, ExpertArena's errors, the draft
  // model's (load_model's, DraftModel's), and check_mtp_drafts's with options.mtp_drafts.
  Runtime(std::unique_ptr<model::Model> model, const RuntimeOptions& options);
  ~Runtime();

  const model::Model& model() const { return *model_; }
  int64_t context_size() const { return context_size_; }
  uint32_t threads() const { return pool_.size(); }
  uint32_t parallel() const { return parallel_; }
  int64_t step_tokens() const { return step_tokens_; }
  bool on_gpu() const { return gpu_ != nullptr; }
  GpuModel* gpu() const { return gpu_.get(); }
  // The disk tier's arena; null when every expert is in RAM (or on the GPU).
  const ExpertArena* arena() const { return arena_.get(); }
  // The identity saved states carry (model_fingerprint), computed on the first save or restore.
  uint64_t fingerprint();
  Scheduler& scheduler() { return *scheduler_; }
  // Routing counts, tier hits and expert moves (engine/residency.h).
  Residency& residency() { return *residency_; }
  // The draft model of RuntimeOptions::draft_model; null without one.
  DraftModel* draft_model() const { return draft_model_.get(); }
  // The drafter of the model's next-token-prediction layer; null for a model without one.
  MtpDrafter* mtp_drafter() const { return mtp_drafter_.get(); }
  // mtp_reference_logits of `tokens` (at most the context); DRAFT_UNSUPPORTED as check_mtp_drafts.
  std::vector<float> mtp_reference_logits(std::span<const int32_t> tokens);
  // Benchmarks: the passes from now on take their routing from `replay` (engine/routing_replay.h),
  // or from the routers again with null. Waits for the pass in flight.
  void replay_routing(std::unique_ptr<RoutingReplay> replay);

 private:
  friend class Session;
  friend class Scheduler;
  std::unique_ptr<model::Model> model_;
  int64_t context_size_;
  uint32_t parallel_;
  int64_t step_tokens_;
  cpu::ThreadPool pool_;
  // Held by every forward pass, and by whatever reads or writes a session's KV cache, token
  // history or the prompt-state cache outside a pass (save, restore, fork, prepare_prompt, stores).
  std::mutex compute_;
  std::unique_ptr<ExpertArena> arena_;  // before gpu_, whose host experts read it
  std::shared_ptr<GpuModel> gpu_;
  std::unique_ptr<DraftModel> draft_model_;
  std::unique_ptr<MtpDrafter> mtp_drafter_;
  std::unique_ptr<Residency> residency_;
  std::unique_ptr<RoutingReplay> routing_replay_;  // under compute_
  // Host memory of the CPU's checkpoints and cached states (and of a GPU model's where it cannot be
  // page-locked): before the prompt-state cache, whose states go back to it.
  HostBlocks state_blocks_{kKeptHostStates};
  PromptCache prompt_cache_;
  std::once_flag fingerprint_once_;
  uint64_t fingerprint_ = 0;
  std::shared_ptr<Scheduler> scheduler_;  // its thread runs the passes; stopped first in ~Runtime
};

// Where prepare_prompt left the context.
struct PromptReuse {
  int64_t first = 0;        // the prompt's tokens before this one are in the context already
  bool from_cache = false;  // they came from the prompt-state cache (else from the session's own state)
};

// One sequence: its KV cache and how many tokens it holds. Its tokens are evaluated by
// requests to the model's scheduler (Scheduler::evaluate, Scheduler::generate).
class Session {
 public:
  explicit Session(std::shared_ptr<Runtime> runtime);

  Runtime& runtime() { return *runtime_; }
  int64_t position() const { return position_.load(); }

  // Stores the state in the model's prompt-state cache unless the cache holds it already, it
  // is empty, or it is larger than the whole cache. Returns whether the cache holds it. The
  // cache is an optimisation: when host memory runs short, the state is not cached.
  bool store_in_cache();
  // With recurrent layers, at a checkpoint of a prompt or an evaluation that ends a pass: keeps
  // the recurrent states as one of the session's own checkpoints, and where `to_cache`, the state
  // goes to the prompt-state cache: from the checkpoint when the request ends (store_checkpoints,
  // or any store or restore before), at once where windowed layers would drop its rows meanwhile.
  void checkpoint(bool to_cache);
  // The checkpoints inside a pass: buffers for the states at `positions` (in order, after
  // first_position and before the part's end), which the pass fills; under the compute lock,
  // after begin_pass. After the pass, keep_pass_checkpoints keeps them as checkpoint() would at
  // each, `to_cache[i]` for positions[i]; the next begin_pass drops those a failed or cancelled
  // pass left.
  std::vector<StateSnapshot> take_pass_checkpoints(std::span<const int64_t> positions, int64_t first_position);
  void keep_pass_checkpoints(std::span<const uint8_t> to_cache);
  // Stores the states of the checkpoints kept for the cache (see checkpoint) that still hold.
  void store_checkpoints();

  // A copy of the state: its tokens, keys and values, and where its rows came through a context shift.
  std::shared_ptr<const SessionState> save();
  // Replaces the state by `state`. STATE_MODEL_MISMATCH when it was saved from another model,
  // CONTEXT_TOO_LONG when it does not fit the context; the session is unchanged after an error.
  void restore(const SessionState& state);
  // The same through a file (see state.h for the file's errors).
  void save(const std::string& path);
  void restore(const std::string& path);
  // A new session of the same model with a copy of this one's state.
  std::shared_ptr<Session> fork();

  // The logits of the model's MTP layer at the token `next` appended to the context (what an MTP
  // draft after it would begin with), from the rows the session's MTP state holds, given what it
  // lacks; while no request of the session runs. DRAFT_UNSUPPORTED as check_mtp_drafts.
  std::vector<float> mtp_logits(int32_t next);

 private:
  friend class Scheduler;

  // Makes the context the longest computed prefix of `tokens`, at most `reusable` tokens long: the
  // session's own (cut to the prefix it shares with them) or, when longer, a state of the model's
  // prompt-state cache.
  // The last token is always left to evaluate, so that its logits come from a pass. Before
  // cutting its own state, the session stores it in the cache. Scheduler::admit calls it
  // when a generation starts, and evaluates tokens[first...] next.
  PromptReuse prepare_prompt(std::span<const int32_t> tokens, int64_t reusable = INT64_MAX);

  // The state of the first n tokens (n = position_ where the model has windowed layers; with
  // recurrent layers, n = recurrent_position_), its rows and states in `memory`, its recurrent
  // states taken from `recurrent` where given (a checkpoint's: moved, not copied, where it is in
  // `memory` too; taken last, so an allocation that fails leaves it as it was); the caller holds
  // the runtime's compute lock.
  std::shared_ptr<SessionState> snapshot(int64_t n,
                                         std::pmr::memory_resource* memory = std::pmr::get_default_resource(),
                                         StateBuffer<float>* recurrent = nullptr);
  // With recurrent layers: brings their states to position_ when they are elsewhere (a stop, a
  // cancel or a failed pass cut the context back), by evaluating the context again from its
  // nearest checkpoint (or its start). The caller holds the compute lock.
  void catch_up_locked();
  void catch_up();
  // Drafts in a pass of a model with recurrent layers (Scheduler): the states before the pass are
  // kept as a draft checkpoint (under the compute lock, before begin_pass), and once the pass's
  // kept tokens set position_, rejected drafts roll back by evaluating the kept tokens again from
  // it (catch_up); then the draft checkpoints go.
  void keep_draft_checkpoint();
  void settle_drafts();
  bool recurrent() const { return recurrent_; }
  // The most rows of a part with checkpoints inside it (a pass takes their recurrent states).
  int64_t inner_checkpoint_rows() const;
  // Where the recurrent states are usable as a prefix of `tokens` (at most `limit` long): their
  // position when the prompt begins with the tokens before it, else 0.
  int64_t recurrent_prefix(std::span<const int32_t> tokens, int64_t limit) const;
  // The position of the session's last checkpoint at most `n` (whose tokens history_ holds), or 0.
  int64_t nearest_checkpoint(int64_t n) const;
  // Makes the context the first `n` tokens from the checkpoint at n (nearest_checkpoint's).
  void restore_checkpoint(int64_t n);
  // Appends the recurrent states, those after `at` tokens, to checkpoints_. The caller holds the compute lock.
  void keep_checkpoint(int64_t at, bool draft);
  // Host memory for a checkpoint's recurrent states: a GPU sequence's page-locked where the host
  // can (state_memory), else ordinary.
  StateBuffer<float> checkpoint_memory();
  // Before a checkpoint is appended: the oldest goes where kSessionCheckpoints are kept (to the
  // cache first where it was kept for it).
  void make_room_for_checkpoint();
  // After the checkpoint at `at` is appended: its state goes to the cache (see checkpoint()).
  void cache_checkpoint(int64_t at);
  // Has kReadyCheckpoints page-locked blocks of a checkpoint's size made ahead (a GPU sequence's).
  void ready_checkpoints();
  // Sets the recurrent states (the session's GPU sequence's, or its cache's) from a checkpoint's or a state's.
  void load_recurrent(const float* recurrent);
  // The first position the windowed layers' caches still hold (0: every position held).
  int64_t held_window_first() const;
  // The first position of the windowed layers a state of the first n tokens keeps.
  int64_t state_window_first(int64_t n) const;
  // Whether the context can go on from position n: its windowed layers still hold the window
  // before n (always, without windowed layers).
  bool can_continue_at(int64_t n) const;
  // Loads the first n tokens of `state`; the caller holds the lock and has checked the state.
  void load(const SessionState& state, int64_t n);
  // The same from a state the session may hold on to: on the GPU its rows are copied behind the
  // next pass (restore_kv) rather than before anything else runs.
  void load(std::shared_ptr<const SessionState> state, int64_t n);
  // Takes the first n tokens of `state` as the context, its rows loaded.
  void adopt(const SessionState& state, int64_t n);
  void check_restorable(const SessionState& state, uint64_t fingerprint);
  bool store_locked();
  void store_checkpoints_locked();
  // Stores the state of the first n tokens in the prompt-state cache, its recurrent states the
  // session's own, or `from`'s (a checkpoint at n: the cached state takes them, and the checkpoint
  // reads them there from then on, so they are held once); false where it does not fit the cache
  // or host memory runs short.
  struct Checkpoint;
  bool cache_state(int64_t n, Checkpoint* from);
  // history_ cut to position_; the caller holds the compute lock.
  const std::vector<int32_t>& current_history();
  // Records that the keys and values of `tokens` were written at first_position on (the
  // scheduler calls it inside a pass, under the compute lock).
  void record(int64_t first_position, std::span<const int32_t> tokens);
  // Marks the recurrent states as being written by a pass from first_position on (record() then
  // says where they are); the checkpoints past first_position no longer hold.
  void begin_pass(int64_t first_position);
  // Shifts the full context as llama-server's --context-shift does (engine/context_shift.h),
  // keeping its first `keep` tokens; returns the tokens discarded. Takes the compute lock.
  // UNSUPPORTED_MODEL for a model with sliding-window or recurrent layers.
  int64_t shift_context(int64_t keep);
  // The tokens whose keys and values are what evaluating them afresh gives: the prompt-state
  // cache takes and reuses only those (a shifted context's later rows attended dropped tokens).
  int64_t fresh_positions() const { return std::min(position_.load(), fresh_); }

  std::shared_ptr<Runtime> runtime_;
  KvCache cache_;  // empty when the model runs on the GPU
  std::shared_ptr<GpuSequence> gpu_;
  // The context is the first position_ tokens of history_. Written by the scheduler under its
  // mutex (prepare_prompt runs there too) or, while no request of the session runs, under the
  // compute lock (restore); read anywhere.
  std::atomic<int64_t> position_{0};
  // Guarded by the runtime's compute lock. Tokens past position_ (left by a cancel or a reset,
  // which only move position_) are stale: current_history() drops them.
  std::vector<int32_t> history_;
  // Positions from which on the rows come from a context shift (guarded by the compute lock).
  int64_t fresh_ = SessionState::kNoShift;
  bool in_cache_ = false;  // the prompt-state cache holds this state (or one it begins)
  // With recurrent layers: the position their states are after (history_ holds the tokens
  // before it unless it exceeds position_ and history_ was cut); -1 when a pass failed midway.
  // Written under the compute lock; read by the scheduler without it.
  std::atomic<int64_t> recurrent_position_{0};
  // With recurrent layers: the states after the first `position` tokens of history_, kept where
  // passes ended on checkpoints; the KV rows before each are still the cache's, since a pass from
  // an earlier position drops the later ones (begin_pass), as does a restore. Guarded by the
  // compute lock; in position order.
  struct Checkpoint {
    int64_t position;
    StateBuffer<float> recurrent;  // a GPU sequence's page-locked (state_memory), else in the runtime's state_blocks_
    bool draft = false;      // kept for a pass's drafts only (keep_draft_checkpoint): not one of kSessionCheckpoints
    bool on_device = false;  // a draft checkpoint of a GPU sequence: its states are the sequence's kept copy
    // The prompt-state cache's state that took `recurrent` (cache_state): the states are its.
    std::shared_ptr<const SessionState> stored;
    const float* states() const { return stored ? stored->recurrent.data() : recurrent.data(); }
  };
  std::vector<Checkpoint> checkpoints_;
  std::vector<Checkpoint> pass_checkpoints_;  // take_pass_checkpoints' until keep_pass_checkpoints
  // Positions of checkpoints whose states go to the prompt-state cache when the request ends, in
  // order; guarded by the compute lock.
  std::vector<int64_t> cache_checkpoints_;
  const bool recurrent_;  // the model has recurrent states (linear attention's, compressors')
  const bool windowed_;   // the model has windowed layers
  // The MTP layer's state, from the first generation that drafts with it (only the scheduler thread uses it).
  std::unique_ptr<MtpSequence> mtp_;
  const Request* running_ = nullptr;  // the request of this session that runs now (guarded by the scheduler's mutex)
};

}  // namespace bloomery::engine
