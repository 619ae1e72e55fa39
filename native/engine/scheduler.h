// Continuous batching: one thread per model runs every forward pass. Sessions submit requests
// (tokens to evaluate, or a prompt to evaluate and then tokens to generate); each step takes
// the next tokens of every running request into one pass: one row per decoding sequence, then
// prompt chunks up to the model's step budget, so a long prompt never holds the streams up by
// more than one bounded pass. At most `parallel` requests run together; later ones wait in
// the order they came (a session's requests run one at a time, in order). A GPU model's step
// is one gpu_forward pass over the same parts.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/draft.h"
#include "engine/forward.h"
#include "engine/sampler.h"
#include "engine/session.h"

namespace bloomery::engine {

// Why a request ended.
enum class StopReason : uint8_t {
  kDone,         // an evaluation: its tokens are in the context
  kEos,          // the end-of-sequence token was drawn (it is not delivered)
  kMaxTokens,    // max_tokens were delivered
  kContextFull,  // the next token does not fit the context
  kCancelled,    // cancel(), or an error (RequestEnd::error)
};
// "done", "eos", "maxTokens", "contextFull", "abort": the names src/session.ts uses.
std::string_view stop_reason_name(StopReason reason);

// Where a generation's time went; wall-clock time, shared passes included.
struct GenerationTimings {
  int64_t prompt_tokens = 0;         // prompt tokens this request evaluated
  int64_t cached_prompt_tokens = 0;  // prompt tokens the context held already (Session::prepare_prompt)
  bool prompt_cache_hit = false;     // they were restored from the prompt-state cache
  double prompt_ms = 0;              // from the request's start to its first token
  int64_t decode_tokens = 0;         // generated tokens fed back and evaluated
  double decode_ms = 0;              // from the first token to the latest
  int64_t discarded_tokens = 0;      // tokens a context shift dropped (GenerationLimits::shift_keep)
  int64_t draft_tokens = 0;          // tokens drafted and verified (engine/draft.h)
  int64_t draft_accepted = 0;        // of them, the tokens the sampler drew too: each is a token without a pass
};

// What bounds a generation besides its sampler.
struct GenerationLimits {
  int64_t max_tokens = 0;
  // Negative: a full context ends the generation (kContextFull). Else a context with no room for
  // the next token is shifted (Session::shift_context) keeping its first shift_keep tokens, as
  // llama-server's --context-shift does (it shifts once the context holds context - 1 tokens).
  int64_t shift_keep = -1;
  // False: the whole prompt is evaluated, nothing of it taken from the session's context or the
  // prompt-state cache (llama-server's cache_prompt: false; see Session::prepare_prompt).
  bool reuse_prefix = true;
};

struct RequestEnd {
  StopReason reason = StopReason::kDone;
  GenerationTimings timings;
  std::vector<float> logits;  // an evaluation's logits (its LogitRows), or an embedding's pooled rows
  std::exception_ptr error;   // set: the request failed (reason kCancelled); the context is as before it, or
                              // holds the whole generation when storing it in the prompt-state cache failed
};

// A token a generation delivers.
struct DrawnToken {
  int32_t token = -1;
  std::optional<DrawLogprobs> logprobs;  // set when the sampler reports log-probabilities (SamplerParams::logprobs)
};

// What the scheduler tells a request's owner, on the scheduler thread, without holding its
// lock: the handlers may call cancel() but must not block.
struct RequestEvents {
  std::function<void(const DrawnToken& drawn, const GenerationTimings& timings)> on_token;  // generations only
  std::function<void(RequestEnd end)> on_end;                                               // exactly once
};

class Request;

// What a generation drew from its part's rows: a token per row up to the first that differs from
// the draft after it (or the end-of-sequence token, or as many as max_tokens leaves).
struct DrawnRows {
  std::vector<int32_t> tokens;
  std::vector<std::optional<DrawLogprobs>> logprobs;  // each token's
  std::exception_ptr error;                           // set: the draw after the last token failed
};

struct SchedulerStats {
  int64_t prompt_tokens = 0;  // rows of submitted tokens (prompts, evaluations) run
  int64_t decode_tokens = 0;  // rows of generated tokens fed back and kept (rejected drafts not counted)
  double prompt_seconds = 0;  // wall time of the passes that had prompt rows
  double decode_seconds = 0;  // wall time of the passes that had decode rows (a mixed pass counts for both)
  int64_t passes = 0;
  int64_t decode_passes = 0;   // passes that had decode rows: decode_tokens / decode_passes is the tokens per pass
  int64_t draft_tokens = 0;    // tokens drafted and verified
  int64_t draft_accepted = 0;  // of them, the tokens kept
  int64_t draft_passes = 0;    // generations' passes that verified drafts (one per generation and pass)
  int64_t rows = 0;            // rows over all passes
  int64_t sequence_rows = 0;   // sequences over all passes: sequence_rows / passes is the mean batch width
  int64_t widest_pass = 0;     // the most sequences one pass has held
  int64_t active = 0;          // requests running now
  int64_t waiting = 0;         // requests waiting for a place
};

class Scheduler : public std::enable_shared_from_this<Scheduler> {
 public:
  // Starts the thread. The runtime outlives every pass: requests hold their sessions, which hold it.
  static std::shared_ptr<Scheduler> start(Runtime& runtime);
  // Stops the thread once no request is left (the runtime's destructor calls it).
  void stop();

