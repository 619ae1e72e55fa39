#include "engine/scheduler.h"

#include <algorithm>
#include <atomic>
#include <iterator>
#include <string>

#include "base/error.h"
#include "engine/mtp_draft.h"
#include "engine/pooling.h"

namespace bloomery::engine {

using Clock = std::chrono::steady_clock;

namespace {

double ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

RequestEnd ended(StopReason reason, const GenerationTimings& timings = {}) {
  RequestEnd end;
  end.reason = reason;
  end.timings = timings;
  return end;
}

RequestEnd failed(std::exception_ptr error) {
  RequestEnd end = ended(StopReason::kCancelled);
  end.error = std::move(error);
  return end;
}

}  // namespace

// One evaluation or generation. The scheduler's mutex guards everything below but `input`,
// `sampler` and `events`, which are fixed at submission.
class Request {
 public:
  std::shared_ptr<Session> session;
  std::vector<int32_t> input;  // tokens appended first: an evaluation's, a generation's prompt
  LogitRows rows = LogitRows::kLast;
  std::shared_ptr<Sampler> sampler;  // set: a generation
  GenerationLimits limits;
  RequestEvents events;
  DraftOptions draft;

  bool admitted = false;
  // Also read by execute() without the mutex, to leave a request cancelled meanwhile out of its pass.
  std::atomic<bool> cancelled = false;
  // The position of input[0]: 0 for a generation, whose prompt replaces the context.
  int64_t base = 0;
  // The session's position once admitted: what a cancel without tokens or a failure leaves.
  int64_t start_position = 0;
  size_t evaluated = 0;       // tokens of `input` in the context
  int32_t pending = -1;       // the drawn token to feed back next, or -1
  bool drawing = false;       // its next token is being drawn on the drawing thread
  int64_t generated = 0;      // tokens delivered
  int64_t discarded = 0;      // context positions a shift dropped (of the prompt or the tokens delivered)
  std::vector<float> logits;  // an evaluation's logits so far
  model::Pooling pooling = model::Pooling::kNone;  // rows kEmbeddings: how its hidden states are pooled
  std::vector<float> hidden;                       // rows kEmbeddings: its rows' hidden states so far, then pooled
  std::vector<int32_t> drawn;  // the tokens delivered, the pending one last: the context's end, for ngram drafts
  DraftAcceptance acceptance;
  int64_t passes_without_draft = 0;            // since the last draft: every kProbeEvery, one is tried
  std::unique_ptr<DraftSequence> draft_model;  // the draft model's keys and values of this generation
  GenerationTimings timings;
  Clock::time_point started, first_token;

  bool generating() const { return sampler != nullptr; }
  // Its passes keep their rows' hidden states for the session's MTP layer (engine/mtp_draft.h).
  bool drafts_mtp() const { return generating() && draft.source == DraftSource::kMtp; }
};

// The parts of one step's pass, in pass order.
struct Scheduler::Pass {
  struct Part {
    std::shared_ptr<Request> request;
    std::vector<int32_t> tokens;  // a decode part: the generated token fed back, then the drafts
    int64_t first_position = 0;
    bool decode = false;     // a generated token fed back
    int32_t late_draft = 0;  // the draft model or the MTP layer is to draft this many tokens in execute()
    // A prompt's (or an evaluation's) checkpoints inside the part, taken inside the pass
    // (Session::take_pass_checkpoints): their positions, in order.
    std::vector<int64_t> checkpoints;
  };
  std::vector<Part> parts;
  std::exception_ptr error;
  double seconds = 0;         // the whole pass, drafting included
  double target_seconds = 0;  // the model's pass alone
  // Per source drafted in execute() (the draft model, the MTP layer): its passes' time, and how
  // many: the most tokens it drafted for one part.
  std::array<double, kDraftSources> draft_seconds{};
  std::array<int32_t, kDraftSources> draft_steps{};
};

// What a step tells the requests' owners, sent once the lock is released. Each event holds
// the request it tells of; dropping a request can drop its session, and with it the runtime.
struct Scheduler::Outbox {
  std::vector<std::function<void()>> events;

  // Runs the events in order, each dropped as soon as it ran: a request's end event is then
  // the last to hold it (see finish).
  void send() {
    for (auto& event : events) {
      event();
      event = nullptr;
    }
    events.clear();
  }
};

std::string_view stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::kDone:
      return "done";
    case StopReason::kEos:
      return "eos";
    case StopReason::kMaxTokens:
      return "maxTokens";
    case StopReason::kContextFull:
      return "contextFull";
    case StopReason::kCancelled:
      return "abort";
  }
  return "abort";
}

Scheduler::Scheduler(Runtime& runtime) : runtime_(runtime) {}

Scheduler::~Scheduler() = default;

std::shared_ptr<Scheduler> Scheduler::start(Runtime& runtime) {
  auto scheduler = std::make_shared<Scheduler>(runtime);
  // The thread keeps the scheduler alive: when the last request drops the runtime on this
  // thread, stop() detaches it, and run() returns without touching the runtime again.
  scheduler->thread_ = std::thread([self = scheduler] { self->run(); });
  return scheduler;
}

