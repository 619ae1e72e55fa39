// Speculative decoding's pieces: what proposes drafts (n-grams of the context, a small draft
// model), and how wide a draft pays. The scheduler runs the loop (scheduler.cc): a generation's
// next pass evaluates its pending token and up to k drafted tokens, the session's sampler draws
// at each of those positions as it would without drafts, and the drafts are kept up to the first
// position where the draw differs; the rest are rolled back (the session's position moves back,
// and the next pass writes over their keys and values).
//
// Every source here proposes deterministic drafts (q one-hot), so "draw from the target's
// distribution p at the position, keep the draft when the draw equals it" is the standard
// rejection rule: the draft x is kept with probability p(x) = min(1, p(x) / q(x)), and a rejected
// position's draw is distributed as p without x, renormalized, which is norm(max(0, p - q)).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/forward.h"
#include "engine/kv_cache.h"
#include "model/model.h"

namespace bloomery::engine {

enum class DraftSource : uint8_t {
  kNone,
  kNgram,  // self-speculation: the tokens that followed the latest earlier occurrence of the context's last n-gram
  kModel,  // a small draft model with the target's vocabulary, drafting greedily
  kMtp,    // the model's own next-token-prediction layer, chained (engine/mtp_draft.h)
};
inline constexpr size_t kDraftSources = 4;
// "none", "ngram", "model", "mtp": the names src/ uses.
std::string_view draft_source_name(DraftSource source);

inline constexpr int32_t kDefaultDraftMax = 16;
// Verify passes are at most this wide (one pending token and the drafts).
inline constexpr int32_t kMaxDraft = 64;

struct DraftOptions {
  DraftSource source = DraftSource::kNone;
  int32_t max = kDefaultDraftMax;  // the most tokens drafted for one pass
  int32_t min = 0;                 // a proposal shorter than this is not verified (llama.cpp's --draft-min)
  float p_min = 0.0f;              // a model or MTP draft ends before a token its drafter gives less probability
  bool adaptive = true;            // the width follows measured cost and acceptance (DraftWidth); false: always max
  int32_t ngram_max = 4;           // the longest n-gram the ngram source looks up
  int32_t ngram_min = 2;           // the shortest
};

// Throws INVALID_ARGUMENT naming the first setting out of range (by its TypeScript name).
void validate(const DraftOptions& options);

// The tokens that followed the latest earlier occurrence of the last n tokens of `context`
// (n from ngram_max down to ngram_min, the longest that occurs), and after them what the same
// lookup finds for the context with them, at most `width` tokens in all.
std::vector<int32_t> ngram_draft(std::span<const int32_t> context, int32_t width, int32_t ngram_max, int32_t ngram_min);

// A drafter's greedy token from its logits: the most likely, or -1 when its probability is below p_min.
int32_t confident_draft_token(std::span<const float> logits, float p_min);

// Seconds of a forward pass by its rows: measured (a moving average per row count),
// interpolated linearly between widths measured, and beyond the widest measured 5% more per row
// (optimistic, so that drafts get tried, and each width is measured once it is used).
class PassCosts {
 public:
  static constexpr int64_t kTracked = kMaxDraft + 8;
  void record(int64_t rows, double seconds);
  double estimate(int64_t rows) const;

 private:
  std::array<double, kTracked + 1> seconds_{};  // 0: not measured
};

// A generation's running acceptance: the chance that a drafted token is kept given the one
// before it was, as a moving estimate that starts at one half.
class DraftAcceptance {
 public:
  // `accepted` of `drafted` tokens were kept.
  void record(int64_t drafted, int64_t accepted);
  double rate() const { return kept_ / tried_; }

 private:
  double kept_ = 1.0, tried_ = 2.0;
};

// The width whose verify pass gives the most tokens per second: with acceptance a, drafting k
// tokens delivers 1 + a + ... + a^k tokens in a pass of `other_rows` + k + 1 rows, after k
// drafting steps of `draft_token_seconds` each. 0: drafts do not pay. At most `limit`.
int32_t best_draft_width(const PassCosts& costs, double draft_token_seconds, double acceptance, int64_t other_rows,
                         int32_t limit);

// A draft model's sequence: its own keys and values and the tokens they hold.
struct DraftSequence {
  DraftSequence(const model::Model& model, int64_t capacity) : cache(model, capacity) {}
  KvCache cache;
  std::vector<int32_t> tokens;
};

// One sequence's draft request: continue `context` by up to `width` tokens into `drafted`.
struct DraftJob {
  DraftSequence* sequence = nullptr;
  std::span<const int32_t> context;
  int32_t width = 0;
  float p_min = 0.0f;
  std::vector<int32_t>* drafted = nullptr;
};

// A small model that drafts for a target of the same vocabulary, on the CPU. Its passes run on
// the target's scheduler thread, one row per drafting sequence per pass, so parallel sessions
// share them as they share the target's.
class DraftModel {
 public:
  // Throws DRAFT_VOCAB_MISMATCH when the vocabularies differ (size, special tokens or any
  // token's text), DRAFT_UNSUPPORTED for a draft model with sliding-window layers (whose caches
  // cannot be cut back to any position).
  DraftModel(std::unique_ptr<model::Model> model, const model::Model& target);

  const model::Model& model() const { return *model_; }
  std::unique_ptr<DraftSequence> new_sequence(int64_t capacity) const;

  // Evaluates what each job's sequence lacks of its context (keeping the prefix they share),
  // then drafts greedily; a job's draft ends before a token of probability below its p_min.
  void propose(std::span<DraftJob> jobs, int64_t step_tokens, cpu::ThreadPool& pool);

 private:
  std::unique_ptr<model::Model> model_;
  ForwardScratch scratch_;
  std::vector<float> logits_;
};

}  // namespace bloomery::engine