  // Appends `tokens` to the session's context; on_end gets the logits after the last one, or
  // after each with LogitRows::kAll. Throws INVALID_ARGUMENT for no tokens or a token outside
  // the vocabulary; the request ends with CONTEXT_TOO_LONG when they do not fit the context.
  std::shared_ptr<Request> evaluate(std::shared_ptr<Session> session, std::vector<int32_t> tokens, LogitRows rows,
                                    RequestEvents events);

  // Appends `tokens` to the session's context as evaluate() does, keeping each row's hidden state
  // after the output norm instead of logits; on_end gets them pooled by `pooling` (pool() in
  // engine/pooling.h) in RequestEnd::logits. Throws like evaluate(), NOT_A_RERANKER as
  // check_pooling, and UNSUPPORTED_FEATURE on a model that runs on the GPU (whose pass returns logits only).
  std::shared_ptr<Request> embed(std::shared_ptr<Session> session, std::vector<int32_t> tokens, model::Pooling pooling,
                                 RequestEvents events);

  // Makes `prompt` the session's context, evaluating only what the context or the prompt-state
  // cache does not hold of it already (Session::prepare_prompt, when the request is admitted),
  // then draws up to `limits.max_tokens` tokens with `sampler` (which sees the prompt and every drawn
  // token), feeding each back, until the end-of-sequence token or a full context (or, with
  // limits.shift_keep, shifting it). The last token delivered is not evaluated. Throws like
  // evaluate(). A prompt longer than the context ends with CONTEXT_TOO_LONG, and a max_tokens of 0
  // with kMaxTokens, the context untouched. A
  // generation that ends by itself (eos, max_tokens, a full context) stores the session's state
  // in the prompt-state cache before on_end. With `draft`, each pass also verifies the tokens
  // its source drafts (engine/draft.h); the tokens drawn are the same as without. Throws
  // DRAFT_UNSUPPORTED for model drafts without a draft model, for MTP drafts as
  // check_mtp_drafts, and INVALID_ARGUMENT for draft settings out of range.
  std::shared_ptr<Request> generate(std::shared_ptr<Session> session, std::vector<int32_t> prompt,
                                    std::shared_ptr<Sampler> sampler, GenerationLimits limits, RequestEvents events,
                                    const DraftOptions& draft = {});

  // Ends the request at once: it leaves the next pass, its owner gets on_end(kCancelled), and
  // the session keeps the prompt and the first `kept_tokens - 1` generated tokens (the tokens
  // the owner took, less the last, as if it had stopped there), or nothing of the request when
  // kept_tokens is 0 (a generation keeps the prefix of its prompt that the context held when
  // it was admitted). A pass already running finishes, but its results are dropped; a pass
  // planned but not begun leaves the request out, so once cancel() returns the session's keys
  // and values up to its position stay as they are (save, restore and fork rely on it).
  void cancel(Request& request, int64_t kept_tokens);
  // Cancels every request of the session (it is being disposed).
  void cancel_all(const Session& session);

  // Forgets the session's tokens (without storing them in the prompt-state cache).
  // INVALID_ARGUMENT while one of its requests runs.
  void reset(Session& session);

  SchedulerStats stats() const;

  explicit Scheduler(Runtime& runtime);
  ~Scheduler();

 private:
  struct Pass;
  struct Outbox;

  std::shared_ptr<Request> submit(std::shared_ptr<Request> request);
  void run();
  bool has_work() const;
  void retire_cancelled(Outbox& out);
  void admit(Outbox& out);
  void plan(Pass& pass);
  int32_t draft_width(const Request& r, int64_t other_rows, int64_t budget) const;
  void draft(Pass& pass);
  void execute(Pass& pass);
  void keep_hidden_states(Pass& pass);
  void commit(Pass& pass, Outbox& out);
  void draw_elsewhere(const std::shared_ptr<Request>& request, std::span<const int32_t> tokens, bool decode,
                      const float* logits);
  void run_draws();
  void collect_draws(Outbox& out);
  // Delivers the tokens a generation drew from its part's rows (one per decode token, one for a
  // prompt's last chunk), keeping the drafts up to the first draw that differs.
  void deliver(const std::shared_ptr<Request>& request, std::span<const int32_t> tokens, bool decode, DrawnRows drawn,
               Outbox& out);
  void finish(std::shared_ptr<Request> request, RequestEnd end, Outbox& out);
  void cancel_locked(Request& request, int64_t kept_tokens);

  Runtime& runtime_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Request>> waiting_;
  std::vector<std::shared_ptr<Request>> active_;
  SchedulerStats stats_;
  // Only the scheduler thread reads and writes these: the cost of the model's passes by rows, and
  // per source the seconds it takes per drafted token (0: none, or not measured yet).
  PassCosts costs_;
  std::array<double, kDraftSources> draft_token_seconds_{};
  bool stopping_ = false;
  std::thread thread_;
  // Grammar-constrained draws run on a thread of their own, so that one request's grammar never
  // holds up the passes of the others (its request waits out of the passes meanwhile).
  struct Draw {
    std::shared_ptr<Request> request;
    std::vector<int32_t> tokens;  // its part's: the token fed back, then the drafts (a prompt chunk: not read)
    bool decode = false;          // a decode part (else the prompt's last chunk)
    std::vector<float> logits;    // its rows of the pass, copied: the next pass reuses logits_
    DrawnRows drawn;
  };
  std::deque<Draw> draws_;             // for the drawing thread, in order
  std::vector<Draw> drawn_;            // done, for the scheduler thread to deliver
  std::condition_variable draw_wake_;  // draws_ has one, or stopping_
  std::thread drawer_;                 // started with the first constrained draw
  ForwardScratch scratch_;
  std::vector<float> logits_;
};

}  // namespace bloomery::engine