void Scheduler::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  draw_wake_.notify_all();
  // The drawing thread never holds the last reference to a request (it hands each back to the
  // scheduler thread), so stop() never runs on it, and joining it here cannot wait on itself.
  if (drawer_.joinable()) drawer_.join();
  if (std::this_thread::get_id() == thread_.get_id()) {
    thread_.detach();
  } else {
    thread_.join();
  }
}

std::shared_ptr<Request> Scheduler::evaluate(std::shared_ptr<Session> session, std::vector<int32_t> tokens,
                                             LogitRows rows, RequestEvents events) {
  auto request = std::make_shared<Request>();
  request->session = std::move(session);
  request->input = std::move(tokens);
  request->rows = rows;
  request->events = std::move(events);
  return submit(std::move(request));
}

std::shared_ptr<Request> Scheduler::embed(std::shared_ptr<Session> session, std::vector<int32_t> tokens,
                                          model::Pooling pooling, RequestEvents events) {
  check_pooling(runtime_.model(), pooling);
  auto request = std::make_shared<Request>();
  request->session = std::move(session);
  request->input = std::move(tokens);
  request->rows = LogitRows::kEmbeddings;
  request->pooling = pooling;
  request->events = std::move(events);
  return submit(std::move(request));
}

std::shared_ptr<Request> Scheduler::generate(std::shared_ptr<Session> session, std::vector<int32_t> prompt,
                                             std::shared_ptr<Sampler> sampler, GenerationLimits limits,
                                             RequestEvents events, const DraftOptions& draft) {
  if (!sampler) throw Error("INVALID_ARGUMENT", "generate needs a sampler");
  if (limits.max_tokens < 0) throw Error("INVALID_ARGUMENT", "maxTokens must be a non-negative integer");
  validate(draft);
  if (draft.source == DraftSource::kModel && !runtime_.draft_model()) {
    throw Error("DRAFT_UNSUPPORTED", "model drafts need a draft model (loadModel's draftModel option)");
  }
  if (draft.source == DraftSource::kMtp) check_mtp_drafts(runtime_.model(), runtime_.on_gpu());
  auto request = std::make_shared<Request>();
  request->session = std::move(session);
  request->input = std::move(prompt);
  request->sampler = std::move(sampler);
  request->limits = limits;
  request->events = std::move(events);
  request->draft = draft;
  return submit(std::move(request));
}

std::shared_ptr<Request> Scheduler::submit(std::shared_ptr<Request> request) {
  const int64_t vocab = runtime_.model().params.vocab;
  if (request->input.empty()) throw Error("INVALID_ARGUMENT", "evaluate needs at least one token");
  for (const int32_t token : request->input) {
    if (token < 0 || token >= vocab) {
      throw Error("INVALID_ARGUMENT",
                  "token " + std::to_string(token) + " is outside the vocabulary of " + std::to_string(vocab));
    }
  }
  if (&request->session->runtime() != &runtime_) throw Error("INVALID_ARGUMENT", "the session is another model's");
  {
    std::lock_guard lock(mutex_);
    waiting_.push_back(request);
  }
  wake_.notify_all();
  return request;
}

void Scheduler::cancel(Request& request, int64_t kept_tokens) {
  {
    std::lock_guard lock(mutex_);
    cancel_locked(request, kept_tokens);
  }
  wake_.notify_all();
}

void Scheduler::cancel_all(const Session& session) {
  {
    std::lock_guard lock(mutex_);
    for (const auto& r : waiting_) {
      if (r->session.get() == &session) cancel_locked(*r, 0);
    }
    for (const auto& r : active_) {
      if (r->session.get() == &session) cancel_locked(*r, 0);
    }
  }
  wake_.notify_all();
}

void Scheduler::cancel_locked(Request& request, int64_t kept_tokens) {
  if (request.cancelled) return;
  request.cancelled = true;
  if (!request.admitted) return;
  // A delivered token was drawn after every earlier one was evaluated, so the session's
  // position is at least `keep`, and a pass in flight only writes beyond it.
  // After a context shift the context no longer holds what came before it: it keeps what it can.
  const int64_t keep = kept_tokens <= 0 ? request.start_position
                                        : request.base + static_cast<int64_t>(request.input.size()) + kept_tokens - 1 -
                                              request.discarded;
  Session& session = *request.session;
  session.position_ = std::clamp<int64_t>(keep, 0, session.position_.load());
}

void Scheduler::reset(Session& session) {
  std::lock_guard lock(mutex_);
  // A cancelled request's pass may still run, but its results are dropped. The token history
  // past the position is stale (Session::current_history), so the position alone says it.
  if (session.running_ && !session.running_->cancelled) {
    throw Error("INVALID_ARGUMENT", "reset() while the session is evaluating");
  }
  session.position_ = 0;
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lock(mutex_);
  SchedulerStats s = stats_;
  s.active = static_cast<int64_t>(active_.size());
  s.waiting = static_cast<int64_t>(waiting_.size());
  return s;
}

