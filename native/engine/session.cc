#include "engine/session.h"

#include <algorithm>
#include <limits>
#include <new>
#include <string>

#include "base/error.h"
#include "cpu/host_info.h"
#include "engine/context_shift.h"
#include "engine/scheduler.h"

namespace bloomery::engine {

int64_t resolve_context_size(const model::HyperParams& p, int64_t requested) {
  if (requested < 0) throw Error("INVALID_ARGUMENT", "contextSize must be positive");
  if (requested == 0) return std::min(p.context_length, kDefaultContextSize);
  if (requested > p.context_length) {
    throw Error("CONTEXT_TOO_LONG", "contextSize " + std::to_string(requested) + " exceeds " + p.architecture +
                                        ".context_length = " + std::to_string(p.context_length));
  }
  return requested;
}

namespace {

// More threads than the machine runs at once only take turns: each pass waits for every one of
// them, so a pass takes many times longer (minutes per token at a thousand).
uint32_t checked_threads(uint32_t threads) {
  const uint32_t cores = cpu::detect_host().logical_cores;
  if (threads > cores) {
    throw Error("INVALID_ARGUMENT", "threads = " + std::to_string(threads) + " exceeds the " + std::to_string(cores) +
                                        " logical cores of this machine");
  }
  return threads;
}

// The arena of options.disk, or null when it pages nothing.
std::unique_ptr<ExpertArena> disk_tier(const model::Model& model, const RuntimeOptions& options) {
  const std::vector<std::vector<int32_t>>& experts = options.disk.experts;
  bool any = false;
  for (const auto& layer : experts) any = any || !layer.empty();
  if (!any) return nullptr;
  const model::HyperParams& p = model.params;
  if (static_cast<int64_t>(experts.size()) != p.layers) {
    throw Error("INVALID_ARGUMENT", "disk experts name " + std::to_string(experts.size()) + " layers; the model has " +
                                        std::to_string(p.layers));
  }
  std::vector<std::vector<uint8_t>> paged(experts.size(), std::vector<uint8_t>(static_cast<size_t>(p.experts), 0));
  for (size_t l = 0; l < experts.size(); ++l) {
    for (const int32_t e : experts[l]) {
      if (e < 0 || e >= p.experts || paged[l][e]) {
        throw Error("INVALID_ARGUMENT", "layer " + std::to_string(l) + "'s disk experts list expert " +
                                            std::to_string(e) + (e >= 0 && e < p.experts ? " twice" : "") +
                                            "; the model has " + std::to_string(p.experts) + " experts per layer");
      }
      paged[l][e] = 1;
    }
    if (options.gpu && l < options.gpu->gpu_experts.size()) {
      for (const int32_t e : options.gpu->gpu_experts[l]) {
        if (e >= 0 && e < p.experts && paged[l][e]) {
          throw Error("INVALID_ARGUMENT", "layer " + std::to_string(l) + "'s expert " + std::to_string(e) +
                                              " is listed both on the GPU and on the disk tier");
        }
      }
    }
  }
  if (options.gpu && options.gpu->gpu_experts.empty()) {
    throw Error("INVALID_ARGUMENT", "disk experts with every expert on the GPU: list the GPU's experts");
  }
  return std::make_unique<ExpertArena>(model, std::move(paged), options.disk.arena_bytes);
}

}  // namespace

Runtime::Runtime(std::unique_ptr<model::Model> model, const RuntimeOptions& options)
    : model_(std::move(model)),
      context_size_(resolve_context_size(model_->params, options.context_size)),
      parallel_(options.parallel),
      step_tokens_(options.step_tokens),
      pool_(checked_threads(options.threads)),
      prompt_cache_(options.cache_ram, model::has_recurrent_layers(*model_)) {
  if (parallel_ < 1) throw Error("INVALID_ARGUMENT", "parallel must be a positive integer");
  if (step_tokens_ < parallel_) {
    throw Error("INVALID_ARGUMENT", "a step of " + std::to_string(step_tokens_) + " tokens cannot hold " +
                                        std::to_string(parallel_) + " parallel sequences");
  }
  arena_ = disk_tier(*model_, options);
  if (!options.draft_model.empty()) {
    draft_model_ = std::make_unique<DraftModel>(model::load_model(options.draft_model), *model_);
  }
  if (options.mtp_drafts) check_mtp_drafts(*model_, options.gpu.has_value());
  if (!model_->nextn_layers.empty()) mtp_drafter_ = std::make_unique<MtpDrafter>(*model_);
  if (options.gpu) gpu_ = upload_model(*model_, *options.gpu, context_size_, pool_, arena_.get(), options.progress);
  if (options.fault_in_weights) {
    fault_in(cpu_read_weights(*model_, options.gpu.has_value(),
                              options.gpu ? options.gpu->gpu_experts : std::vector<std::vector<int32_t>>{},
                              options.disk.experts),
             options.progress);
  }
  // A step fills a GPU pass (gpu_pass_rows); on the CPU it stays small, so other sessions'
  // decode steps wait less behind a long prompt.
  if (gpu_) step_tokens_ = std::max(step_tokens_, gpu_pass_rows(*gpu_));
  residency_ = std::make_unique<Residency>(model_->params.layers, model_->params.experts, gpu_.get(),
                                           options.adaptive_residency, arena_.get());
  scheduler_ = Scheduler::start(*this);
}

std::vector<float> Runtime::mtp_reference_logits(std::span<const int32_t> tokens) {
  check_mtp_drafts(*model_, on_gpu());
  if (tokens.empty() || static_cast<int64_t>(tokens.size()) > context_size_) {
    throw Error("INVALID_ARGUMENT", "the MTP reference takes from 1 to contextSize tokens");
  }
  std::lock_guard lock(compute_);
  return engine::mtp_reference_logits(*model_, tokens, pool_);
}

void Runtime::replay_routing(std::unique_ptr<RoutingReplay> replay) {
  std::lock_guard lock(compute_);
  routing_replay_ = std::move(replay);
}

uint64_t Runtime::fingerprint() {
  std::call_once(fingerprint_once_, [this] { fingerprint_ = model_fingerprint(*model_); });
  return fingerprint_;
}

Runtime::~Runtime() { scheduler_->stop(); }

Session::Session(std::shared_ptr<Runtime> runtime)
    : runtime_(std::move(runtime)),
      // On the GPU the sequence holds the rows and recurrent states: the host cache holds nothing.
      cache_(runtime_->on_gpu() ? KvCache(runtime_->model().params, {}, {}, 0)
                                : KvCache(runtime_->model(), runtime_->context_size())),
      recurrent_(model::has_recurrent_layers(runtime_->model())),
      windowed_(state_shape(runtime_->model()).windowed_layers != 0) {
  if (runtime_->on_gpu()) gpu_ = create_gpu_sequence(*runtime_->gpu_, runtime_->context_size());
  if (gpu_ && recurrent_) ready_checkpoints();
}

void Session::ready_checkpoints() {
  ready_state_memory(*runtime_->gpu_, static_cast<size_t>(gpu_recurrent_floats(*gpu_)) * sizeof(float),
                     kReadyCheckpoints);
}

PromptReuse Session::prepare_prompt(std::span<const int32_t> tokens, int64_t reusable) {
  std::lock_guard lock(runtime_->compute_);
  if (tokens.empty()) return {};
  const int64_t limit = std::min(static_cast<int64_t>(tokens.size()) - 1, reusable);
  // A prefix whose window windowed layers no longer hold is no prefix: those positions are
  // evaluated again (from the start, as llama.cpp's iSWA cache does).
  const model::HyperParams& p = runtime_->model().params;
  const auto usable = [&](int64_t n, int64_t window_first) {
    return model::window_floor(p, n) >= window_first ? n : 0;
  };
  // A recurrent state is a prefix only whole: the session's where the prompt begins with its
  // tokens, else its nearest checkpoint inside the prefix the prompt shares, a cached one where the
  // prompt begins with all of its.
  const int64_t at_checkpoint = recurrent_ ? nearest_checkpoint(std::min(common_prefix(history_, tokens), limit)) : 0;
  const int64_t own =
      recurrent_ ? std::max(recurrent_prefix(tokens, limit), at_checkpoint)
                 : usable(std::min({common_prefix(current_history(), tokens), limit, fresh_}), held_window_first());
  PromptCache& cache = runtime_->prompt_cache_;
  const PromptCache::Match match = cache.capacity() > 0 ? cache.find(tokens, limit) : PromptCache::Match{};
  int64_t cached = match.state ? usable(std::min(match.length, limit), match.state->window_first) : 0;
  if (recurrent_ && cached != static_cast<int64_t>(match.state ? match.state->tokens.size() : 0)) cached = 0;
  if (cached > own) {
    store_locked();
    load(match.state, cached);
    in_cache_ = true;
    return {cached, true};
  }
  if (recurrent_ && own != recurrent_position_) {
    store_locked();
    restore_checkpoint(own);
  } else if (own < position_ || (recurrent_ && own != position_)) {
    store_locked();
    history_.resize(static_cast<size_t>(own));
    position_ = own;
  }
  fresh_ = SessionState::kNoShift;
  return {own, false};
}

bool Session::store_in_cache() {
  std::lock_guard lock(runtime_->compute_);
  return store_locked();
}

void Session::checkpoint(bool to_cache) {
  std::lock_guard lock(runtime_->compute_);
  const int64_t at = recurrent_position_;
  if (!recurrent_ || at <= 0) return;
  // A pass ends past the checkpoints it leaves (begin_pass): `at` is the last.
  make_room_for_checkpoint();
  keep_checkpoint(at, false);
  if (to_cache) cache_checkpoint(at);
}

std::vector<StateSnapshot> Session::take_pass_checkpoints(std::span<const int64_t> positions, int64_t first_position) {
  pass_checkpoints_.clear();
  std::vector<StateSnapshot> snapshots;
  for (const int64_t at : positions) {
    Checkpoint& kept = pass_checkpoints_.emplace_back(Checkpoint{at, checkpoint_memory(), false, false, {}});
    snapshots.push_back({at - first_position, kept.recurrent.data()});
  }
  return snapshots;
}

void Session::keep_pass_checkpoints(std::span<const uint8_t> to_cache) {
  std::lock_guard lock(runtime_->compute_);
  for (size_t i = 0; i < pass_checkpoints_.size(); ++i) {
    make_room_for_checkpoint();
    const int64_t at = pass_checkpoints_[i].position;
    checkpoints_.push_back(std::move(pass_checkpoints_[i]));
    if (i < to_cache.size() && to_cache[i] != 0) cache_checkpoint(at);
  }
  pass_checkpoints_.clear();
  if (gpu_) ready_checkpoints();
}

void Session::make_room_for_checkpoint() {
  if (checkpoints_.size() < kSessionCheckpoints) return;
  // The oldest goes: first to the cache where it was kept for it.
  if (std::find(cache_checkpoints_.begin(), cache_checkpoints_.end(), checkpoints_.front().position) !=
      cache_checkpoints_.end()) {
    store_checkpoints_locked();
  }
  checkpoints_.erase(checkpoints_.begin());
}

void Session::cache_checkpoint(int64_t at) {
  // Without windowed layers the rows before `at` stay as they are while the request goes on, and
  // the checkpoint keeps the recurrent states: the cache gets the state when the request ends, not
  // before the prompt's first token (copying it to fresh page-locked memory took ~60 ms per
  // store on an H100, four stores in a prompt of 4,000 tokens). Windowed layers drop rows as the
  // request goes on: their state goes now, the session's own at a pass's end, a checkpoint's
  // inside the pass while the pass's windows hold the rows before it (inner_checkpoint_rows).
  if (!windowed_) {
    cache_checkpoints_.push_back(at);
  } else if (at == recurrent_position_) {
    store_locked();
  } else {
    cache_checkpoints_.push_back(at);
    store_checkpoints_locked();
  }
}

int64_t Session::inner_checkpoint_rows() const {
  // Windows keep the rows before the start of a part's last store: of kWindowSlice rows on the
  // CPU (KvCache::store), of a GPU pass's (make_window_room; a part no longer than a pass runs in
  // one). A checkpoint inside a longer part would have lost the window before it.
  if (!windowed_) return std::numeric_limits<int64_t>::max();
  return gpu_ ? gpu_pass_rows(*runtime_->gpu_) : model::kWindowSlice;
}

void Session::store_checkpoints() {
  std::lock_guard lock(runtime_->compute_);
  store_checkpoints_locked();
}

void Session::store_checkpoints_locked() {
  for (const int64_t at : cache_checkpoints_) {
    // A pass from before `at` dropped the checkpoint, and the rows after its start.
    const auto kept = std::find_if(checkpoints_.begin(), checkpoints_.end(),
                                   [at](const Checkpoint& c) { return c.position == at && !c.draft; });
    // A windowed layer's rows before `at` must still be held (can_continue_at).
    if (kept == checkpoints_.end() || static_cast<int64_t>(history_.size()) < at || !can_continue_at(at)) continue;
    const bool stored = cache_state(at, &*kept);
    // The state at the recurrent states' position is the session's own (store_locked's).
    if (at == recurrent_position_) in_cache_ = stored;
  }
  cache_checkpoints_.clear();
}

void Session::keep_checkpoint(int64_t at, bool draft) {
  if (!gpu_) {
    Checkpoint& kept = checkpoints_.emplace_back(Checkpoint{at, checkpoint_memory(), draft, false, {}});
    cache_.copy_recurrent_out(kept.recurrent.data());
    return;
  }
  if (draft) {
    // A pass's drafts roll back on the card: its states are copied there, not to the host.
    keep_recurrent_on_device(*runtime_->gpu_, *gpu_);
    checkpoints_.push_back(Checkpoint{at, StateBuffer<float>(&state_memory(*runtime_->gpu_)), true, true, {}});
    return;
  }
  StateBuffer<float> recurrent = checkpoint_memory();
  copy_recurrent_to_host(*runtime_->gpu_, *gpu_, recurrent.data());
  checkpoints_.push_back(Checkpoint{at, std::move(recurrent), false, false, {}});
  ready_checkpoints();
}

StateBuffer<float> Session::checkpoint_memory() {
  if (!gpu_) {
    StateBuffer<float> buffer(&runtime_->state_blocks_);
    buffer.resize(static_cast<size_t>(cache_.recurrent_floats()));
    return buffer;
  }
  // A GPU sequence's checkpoints are page-locked (state_memory), which the card writes at the
  // link's speed: Qwen3.6-35B-A3B's 63 MiB took 1.2 ms on an H100 against 22 ms into ordinary
  // memory, several times before a prompt's first token. Page-locking them there took longer still
  // (29-44 ms each), so the blocks are made ahead (ready_checkpoints). Memory the host cannot
  // page-lock holds one in ordinary memory, as the prompt-state cache's states.
  const auto floats = static_cast<size_t>(gpu_recurrent_floats(*gpu_));
  StateBuffer<float> buffer(&state_memory(*runtime_->gpu_));
  try {
    buffer.resize(floats);
    return buffer;
  } catch (const std::bad_alloc&) {
    StateBuffer<float> ordinary(&runtime_->state_blocks_);
    ordinary.resize(floats);
    return ordinary;
  }
}

void Session::load_recurrent(const float* recurrent) {
  if (gpu_) {
    copy_recurrent_to_device(*runtime_->gpu_, *gpu_, recurrent);
  } else {
    cache_.copy_recurrent_in(recurrent);
  }
}

void Session::keep_draft_checkpoint() {
  if (recurrent_) keep_checkpoint(recurrent_position_, true);
}

void Session::settle_drafts() {
  if (!recurrent_) return;
  std::lock_guard lock(runtime_->compute_);
  catch_up_locked();
  std::erase_if(checkpoints_, [](const Checkpoint& c) { return c.draft; });
}

int64_t Session::nearest_checkpoint(int64_t n) const {
  // A checkpoint whose window the windowed layers no longer hold (DeepSeek-V4's, beside its
  // compressors' states) is no place to go on from.
  for (auto c = checkpoints_.rbegin(); c != checkpoints_.rend(); ++c) {
    if (c->position <= n && c->position <= static_cast<int64_t>(history_.size()) && can_continue_at(c->position)) {
      return c->position;
    }
  }
  return 0;
}

void Session::restore_checkpoint(int64_t n) {
  const auto kept =
      std::find_if(checkpoints_.begin(), checkpoints_.end(), [n](const Checkpoint& c) { return c.position == n; });
  if (kept != checkpoints_.end() && kept->on_device) {
    restore_recurrent_on_device(*runtime_->gpu_, *gpu_);
  } else if (kept != checkpoints_.end()) {
    load_recurrent(kept->states());
  } else {
    // No checkpoint: the states start afresh (n is 0; a pass from position 0 overwrites them).
    n = 0;
  }
  history_.resize(static_cast<size_t>(n));
  position_ = n;
  recurrent_position_ = n;
}

void Session::begin_pass(int64_t first_position) {
  recurrent_position_ = -1;
  pass_checkpoints_.clear();
  std::erase_if(checkpoints_, [first_position](const Checkpoint& c) { return c.position > first_position; });
}

bool Session::store_locked() {
  store_checkpoints_locked();
  // A recurrent state is stored where it is (its tokens are still in history_ when the context
  // was cut back before them): it serves the prompts that begin with them. A shifted context is
  // stored up to where its rows are fresh.
  const int64_t n = recurrent_ ? recurrent_position_.load() : fresh_positions();
  if (n <= 0 || static_cast<int64_t>(history_.size()) < n) return false;
  if (in_cache_) return true;
  // A cached state that a recurrent one begins cannot be cut back to it: only non-recurrent
  // states count as held by a longer entry.
  if (!recurrent_ && runtime_->prompt_cache_.holds(std::span(current_history()).first(static_cast<size_t>(n)))) {
    return in_cache_ = true;
  }
  return in_cache_ = cache_state(n, nullptr);
}

bool Session::cache_state(int64_t n, Checkpoint* from) {
  PromptCache& cache = runtime_->prompt_cache_;
  // A checkpoint whose states a cached state took already: that state again (the cache may have
  // let it go since).
  if (from != nullptr && from->stored) return cache.store(from->stored) != PromptCache::Stored::kRefused;
  if (session_state_bytes(state_shape(runtime_->model()), n, held_window_first()) > cache.capacity()) {
    return false;
  }
  const auto store = [&](std::pmr::memory_resource* memory) {
    std::shared_ptr<SessionState> state = snapshot(n, memory, from != nullptr ? &from->recurrent : nullptr);
    const PromptCache::Stored stored = cache.store(state);
    if (from != nullptr) {
      // Where the cache refreshed another entry instead (or refused), the states go back.
      if (stored == PromptCache::Stored::kTaken) {
        from->stored = state;
      } else {
        from->recurrent = std::move(state->recurrent);
      }
    }
    return stored != PromptCache::Stored::kRefused;
  };
  try {
    return store(gpu_ ? &state_memory(*runtime_->gpu_) : &runtime_->state_blocks_);
  } catch (const std::bad_alloc&) {
    // Memory the host cannot page-lock holds the state in ordinary memory, which a restore
    // copies from more slowly; memory there is none of leaves it out of the cache.
    if (!gpu_) return false;
    try {
      return store(&runtime_->state_blocks_);
    } catch (const std::bad_alloc&) {
      return false;
    }
  }
}

std::shared_ptr<const SessionState> Session::save() {
  const uint64_t fingerprint = runtime_->fingerprint();
  std::lock_guard lock(runtime_->compute_);
  catch_up_locked();
  std::shared_ptr<SessionState> state = snapshot(position_);
  state->model_fingerprint = fingerprint;
  return state;
}

void Session::save(const std::string& path) { write_state_file(path, *save()); }

void Session::restore(const SessionState& state) {
  const uint64_t fingerprint = runtime_->fingerprint();
  std::lock_guard lock(runtime_->compute_);
  check_restorable(state, fingerprint);
  store_checkpoints_locked();
  load(state, static_cast<int64_t>(state.tokens.size()));
  in_cache_ = false;
}

void Session::restore(const std::string& path) {
  restore(read_state_file(path, {runtime_->fingerprint(), state_shape(runtime_->model()), runtime_->context_size(),
                                 runtime_->model().params.vocab}));
}

std::shared_ptr<Session> Session::fork() {
  const std::shared_ptr<const SessionState> state = save();
  auto copy = std::make_shared<Session>(runtime_);
  copy->restore(*state);
  return copy;
}

std::vector<float> Session::mtp_logits(int32_t next) {
  const model::Model& model = runtime_->model();
  check_mtp_drafts(model, runtime_->on_gpu());
  if (next < 0 || next >= model.params.vocab || position_ + 1 >= runtime_->context_size()) {
    throw Error("INVALID_ARGUMENT", "mtp_logits takes a token of the vocabulary that fits the context");
  }
  std::lock_guard lock(runtime_->compute_);
  if (!mtp_) mtp_ = runtime_->mtp_drafter()->new_sequence(runtime_->context_size());
  std::vector<int32_t> context = current_history();
  context.push_back(next);
  std::vector<int32_t> drafted;
  std::vector<float> logits;
  MtpJob job{mtp_.get(), context, 1, 0.0f, &drafted, &logits};
  runtime_->mtp_drafter()->propose(std::span(&job, 1), runtime_->step_tokens(), runtime_->pool_);
  return logits;
}

const std::vector<int32_t>& Session::current_history() {
  history_.resize(std::min(history_.size(), static_cast<size_t>(position_.load())));
  return history_;
}

void Session::record(int64_t first_position, std::span<const int32_t> tokens) {
  history_.resize(static_cast<size_t>(first_position));
  history_.insert(history_.end(), tokens.begin(), tokens.end());
  recurrent_position_ = static_cast<int64_t>(history_.size());
  in_cache_ = false;
}

int64_t Session::recurrent_prefix(std::span<const int32_t> tokens, int64_t limit) const {
  const int64_t at = recurrent_position_;
  if (at <= 0 || at > limit || static_cast<int64_t>(history_.size()) < at) return 0;
  return std::equal(history_.begin(), history_.begin() + at, tokens.begin()) ? at : 0;
}

void Session::catch_up() {
  if (!recurrent_) return;
  std::lock_guard lock(runtime_->compute_);
  catch_up_locked();
}

void Session::catch_up_locked() {
  if (!recurrent_ || recurrent_position_ == position_) return;
  const int64_t n = position_;
  const std::vector<int32_t> tokens(history_.begin(), history_.begin() + n);
  const int64_t from = nearest_checkpoint(n);
  restore_checkpoint(from);
  history_.assign(tokens.begin(), tokens.end());
  position_ = n;
  begin_pass(from);
  ForwardScratch scratch;
  std::vector<float> logits;
  for (int64_t done = from; done < n; done += runtime_->step_tokens_) {
    const int64_t take = std::min(runtime_->step_tokens_, n - done);
    const std::span<const int32_t> part =
        std::span(tokens).subspan(static_cast<size_t>(done), static_cast<size_t>(take));
    if (gpu_) {
      const GpuSequenceRows rows{gpu_.get(), part, done, LogitRows::kLast, false, {}};
      gpu_forward(*runtime_->gpu_, std::span(&rows, 1), logits, scratch.hidden);
    } else {
      const SequenceRows rows{part, done, &cache_, LogitRows::kLast, false, {}};
      forward(runtime_->model(), std::span(&rows, 1), logits, scratch, runtime_->pool_, runtime_->arena_.get());
    }
  }
  recurrent_position_ = n;
}

int64_t Session::held_window_first() const { return gpu_ ? gpu_window_first(*gpu_) : cache_.window_first(); }

int64_t Session::state_window_first(int64_t n) const {
  const int64_t held = held_window_first();
  if (!gpu_) return held;
  // A GPU sequence's windows hold a pass's rows more than a KvCache's: a state keeps what a
  // KvCache holds at most (model::window_cells), so that it restores on the CPU as well.
  return std::max(held, model::window_floor(runtime_->model().params, n) - model::kWindowSlice);
}

bool Session::can_continue_at(int64_t n) const {
  return n == 0 || model::window_floor(runtime_->model().params, n) >= held_window_first();
}

std::shared_ptr<SessionState> Session::snapshot(int64_t n, std::pmr::memory_resource* memory,
                                                StateBuffer<float>* recurrent) {
  const StateShape shape = state_shape(runtime_->model());
  auto state = std::make_shared<SessionState>(memory);
  state->layers = shape.layers;
  state->windowed_layers = shape.windowed_layers;
  state->row = shape.row;
  state->window_first = state_window_first(n);
  state->shifted_from = fresh_ < n ? fresh_ : SessionState::kNoShift;
  state->linear_layers = shape.linear_layers;
  state->tokens.assign(history_.begin(), history_.begin() + n);
  const int64_t rows = state_rows(shape, n, state->window_first);
  state->keys.resize(static_cast<size_t>(rows * shape.row.keys));
  state->values.resize(static_cast<size_t>(rows * shape.row.values));
  if (recurrent == nullptr) state->recurrent.resize(static_cast<size_t>(shape.recurrent_floats));
  state->compressed.resize(static_cast<size_t>(compressed_elements(shape, n)));
  float* own_recurrent = recurrent ? nullptr : state->recurrent.data();
  if (gpu_) {
    copy_kv_to_host(*runtime_->gpu_, *gpu_, n, state->window_first, state->keys.data(), state->values.data(),
                    state->compressed.data());
    if (own_recurrent && !state->recurrent.empty()) copy_recurrent_to_host(*runtime_->gpu_, *gpu_, own_recurrent);
  } else {
    cache_.copy_out(n, state->keys.data(), state->values.data(), own_recurrent, state->compressed.data());
  }
  if (recurrent) state->recurrent = std::move(*recurrent);
  return state;
}

void Session::load(std::shared_ptr<const SessionState> state, int64_t n) {
  if (!gpu_) {
    load(*state, n);
    return;
  }
  const SessionState& rows = *state;
  if (!rows.recurrent.empty()) load_recurrent(rows.recurrent.data());
  restore_kv(*runtime_->gpu_, *gpu_, n, static_cast<int64_t>(rows.tokens.size()), rows.window_first, rows.keys.data(),
             rows.values.data(), rows.compressed.data(), std::move(state));
  adopt(rows, n);
}

void Session::load(const SessionState& state, int64_t n) {
  const int64_t packed = static_cast<int64_t>(state.tokens.size());
  if (gpu_) {
    copy_kv_to_device(*runtime_->gpu_, *gpu_, n, packed, state.window_first, state.keys.data(), state.values.data(),
                      state.compressed.data());
    if (!state.recurrent.empty()) load_recurrent(state.recurrent.data());
  } else {
    cache_.copy_in(n, state);
  }
  adopt(state, n);
}

void Session::adopt(const SessionState& state, int64_t n) {
  history_.assign(state.tokens.begin(), state.tokens.begin() + n);
  position_ = n;
  recurrent_position_ = n;
  checkpoints_.clear();
  pass_checkpoints_.clear();
  cache_checkpoints_.clear();
  fresh_ = state.shifted_from < n ? state.shifted_from : SessionState::kNoShift;
}

int64_t Session::shift_context(int64_t keep) {
  const model::Model& model = runtime_->model();
  if (recurrent_) {
    throw Error("UNSUPPORTED_MODEL", "contextShift: " + model.params.architecture +
                                         " has recurrent layers, whose state cannot drop the tokens it has read");
  }
  for (const model::LayerWeights& layer : model.layers) {
    if (layer.attention.windowed) {
      throw Error("UNSUPPORTED_MODEL", "contextShift: " + model.params.architecture +
                                           " has sliding-window layers, whose context bloomery does not shift");
    }
  }
  if (model::has_sparse_attention(model)) {
    throw Error("UNSUPPORTED_MODEL", "contextShift: " + model.params.architecture +
                                         " has a lightning indexer, whose cached keys bloomery does not shift");
  }
  std::lock_guard lock(runtime_->compute_);
  const int64_t n = position_;
  const ShiftSpan span = shift_span(keep, n, runtime_->context_size());
  if (span.discard == 0) return 0;
  if (gpu_) {
    // The card's rows go through host memory: a shift comes once per half a context of tokens.
    const StateShape shape = state_shape(model);
    std::vector<uint16_t> keys(static_cast<size_t>(n * shape.layers * shape.row.keys));
    std::vector<uint16_t> values(static_cast<size_t>(n * shape.layers * shape.row.values));
    copy_kv_to_host(*runtime_->gpu_, *gpu_, n, 0, keys.data(), values.data());
    for (int64_t l = 0; l < shape.layers; ++l) {
      shift_layer_rows(model.params, n, span, keys.data() + l * n * shape.row.keys,
                       values.data() + l * n * shape.row.values);
    }
    copy_kv_to_device(*runtime_->gpu_, *gpu_, n - span.discard, n, 0, keys.data(), values.data());
  } else {
    cache_.shift(n, span);
  }
  current_history();
  history_.erase(history_.begin() + span.keep, history_.begin() + span.keep + span.discard);
  position_ = n - span.discard;
  fresh_ = std::min(fresh_, span.keep);
  in_cache_ = false;
  return span.discard;
}

void Session::check_restorable(const SessionState& state, uint64_t fingerprint) {
  const StateShape shape = state_shape(runtime_->model());
  if (state.model_fingerprint != fingerprint || state.layers != shape.layers ||
      state.windowed_layers != shape.windowed_layers || state.row.keys != shape.row.keys ||
      state.row.values != shape.row.values || state.linear_layers != shape.linear_layers ||
      state.recurrent.size() != static_cast<size_t>(shape.recurrent_floats) ||
      state.compressed.size() !=
          static_cast<size_t>(compressed_elements(shape, static_cast<int64_t>(state.tokens.size())))) {
    throw Error("STATE_MODEL_MISMATCH", "the session state was saved from another model (or another file of it)");
  }
  const auto tokens = static_cast<int64_t>(state.tokens.size());
  if (tokens > runtime_->context_size()) {
    throw Error("CONTEXT_TOO_LONG", "the session state's " + std::to_string(tokens) +
                                        " tokens do not fit the context of " +
                                        std::to_string(runtime_->context_size()) + " tokens");
  }
  // A windowed layer's rows of the state must fit what the session's windowed layers hold.
  const int64_t window_rows =
      gpu_ ? gpu_window_rows(*gpu_) : model::window_cells(runtime_->model().params, runtime_->context_size());
  if (shape.windowed_layers > 0 && tokens - state.window_first > window_rows) {
    throw Error("STATE_MODEL_MISMATCH", "the session state's sliding-window layers hold " +
                                            std::to_string(tokens - state.window_first) +
                                            " positions; this session's hold " + std::to_string(window_rows));
  }
}

}  // namespace bloomery::engine
