#include "engine/scheduler.h"

#include <algorithm>
#include <atomic>
#include <iterator>
#include <string>

#include "base/error.h"

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
  int64_t max_tokens = 0;
  RequestEvents events;

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
  std::vector<float> logits;  // an evaluation's logits so far
  GenerationTimings timings;
  Clock::time_point started, first_token;

  bool generating() const { return sampler != nullptr; }
};

// The parts of one step's pass, in pass order.
struct Scheduler::Pass {
  struct Part {
    std::shared_ptr<Request> request;
    std::vector<int32_t> tokens;
    int64_t first_position = 0;
    bool decode = false;  // a generated token fed back
  };
  std::vector<Part> parts;
  std::exception_ptr error;
  double seconds = 0;
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

std::shared_ptr<Request> Scheduler::generate(std::shared_ptr<Session> session, std::vector<int32_t> prompt,
                                             std::shared_ptr<Sampler> sampler, int64_t max_tokens,
                                             RequestEvents events) {
  if (!sampler) throw Error("INVALID_ARGUMENT", "generate needs a sampler");
  if (max_tokens < 0) throw Error("INVALID_ARGUMENT", "maxTokens must be a non-negative integer");
  auto request = std::make_shared<Request>();
  request->session = std::move(session);
  request->input = std::move(prompt);
  request->sampler = std::move(sampler);
  request->max_tokens = max_tokens;
  request->events = std::move(events);
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
  const int64_t keep = kept_tokens <= 0 ? request.start_position
                                        : request.base + static_cast<int64_t>(request.input.size()) + kept_tokens - 1;
  Session& session = *request.session;
  session.position_ = std::min(session.position_.load(), keep);
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
             r.generating() ? ended(StopReason::kContextFull)
                            : failed(std::make_exception_ptr(
                                  Error("CONTEXT_TOO_LONG", std::to_string(end) + " tokens do not fit the context of " +
                                                                std::to_string(context) + " tokens"))),
             out);
      continue;
    }
    if (r.generating() && r.max_tokens == 0) {
      finish(request, ended(StopReason::kMaxTokens), out);
      continue;
    }
    if (r.generating()) {
      try {
        const PromptReuse reuse = session.prepare_prompt(r.input);
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

// The first checkpoint after position `from` of a prompt of `end` tokens: end - kCheckpointSpacing
// * 2^i for the largest i that leaves one after `from`, else the end.
int64_t next_checkpoint(int64_t end, int64_t from) {
  int64_t next = end;
  for (int64_t gap = kCheckpointSpacing; end - gap > from; gap *= 2) next = end - gap;
  return next;
}

}  // namespace

void Scheduler::plan(Pass& pass) {
  int64_t budget = runtime_.step_tokens();
  for (const auto& r : active_) {
    if (r->pending < 0) continue;
    pass.parts.push_back({r, {r->pending}, r->session->position_, true});
    --budget;
  }
  for (const auto& r : active_) {
    if (budget <= 0) break;
    const auto remaining = static_cast<int64_t>(r->input.size() - r->evaluated);
    if (remaining == 0) continue;
    int64_t take = std::min(remaining, budget);
    // With recurrent layers, a prompt's passes end on its checkpoints (stored in commit).
    if (r->generating() && r->session->recurrent()) {
      const auto at = static_cast<int64_t>(r->evaluated);
      take = std::min(take, next_checkpoint(static_cast<int64_t>(r->input.size()), at) - at);
    }
    const auto first = r->input.begin() + static_cast<ptrdiff_t>(r->evaluated);
    pass.parts.push_back({r, std::vector<int32_t>(first, first + take), r->session->position_, false});
    budget -= take;
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
    if (runtime_.gpu_) {
      std::vector<GpuSequenceRows> batch;
      batch.reserve(pass.parts.size());
      for (const Pass::Part& part : pass.parts) {
        const Request& r = *part.request;
        batch.push_back(
            {r.session->gpu_.get(), part.tokens, part.first_position, r.generating() ? LogitRows::kLast : r.rows});
      }
      gpu_forward(*runtime_.gpu_, batch, logits_);
    } else {
      std::vector<SequenceRows> batch;
      batch.reserve(pass.parts.size());
      for (const Pass::Part& part : pass.parts) {
        const Request& r = *part.request;
        r.session->begin_pass();
        batch.push_back(
            {part.tokens, part.first_position, &r.session->cache_, r.generating() ? LogitRows::kLast : r.rows});
      }
      forward(runtime_.model(), batch, logits_, scratch_, runtime_.pool_, runtime_.arena_.get());
    }
    const bool prompt =
        std::any_of(pass.parts.begin(), pass.parts.end(), [](const Pass::Part& p) { return !p.decode; });
    runtime_.residency_->after_step(scratch_.routed, prompt);
    for (const Pass::Part& part : pass.parts) part.request->session->record(part.first_position, part.tokens);
  } catch (...) {
    pass.error = std::current_exception();
  }
  pass.seconds = std::chrono::duration<double>(Clock::now() - started).count();
}

void Scheduler::commit(Pass& pass, Outbox& out) {
  if (pass.parts.empty()) return;  // every part was cancelled before the pass began
  const model::HyperParams& p = runtime_.model().params;
  bool prompt_rows = false, decode_rows = false;
  for (const Pass::Part& part : pass.parts) {
    const auto n = static_cast<int64_t>(part.tokens.size());
    (part.decode ? stats_.decode_tokens : stats_.prompt_tokens) += n;
    (part.decode ? decode_rows : prompt_rows) = true;
    stats_.rows += n;
  }
  ++stats_.passes;
  stats_.sequence_rows += static_cast<int64_t>(pass.parts.size());
  if (prompt_rows) stats_.prompt_seconds += pass.seconds;
  if (decode_rows) stats_.decode_seconds += pass.seconds;

  size_t logit_row = 0;
  for (const Pass::Part& part : pass.parts) {
    Request& r = *part.request;
    const auto n = static_cast<int64_t>(part.tokens.size());
    const bool all_rows = !r.generating() && r.rows == LogitRows::kAll;
    const size_t rows = all_rows ? static_cast<size_t>(n) : 1;
    const float* logits = logits_.data() + logit_row * static_cast<size_t>(p.vocab);
    logit_row += rows;
    if (r.cancelled) continue;  // ended at the next step; cancel() has set the position
    if (pass.error) {
      Session& session = *r.session;
      session.position_ = r.start_position;
      finish(part.request, failed(pass.error), out);
      continue;
    }
    r.session->position_ = part.first_position + n;
    if (!part.decode) r.evaluated += static_cast<size_t>(n);
    if (!part.decode && r.generating() && r.session->recurrent()) {
      const auto end = static_cast<int64_t>(r.input.size()), at = static_cast<int64_t>(r.evaluated);
      if (next_checkpoint(end, at - 1) == at) r.session->store_in_cache();
    }
    if (all_rows) r.logits.insert(r.logits.end(), logits, logits + rows * p.vocab);
    if (r.evaluated < r.input.size()) continue;  // more of the prompt next step

    if (!r.generating()) {
      RequestEnd done = ended(StopReason::kDone);
      done.logits = all_rows ? std::move(r.logits) : std::vector<float>(logits, logits + p.vocab);
      finish(part.request, std::move(done), out);
      continue;
    }
    const int32_t fed = part.decode ? part.tokens.front() : -1;
    r.pending = -1;
    if (r.sampler->constrained()) {
      draw_elsewhere(part.request, fed, logits);
    } else {
      draw_inline(part.request, fed, logits, out);
    }
  }
}

namespace {

// Draws a generation's next token from its row of logits. The sampler's history: the whole
// prompt once it is in (`fed` -1), then each token fed back (`fed`), which also moves its grammar on.
int32_t draw(Request& r, int32_t fed, std::span<const float> logits) {
  if (fed >= 0) {
    r.sampler->accept(fed);
  } else {
    r.sampler->accept_prompt(r.input);
  }
  return r.sampler->sample(logits);
}

}  // namespace

void Scheduler::draw_inline(const std::shared_ptr<Request>& request, int32_t fed, const float* logits, Outbox& out) {
  const auto vocab = static_cast<size_t>(runtime_.model().params.vocab);
  int32_t token = -1;
  try {
    token = draw(*request, fed, std::span<const float>(logits, vocab));
  } catch (...) {
    finish(request, failed(std::current_exception()), out);
    return;
  }
  deliver(request, token, out);
}

void Scheduler::draw_elsewhere(const std::shared_ptr<Request>& request, int32_t fed, const float* logits) {
  const auto vocab = static_cast<size_t>(runtime_.model().params.vocab);
  request->drawing = true;
  Draw job;
  job.request = request;
  job.logits.assign(logits, logits + vocab);
  job.fed = fed;
  draws_.push_back(std::move(job));
  if (!drawer_.joinable()) drawer_ = std::thread([this] { run_draws(); });
  draw_wake_.notify_one();
}

// The drawing thread: one draw at a time, without the lock, each handed back whole (the request
// with it) for the scheduler thread to deliver.
void Scheduler::run_draws() {
  std::unique_lock lock(mutex_);
  for (;;) {
    draw_wake_.wait(lock, [&] { return stopping_ || !draws_.empty(); });
    if (stopping_) return;
    Draw job = std::move(draws_.front());
    draws_.pop_front();
    lock.unlock();
    // A request cancelled meanwhile is retired by the scheduler thread: its draw is skipped.
    if (!job.request->cancelled) {
      try {
        job.token = draw(*job.request, job.fed, job.logits);
      } catch (...) {
        job.error = std::current_exception();
      }
    }
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
    if (job.error) {
      finish(job.request, failed(job.error), out);
    } else {
      deliver(job.request, job.token, out);
    }
  }
}

void Scheduler::deliver(const std::shared_ptr<Request>& request, int32_t token, Outbox& out) {
  Request& r = *request;
  const model::HyperParams& p = runtime_.model().params;
  const Clock::time_point now = Clock::now();
  if (r.generated == 0) {
    r.first_token = now;
    r.timings.prompt_tokens = static_cast<int64_t>(r.input.size()) - r.timings.cached_prompt_tokens;
    r.timings.prompt_ms = ms_between(r.started, now);
  } else {
    r.timings.decode_tokens = r.generated;
    r.timings.decode_ms = ms_between(r.first_token, now);
  }
  if (token == p.eos_token) {
    finish(request, ended(StopReason::kEos, r.timings), out);
    return;
  }
  ++r.generated;
  out.events.push_back([request, drawn = DrawnToken{token, r.sampler->last_logprobs()}, timings = r.timings] {
    if (request->events.on_token) request->events.on_token(drawn, timings);
  });
  if (r.generated >= r.max_tokens) {
    finish(request, ended(StopReason::kMaxTokens, r.timings), out);
  } else if (r.session->position_ + 1 > runtime_.context_size()) {
    finish(request, ended(StopReason::kContextFull, r.timings), out);
  } else {
    r.pending = token;
  }
}

void Scheduler::finish(std::shared_ptr<Request> request, RequestEnd end, Outbox& out) {
  Request& r = *request;
  // A generation that ran to its end leaves its state in the prompt-state cache before its
  // owner hears of the end, so the next prompt of any session finds it. A cancelled one is
  // stored by its owner, once it has set what the context keeps.
  const bool store = r.generating() && r.session->running_ == &r && end.reason != StopReason::kCancelled;
  if (r.admitted) {
    if (r.session->running_ == &r) r.session->running_ = nullptr;
    std::erase(active_, request);
  }
  r.pending = -1;
  if (end.reason == StopReason::kCancelled && !end.error) end.timings = r.timings;
  out.events.push_back([request = std::move(request), end = std::move(end), store]() mutable {
    if (store) {
      try {
        request->session->store_in_cache();
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