bool Scheduler::has_work() const {
  if (!drawn_.empty()) return true;
  // A running request has work unless its next token is being drawn elsewhere.
  if (std::any_of(active_.begin(), active_.end(), [](const auto& r) { return r->cancelled || !r->drawing; })) {
    return true;
  }
  const bool room = active_.size() < runtime_.parallel();
  return std::any_of(waiting_.begin(), waiting_.end(),
                     [room](const auto& r) { return r->cancelled || (room && !r->session->running_); });
}

void Scheduler::run() {
  for (;;) {
    Outbox out;
    Pass pass;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || has_work(); });
      if (stopping_) return;
      retire_cancelled(out);
      collect_draws(out);
      admit(out);
      plan(pass);
    }
    out.send();
    if (!pass.parts.empty()) {
      execute(pass);
      std::lock_guard lock(mutex_);
      commit(pass, out);
    }
    // The events go out holding the only references this thread keeps, so an owner that hears
    // of its request's end finds this thread done with it (see finish).
    pass.parts.clear();
    out.send();
  }
}

void Scheduler::retire_cancelled(Outbox& out) {
  const auto cancelled = [](const std::shared_ptr<Request>& r) { return r->cancelled.load(); };
  std::vector<std::shared_ptr<Request>> retired;
  std::copy_if(active_.begin(), active_.end(), std::back_inserter(retired), cancelled);
  std::copy_if(waiting_.begin(), waiting_.end(), std::back_inserter(retired), cancelled);
  std::erase_if(waiting_, cancelled);
  for (auto& request : retired) finish(std::move(request), ended(StopReason::kCancelled), out);
}

void Scheduler::admit(Outbox& out) {
  const int64_t context = runtime_.context_size();
  for (auto it = waiting_.begin(); it != waiting_.end() && active_.size() < runtime_.parallel();) {
    Request& r = **it;
    Session& session = *r.session;
    if (session.running_) {
      ++it;
      continue;
    }
    auto request = std::move(*it);
    it = waiting_.erase(it);
    r.admitted = true;
    r.started = Clock::now();
    if (!r.generating()) {
      try {
        session.catch_up();
      } catch (...) {
        finish(request, failed(std::current_exception()), out);
        continue;
      }
    }
    r.base = r.generating() ? 0 : session.position_.load();
    r.start_position = r.base;
    if (!r.generating() && !session.can_continue_at(r.base)) {
      finish(request,
             failed(std::make_exception_ptr(Error(
                 "CONTEXT_WINDOW_DROPPED",
                 "the session's sliding-window layers no longer hold the positions before " + std::to_string(r.base) +
                     " (a cancelled or failed evaluation cut the context back past them): reset the session, or "
                     "restore a saved state"))),
             out);
      continue;
    }
    const int64_t end = r.base + static_cast<int64_t>(r.input.size());
    if (end > context) {
      finish(request,
             failed(std::make_exception_ptr(Error(
                 "CONTEXT_TOO_LONG", (r.generating() ? "the prompt's " : "") + std::to_string(end) +
                                         " tokens do not fit the context of " + std::to_string(context) + " tokens"))),
             out);
      continue;
    }
    if (r.generating() && r.limits.max_tokens == 0) {
      finish(request, ended(StopReason::kMaxTokens), out);
      continue;
    }
    if (r.generating()) {
      try {
        // An MTP-drafting generation reuses only the prefix whose MTP rows the session holds too
        // (the target's hidden states of the rest are gone: it is evaluated again).
        int64_t reusable = r.limits.reuse_prefix ? INT64_MAX : 0;
        if (r.draft.source == DraftSource::kMtp) {
          if (!session.mtp_) session.mtp_ = runtime_.mtp_drafter()->new_sequence(context);
          reusable = std::min(reusable, session.mtp_->reusable(r.input));
        }
        const PromptReuse reuse = session.prepare_prompt(r.input, reusable);
        r.start_position = reuse.first;
        r.evaluated = static_cast<size_t>(reuse.first);
        r.timings.cached_prompt_tokens = reuse.first;
        r.timings.prompt_cache_hit = reuse.from_cache;
      } catch (...) {
        finish(request, failed(std::current_exception()), out);
        continue;
      }
    }
    session.running_ = &r;
    active_.push_back(std::move(request));
  }
}

namespace {

// The first checkpoint after position `from` of a prompt or an evaluation that ends at position
// `end`: end - kCheckpointSpacing * 2^i for the largest i that leaves one after `from`, else (a
// generation's prompt) end - kPromptTailCheckpoint where that is after `from`, else the end.
int64_t next_checkpoint(int64_t end, int64_t from, bool generating) {
  int64_t next = generating && end - kPromptTailCheckpoint > from ? end - kPromptTailCheckpoint : end;
  for (int64_t gap = kCheckpointSpacing; end - gap > from; gap *= 2) next = end - gap;
  return next;
}

}  // namespace

void Scheduler::plan(Pass& pass) {
  int64_t budget = runtime_.step_tokens();
  int64_t decoding = 0;
  for (const auto& r : active_) decoding += r->pending >= 0 ? 1 : 0;
  budget -= decoding;
  for (const auto& r : active_) {
    if (r->pending < 0) continue;
    Pass::Part part{r, {r->pending}, r->session->position_, true};
    const int32_t width = draft_width(*r, decoding - 1, budget);
    if (width > 0 && r->draft.source == DraftSource::kNgram) {
      std::vector<int32_t> context = r->input;
      context.insert(context.end(), r->drawn.begin(), r->drawn.end());
      const std::vector<int32_t> drafted = ngram_draft(context, width, r->draft.ngram_max, r->draft.ngram_min);
      if (static_cast<int32_t>(drafted.size()) >= std::max(r->draft.min, 1)) {
        part.tokens.insert(part.tokens.end(), drafted.begin(), drafted.end());
      }
    } else if (width > 0) {
      part.late_draft = width;
    }
    // A draft drafted in execute() is as wide as asked at most: its rows are counted now.
    budget -= std::max<int64_t>(static_cast<int64_t>(part.tokens.size()) - 1, part.late_draft);
    pass.parts.push_back(std::move(part));
  }
  // A prompt (or an evaluation) runs in chunks of step_tokens from its start, whatever else runs:
  // each chunk whole in one step, beside the decode rows, once the step has room for it. Its rows
  // then meet the kernels they meet alone (gpu_forward picks them by a part's own rows), so a
  // stream's tokens do not depend on the streams that share its steps.
  int64_t room = runtime_.step_tokens();
  for (const auto& r : active_) {
    const auto remaining = static_cast<int64_t>(r->input.size() - r->evaluated);
    if (remaining == 0) continue;
    int64_t take = std::min(remaining, runtime_.step_tokens());
    // With recurrent layers, a prompt's or an evaluation's checkpoints are kept in commit: those
    // inside the part from the states the pass takes there (such a part is at most
    // inner_checkpoint_rows long).
    const int64_t at = r->base + static_cast<int64_t>(r->evaluated);
    const int64_t end = r->base + static_cast<int64_t>(r->input.size());
    const bool recurrent = r->session->recurrent();
    const int64_t checkpoint = next_checkpoint(end, at, r->generating());
    if (recurrent && checkpoint < at + take) take = std::min(take, r->session->inner_checkpoint_rows());
    if (take > room) break;
    const auto first = r->input.begin() + static_cast<ptrdiff_t>(r->evaluated);
    Pass::Part& part =
        pass.parts.emplace_back(Pass::Part{r, std::vector<int32_t>(first, first + take), r->session->position_, false});
    for (int64_t c = checkpoint; recurrent && c < at + take; c = next_checkpoint(end, c, r->generating())) {
      part.checkpoints.push_back(c);
    }
    room -= take;
  }
}

// How many tokens to draft for a generation's next pass: what pays (best_draft_width) or, not
// adaptive, draft.max; never more rows than the context holds, tokens than are left to deliver,
// or rows than the step's budget.
int32_t Scheduler::draft_width(const Request& r, int64_t other_rows, int64_t budget) const {
  if (r.draft.source == DraftSource::kNone) return 0;
  const int64_t position = r.session->position_;
  const int64_t limit = std::min(
      {int64_t{r.draft.max}, runtime_.context_size() - position - 1, r.limits.max_tokens - r.generated - 1, budget});
  if (limit < std::max(r.draft.min, 1)) return 0;
  if (!r.draft.adaptive) return static_cast<int32_t>(limit);
  const double per_token = draft_token_seconds_[static_cast<size_t>(r.draft.source)];
  int32_t width = best_draft_width(costs_, per_token, r.acceptance.rate(), other_rows, static_cast<int32_t>(limit));
  // Drafts that did not pay are tried again now and then (acceptance changes with the text), and
  // now and then one more than pays, so that the next width's cost is measured afresh.
  constexpr int64_t kProbeEvery = 16, kWidenEvery = 8;
  if (width == 0 && r.passes_without_draft >= kProbeEvery) width = 1;
  if (width > 0 && r.generated % kWidenEvery == 0) width = static_cast<int32_t>(std::min<int64_t>(width + 1, limit));
  return width < r.draft.min ? 0 : width;
}

namespace {

// The target's context of a generation: its prompt and the tokens delivered, the pending one last.
std::vector<int32_t> generation_context(const Request& r) {
  std::vector<int32_t> context = r.input;
  context.insert(context.end(), r.drawn.begin(), r.drawn.end());
  return context;
}

}  // namespace

// The drafts of the pass's parts that asked for them in execute(): the draft model's, then the
// MTP layer's, each in one pass per token for all of their parts.
void Scheduler::draft(Pass& pass) {
  for (const DraftSource source : {DraftSource::kModel, DraftSource::kMtp}) {
    std::vector<Pass::Part*> parts;
    for (Pass::Part& part : pass.parts) {
      if (part.late_draft > 0 && part.request->draft.source == source) parts.push_back(&part);
    }
    if (parts.empty()) continue;
    const Clock::time_point started = Clock::now();
    std::vector<std::vector<int32_t>> context(parts.size()), drafted(parts.size());
    for (size_t i = 0; i < parts.size(); ++i) context[i] = generation_context(*parts[i]->request);
    if (source == DraftSource::kModel) {
      std::vector<DraftJob> jobs;
      for (size_t i = 0; i < parts.size(); ++i) {
        Request& r = *parts[i]->request;
        if (!r.draft_model) r.draft_model = runtime_.draft_model()->new_sequence(runtime_.context_size());
        jobs.push_back({r.draft_model.get(), context[i], parts[i]->late_draft, r.draft.p_min, &drafted[i]});
      }
      runtime_.draft_model()->propose(jobs, runtime_.step_tokens(), runtime_.pool_);
    } else {
      std::vector<MtpJob> jobs;
      for (size_t i = 0; i < parts.size(); ++i) {
        Request& r = *parts[i]->request;
        jobs.push_back({r.session->mtp_.get(), context[i], parts[i]->late_draft, r.draft.p_min, &drafted[i]});
      }
      runtime_.mtp_drafter()->propose(jobs, runtime_.step_tokens(), runtime_.pool_);
    }
    const auto at = static_cast<size_t>(source);
    pass.draft_seconds[at] = std::chrono::duration<double>(Clock::now() - started).count();
    for (size_t i = 0; i < parts.size(); ++i) {
      pass.draft_steps[at] = std::max(pass.draft_steps[at], static_cast<int32_t>(drafted[i].size()));
      if (static_cast<int32_t>(drafted[i].size()) < std::max(parts[i]->request->draft.min, 1)) continue;
      parts[i]->tokens.insert(parts[i]->tokens.end(), drafted[i].begin(), drafted[i].end());
    }
  }
}

void Scheduler::execute(Pass& pass) {
  const Clock::time_point started = Clock::now();
  try {
    std::lock_guard compute(runtime_.compute_);
    // A request cancelled since plan() stays out: its session may have been restored or
    // stored meanwhile (under this lock), and the cancel already set its position.
    std::erase_if(pass.parts, [](const Pass::Part& part) { return part.request->cancelled.load(); });
    if (pass.parts.empty()) return;
    // A mapped file that shrank would raise SIGBUS in the pass: refuse while that is still an error.
    runtime_.model().file.check_unchanged();
    draft(pass);
    const Clock::time_point target = Clock::now();
    // A generation's decode part returns a row of logits per token: the drafts are drawn at each.
    const auto logit_rows = [](const Pass::Part& part) {
      if (part.decode) return part.tokens.size() > 1 ? LogitRows::kAll : LogitRows::kLast;
      return part.request->generating() ? LogitRows::kLast : part.request->rows;
    };
    scratch_.replayed_routing.clear();
    if (runtime_.routing_replay_) {
      int64_t rows = 0;
      for (const Pass::Part& part : pass.parts) rows += static_cast<int64_t>(part.tokens.size());
      runtime_.routing_replay_->next(rows, runtime_.model().params.layers, scratch_.replayed_routing);
    }
    for (const Pass::Part& part : pass.parts) {
      Session& session = *part.request->session;
      // Recurrent states cannot move back past rejected drafts: the pass starts from a checkpoint.
      if (part.decode && part.tokens.size() > 1) session.keep_draft_checkpoint();
      session.begin_pass(part.first_position);
    }
    std::vector<std::vector<StateSnapshot>> snapshots;
    snapshots.reserve(pass.parts.size());
    for (const Pass::Part& part : pass.parts) {
      snapshots.push_back(part.checkpoints.empty()
                              ? std::vector<StateSnapshot>()
                              : part.request->session->take_pass_checkpoints(part.checkpoints, part.first_position));
    }
    if (runtime_.gpu_) {
      std::vector<GpuSequenceRows> batch;
      batch.reserve(pass.parts.size());
      for (size_t i = 0; i < pass.parts.size(); ++i) {
        const Pass::Part& part = pass.parts[i];
        const Request& r = *part.request;
        batch.push_back(
            {r.session->gpu_.get(), part.tokens, part.first_position, logit_rows(part), r.drafts_mtp(), snapshots[i]});
      }
      gpu_forward(*runtime_.gpu_, batch, logits_, scratch_.hidden, scratch_.replayed_routing);
    } else {
      std::vector<SequenceRows> batch;
      batch.reserve(pass.parts.size());
      for (size_t i = 0; i < pass.parts.size(); ++i) {
        const Pass::Part& part = pass.parts[i];
        const Request& r = *part.request;
        batch.push_back(
            {part.tokens, part.first_position, &r.session->cache_, logit_rows(part), r.drafts_mtp(), snapshots[i]});
      }
      forward(runtime_.model(), batch, logits_, scratch_, runtime_.pool_, runtime_.arena_.get());
    }
    pass.target_seconds = std::chrono::duration<double>(Clock::now() - target).count();
    keep_hidden_states(pass);
    const bool prompt =
        std::any_of(pass.parts.begin(), pass.parts.end(), [](const Pass::Part& p) { return !p.decode; });
    runtime_.residency_->after_step(scratch_.routed, prompt);
    for (const Pass::Part& part : pass.parts) part.request->session->record(part.first_position, part.tokens);
  } catch (...) {
    pass.error = std::current_exception();
  }
  pass.seconds = std::chrono::duration<double>(Clock::now() - started).count();
}

// Hands each part's hidden states on (scratch_.hidden holds them part after part): an embedding
// part's to its request, pooled once its last token ran (on this thread, under the compute lock:
// the head of a reranker runs on the pool); an MTP-drafting generation's (mtp_hidden_width floats
// a row) to its session's MTP state, for the rows of the positions after them.
void Scheduler::keep_hidden_states(Pass& pass) {
  const model::Model& model = runtime_.model();
  const auto embedding_width = static_cast<size_t>(model.params.embedding);
  const auto mtp_width = static_cast<size_t>(mtp_hidden_width(model));
  const float* first = scratch_.hidden.data();
  for (const Pass::Part& part : pass.parts) {
    Request& r = *part.request;
    const bool embedding = r.rows == LogitRows::kEmbeddings;
    if (!embedding && !r.drafts_mtp()) continue;
    const size_t n = part.tokens.size();
    if (!embedding) {
      r.session->mtp_->keep_hidden(part.first_position, first, static_cast<int64_t>(n));
      first += n * mtp_width;
      continue;
    }
    r.hidden.insert(r.hidden.end(), first, first + n * embedding_width);
    first += n * embedding_width;
    if (r.evaluated + n == r.input.size()) r.hidden = pool(runtime_.model(), r.pooling, r.hidden, runtime_.pool_);
  }
}

namespace {

// Draws a generation's tokens from its part's rows of logits (`logits`: one row of the vocabulary
// per decode token, one for a prompt's last chunk). The sampler's history: the whole prompt once
// it is in, then each token fed back (a kept draft is the token drawn before it), which also moves
// its grammar on. Stops after the first token that differs from the draft after it, the
// end-of-sequence token, or as many tokens as max_tokens leaves. Only the sampler is touched: it
// runs on the drawing thread for a constrained sampler.
DrawnRows draw_rows(Request& r, std::span<const int32_t> tokens, bool decode, std::span<const float> logits,
                    int32_t eos) {
  DrawnRows out;
  const size_t rows = decode ? tokens.size() : 1;
  const size_t vocab = logits.size() / rows;
  for (size_t row = 0; row < rows; ++row) {
    try {
      if (decode) {
        r.sampler->accept(tokens[row]);
      } else {
        r.sampler->accept_prompt(r.input);
      }
      const int32_t token = r.sampler->sample(logits.subspan(row * vocab, vocab));
      out.tokens.push_back(token);
      out.logprobs.push_back(r.sampler->last_logprobs());
      if (token == eos) break;
      const bool kept = row + 1 < rows && token == tokens[row + 1];
      if (!kept || r.generated + static_cast<int64_t>(out.tokens.size()) >= r.limits.max_tokens) break;
    } catch (...) {
      out.error = std::current_exception();
      break;
    }
  }
  return out;
}

}  // namespace

void Scheduler::commit(Pass& pass, Outbox& out) {
  if (pass.parts.empty()) return;  // every part was cancelled before the pass began
  const model::HyperParams& p = runtime_.model().params;
  bool prompt_rows = false, decode_rows = false;
  int64_t rows = 0;
  for (const Pass::Part& part : pass.parts) {
    const auto n = static_cast<int64_t>(part.tokens.size());
    if (!part.decode) stats_.prompt_tokens += n;
    (part.decode ? decode_rows : prompt_rows) = true;
    rows += n;
  }
  stats_.rows += rows;
  ++stats_.passes;
  stats_.sequence_rows += static_cast<int64_t>(pass.parts.size());
  stats_.widest_pass = std::max(stats_.widest_pass, static_cast<int64_t>(pass.parts.size()));
  if (prompt_rows) stats_.prompt_seconds += pass.seconds;
  if (decode_rows) stats_.decode_seconds += pass.seconds;
  if (decode_rows) ++stats_.decode_passes;
  if (!pass.error) {
    costs_.record(rows, pass.target_seconds);
    // A drafter's pass per drafted token (catching up with a prompt counts in too: it is rare).
    for (size_t source = 0; source < kDraftSources; ++source) {
      if (pass.draft_steps[source] == 0) continue;
      const double step = pass.draft_seconds[source] / pass.draft_steps[source];
      double& mean = draft_token_seconds_[source];
      mean = mean == 0 ? step : mean + (step - mean) / 8;
    }
  }

  // The unconstrained draws of the pass's finished parts run on the pool, one part per task (each
  // touches only its own request's sampler), and are delivered in the parts' order after.
  struct PendingDraw {
    const Pass::Part* part;
    std::span<const float> logits;
    DrawnRows drawn;
  };
  std::vector<PendingDraw> draws;
  size_t logit_row = 0;
  for (const Pass::Part& part : pass.parts) {
    Request& r = *part.request;
    const auto n = static_cast<int64_t>(part.tokens.size());
    const bool all_rows = part.decode || (!r.generating() && r.rows == LogitRows::kAll);
    const bool embedding = r.rows == LogitRows::kEmbeddings;
    const size_t logit_rows = embedding ? 0 : all_rows ? static_cast<size_t>(n) : 1;
    const float* logits = logits_.data() + logit_row * static_cast<size_t>(p.vocab);
    logit_row += logit_rows;
    if (r.cancelled) continue;  // ended at the next step; cancel() has set the position
    if (pass.error) {
      Session& session = *r.session;
      session.position_ = r.start_position;
      finish(part.request, failed(pass.error), out);
      continue;
    }
    r.session->position_ = part.first_position + n;
    if (!part.decode) r.evaluated += static_cast<size_t>(n);
    if (!part.decode && r.session->recurrent()) {
      const int64_t end = r.base + static_cast<int64_t>(r.input.size());
      const int64_t at = r.base + static_cast<int64_t>(r.evaluated);
      // An evaluation's end stays the session's own checkpoint, as other models store no
      // evaluation's end: a loop of one-token evaluations would copy its whole state every token.
      // So does a prompt's tail checkpoint: a prompt that shares all but its last tokens with a cached
      // one is served by the cached checkpoints below it.
      const auto to_cache = [&](int64_t checkpoint) {
        return checkpoint != (r.generating() ? end - kPromptTailCheckpoint : end);
      };
      if (!part.checkpoints.empty()) {
        std::vector<uint8_t> cached;
        for (const int64_t c : part.checkpoints) cached.push_back(to_cache(c) ? 1 : 0);
        r.session->keep_pass_checkpoints(cached);
      }
      if (next_checkpoint(end, at - 1, r.generating()) == at) r.session->checkpoint(to_cache(at));
    }
    if (!r.generating() && all_rows) r.logits.insert(r.logits.end(), logits, logits + logit_rows * p.vocab);
    if (r.evaluated < r.input.size()) continue;  // more of the prompt next step

    if (!r.generating()) {
      RequestEnd done = ended(StopReason::kDone);
      done.logits = embedding  ? std::move(r.hidden)
                    : all_rows ? std::move(r.logits)
                               : std::vector<float>(logits, logits + p.vocab);
      finish(part.request, std::move(done), out);
      continue;
    }
    r.pending = -1;
    if (r.sampler->constrained()) {
      draw_elsewhere(part.request, part.tokens, part.decode, logits);
    } else {
      const size_t rows = part.decode ? part.tokens.size() : 1;
      draws.push_back({&part, std::span(logits, rows * p.vocab), {}});
    }
  }
  const auto draw = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      PendingDraw& d = draws[i];
      d.drawn = draw_rows(*d.part->request, d.part->tokens, d.part->decode, d.logits, p.eos_token);
    }
  };
  if (draws.size() > 1) {
    // The pool is the passes' (as admit's prepare_prompt, the lock comes after mutex_).
    std::lock_guard compute(runtime_.compute_);
    runtime_.pool_.parallel_for(draws.size(), 1, draw);
  } else {
    draw(0, draws.size());
  }
  for (PendingDraw& d : draws) deliver(d.part->request, d.part->tokens, d.part->decode, std::move(d.drawn), out);
}

void Scheduler::draw_elsewhere(const std::shared_ptr<Request>& request, std::span<const int32_t> tokens, bool decode,
                               const float* logits) {
  const auto vocab = static_cast<size_t>(runtime_.model().params.vocab);
  request->drawing = true;
  Draw job;
  job.request = request;
  job.tokens.assign(tokens.begin(), tokens.end());
  job.decode = decode;
  job.logits.assign(logits, logits + (decode ? tokens.size() : 1) * vocab);
  draws_.push_back(std::move(job));
  if (!drawer_.joinable()) drawer_ = std::thread([this] { run_draws(); });
  draw_wake_.notify_one();
}

// The drawing thread: one draw at a time, without the lock, each handed back whole (the request
// with it) for the scheduler thread to deliver.
void Scheduler::run_draws() {
  const int32_t eos = runtime_.model().params.eos_token;
  std::unique_lock lock(mutex_);
  for (;;) {
    draw_wake_.wait(lock, [&] { return stopping_ || !draws_.empty(); });
    if (stopping_) return;
    Draw job = std::move(draws_.front());
    draws_.pop_front();
    lock.unlock();
    // A request cancelled meanwhile is retired by the scheduler thread: its draw is skipped.
    if (!job.request->cancelled) job.drawn = draw_rows(*job.request, job.tokens, job.decode, job.logits, eos);
    lock.lock();
    drawn_.push_back(std::move(job));
    wake_.notify_all();
  }
}

void Scheduler::collect_draws(Outbox& out) {
  std::vector<Draw> done = std::move(drawn_);
  drawn_.clear();
  for (Draw& job : done) {
    job.request->drawing = false;
    if (job.request->cancelled) continue;  // retire_cancelled ended it
    deliver(job.request, job.tokens, job.decode, std::move(job.drawn), out);
  }
}

void Scheduler::deliver(const std::shared_ptr<Request>& request, std::span<const int32_t> tokens, bool decode,
                        DrawnRows drawn, Outbox& out) {
  Request& r = *request;
  const model::HyperParams& p = runtime_.model().params;
  // A decode part is the token fed back at `first`, then the drafts: row i's logits follow tokens[i].
  const size_t rows = decode ? tokens.size() : 1;
  const int64_t first = r.session->position_ - static_cast<int64_t>(tokens.size());
  // Keeps the first `kept` drafts; the rest are rolled back: the next pass writes over their keys and values.
  const auto settle = [&](size_t kept) {
    if (!decode) return;
    r.session->position_ = first + 1 + static_cast<int64_t>(kept);
    if (rows > 1) r.session->settle_drafts();
    stats_.decode_tokens += 1 + static_cast<int64_t>(kept);
    const auto drafted = static_cast<int64_t>(rows - 1);
    if (drafted == 0) {
      ++r.passes_without_draft;
      return;
    }
    r.passes_without_draft = 0;
    r.acceptance.record(drafted, static_cast<int64_t>(kept));
    ++stats_.draft_passes;
    stats_.draft_tokens += drafted;
    stats_.draft_accepted += static_cast<int64_t>(kept);
    r.timings.draft_tokens += drafted;
    r.timings.draft_accepted += static_cast<int64_t>(kept);
  };
  const Clock::time_point now = Clock::now();
  for (size_t row = 0; row < drawn.tokens.size(); ++row) {
    const int32_t token = drawn.tokens[row];
    if (r.generated == 0) {
      r.first_token = now;
      r.timings.prompt_tokens = static_cast<int64_t>(r.input.size()) - r.timings.cached_prompt_tokens;
      r.timings.prompt_ms = ms_between(r.started, now);
    } else {
      r.timings.decode_tokens = r.generated;
      r.timings.decode_ms = ms_between(r.first_token, now);
    }
    if (token == p.eos_token) {
      settle(row);
      finish(request, ended(StopReason::kEos, r.timings), out);
      return;
    }
    ++r.generated;
    r.drawn.push_back(token);
    out.events.push_back([request, d = DrawnToken{token, drawn.logprobs[row]}, timings = r.timings] {
      if (request->events.on_token) request->events.on_token(d, timings);
    });
    const bool kept = row + 1 < rows && token == tokens[row + 1];
    if (kept && r.generated < r.limits.max_tokens) continue;
    settle(kept ? row + 1 : row);
    if (r.generated >= r.limits.max_tokens) {
      finish(request, ended(StopReason::kMaxTokens, r.timings), out);
      return;
    }
    const bool shifts = r.limits.shift_keep >= 0;
    // llama-server shifts once the context holds context - 1 tokens; without a shift it is full
    // when the next token has no place.
    if (r.session->position_ + 1 > runtime_.context_size() - (shifts ? 1 : 0)) {
      if (!shifts) {
        finish(request, ended(StopReason::kContextFull, r.timings), out);
        return;
      }
      try {
        r.discarded += r.session->shift_context(r.limits.shift_keep);
        r.timings.discarded_tokens = r.discarded;
      } catch (...) {
        finish(request, failed(std::current_exception()), out);
        return;
      }
    }
    r.pending = token;
    return;
  }
  // Every token drawn was a kept draft, and the draw after them failed.
  settle(drawn.tokens.size());
  finish(request, failed(drawn.error), out);
}

void Scheduler::finish(std::shared_ptr<Request> request, RequestEnd end, Outbox& out) {
  Request& r = *request;
  // A request that ran to its end leaves its states in the prompt-state cache before its owner
  // hears of the end, so the next prompt of any session finds them: a generation its last state
  // and its checkpoints' (store_in_cache), an evaluation its checkpoints' only (Session::checkpoint).
  // A cancelled one is stored by its owner, once it has set what the context keeps.
  const bool store = r.session->running_ == &r && end.reason != StopReason::kCancelled;
  if (r.admitted) {
    if (r.session->running_ == &r) r.session->running_ = nullptr;
    std::erase(active_, request);
  }
  r.pending = -1;
  if (end.reason == StopReason::kCancelled && !end.error) end.timings = r.timings;
  out.events.push_back([request = std::move(request), end = std::move(end), store]() mutable {
    if (store) {
      try {
        if (request->generating()) {
          request->session->store_in_cache();
        } else {
          request->session->store_checkpoints();
        }
      } catch (...) {
        end.reason = StopReason::kCancelled;
        end.error = std::current_exception();
      }
    }
    // The owner may dispose of everything and end the process once it hears of the end, so this
    // thread lets go of the request first: if that was the last reference to its session (or
    // runtime), they are torn down here, before the owner hears, never while the process exits.
    std::function<void(RequestEnd)> on_end = std::move(request->events.on_end);
    request.reset();
    if (on_end) on_end(std::move(end));
  });
}

}  // namespace bloomery::engine
