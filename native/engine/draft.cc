#include "engine/draft.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "engine/prompt_cache.h"

namespace bloomery::engine {

std::string_view draft_source_name(DraftSource source) {
  switch (source) {
    case DraftSource::kNone:
      return "none";
    case DraftSource::kNgram:
      return "ngram";
    case DraftSource::kModel:
      return "model";
    case DraftSource::kMtp:
      return "mtp";
  }
  return "none";
}

void validate(const DraftOptions& o) {
  const auto refuse = [](const std::string& what) { throw Error("INVALID_ARGUMENT", what); };
  if (o.max < 0 || o.max > kMaxDraft) refuse("draft.max must be an integer from 0 to " + std::to_string(kMaxDraft));
  if (o.min < 0 || o.min > o.max) refuse("draft.min must be an integer from 0 to draft.max");
  if (!(o.p_min >= 0.0f && o.p_min <= 1.0f)) refuse("draft.pMin must be a number from 0 to 1");
  if (o.ngram_min < 1 || o.ngram_max < o.ngram_min || o.ngram_max > 64) {
    refuse("draft.ngramMin and draft.ngramMax must be integers with 1 <= ngramMin <= ngramMax <= 64");
  }
}

namespace {

// The tokens that followed the latest earlier occurrence of the context's last n-gram, at most `width`.
std::vector<int32_t> ngram_lookup(std::span<const int32_t> context, int64_t width, int32_t ngram_max,
                                  int32_t ngram_min) {
  const auto length = static_cast<int64_t>(context.size());
  for (int64_t n = std::min<int64_t>(ngram_max, length - 1); n >= ngram_min; --n) {
    const std::span<const int32_t> tail = context.subspan(static_cast<size_t>(length - n));
    // The latest occurrence that ends before the context does, so that a token follows it.
    for (int64_t start = length - n - 1; start >= 0; --start) {
      if (!std::equal(tail.begin(), tail.end(), context.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t take = std::min<int64_t>(width, length - from);
      return {context.begin() + from, context.begin() + from + take};
    }
  }
  return {};
}

}  // namespace

std::vector<int32_t> ngram_draft(std::span<const int32_t> context, int32_t width, int32_t ngram_max,
                                 int32_t ngram_min) {
  // A match close to the end leaves few tokens after it (a repeated line, a period of a few
  // tokens): the draft goes on by looking up its own end again.
  std::vector<int32_t> extended(context.begin(), context.end());
  const size_t drafted_from = extended.size();
  while (static_cast<int64_t>(extended.size() - drafted_from) < width) {
    const std::vector<int32_t> more =
        ngram_lookup(extended, width - static_cast<int64_t>(extended.size() - drafted_from), ngram_max, ngram_min);
    if (more.empty()) break;
    extended.insert(extended.end(), more.begin(), more.end());
  }
  return {extended.begin() + static_cast<ptrdiff_t>(drafted_from), extended.end()};
}

int32_t confident_draft_token(std::span<const float> logits, float p_min) {
  const auto best = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  if (p_min > 0) {
    double sum = 0;
    for (const float logit : logits) sum += std::exp(double(logit) - double(logits[best]));
    if (1.0 / sum < p_min) return -1;
  }
  return best;
}

void PassCosts::record(int64_t rows, double seconds) {
  if (rows < 1 || rows > kTracked || !(seconds > 0)) return;
  double& mean = seconds_[static_cast<size_t>(rows)];
  // A moving average that follows the passes' low envelope: other processes only ever add time
  // (and the first passes of a width run cold), so a faster pass moves it half way down, a slower
  // one an eighth of the way up, counting at most three times the mean.
  if (mean == 0) {
    mean = seconds;
  } else if (seconds < mean) {
    mean += (seconds - mean) / 2;
  } else {
    mean += (std::min(seconds, 3 * mean) - mean) / 8;
  }
}

double PassCosts::estimate(int64_t rows) const {
  rows = std::clamp<int64_t>(rows, 1, kTracked);
  const auto at = [&](int64_t r) { return seconds_[static_cast<size_t>(r)]; };
  if (at(rows) > 0) return at(rows);
  int64_t below = 0, above = 0;
  for (int64_t r = rows - 1; r >= 1 && !below; --r) {
    if (at(r) > 0) below = r;
  }
  for (int64_t r = rows + 1; r <= kTracked && !above; ++r) {
    if (at(r) > 0) above = r;
  }
  if (below && above) return at(below) + (at(above) - at(below)) * double(rows - below) / double(above - below);
  if (!below && !above) return 1.0 + 0.05 * double(rows - 1);  // nothing measured: relative units
  if (!below) return at(above);                                // narrower passes cost no more than a wider one
  // Beyond the widest measured, each row is taken to add 5% of it: optimistic, so that the width
  // grows and each new one is measured (a measured width is what it costs, however steep).
  return at(below) * (1.0 + 0.05 * double(rows - below));
}

void DraftAcceptance::record(int64_t drafted, int64_t accepted) {
  if (drafted <= 0) return;
  // Positions tried: each accepted one, and the first rejected when there was one.
  const double tried = double(std::min(drafted, accepted + 1));
  // Forget slowly, so that a generation's phases (quoting, then writing) move the estimate.
  constexpr double kKeep = 0.9;
  kept_ = kept_ * kKeep + double(accepted);
  tried_ = tried_ * kKeep + tried;
}

int32_t best_draft_width(const PassCosts& costs, double draft_token_seconds, double acceptance, int64_t other_rows,
                         int32_t limit) {
  int32_t best = 0;
  double best_rate = 1.0 / costs.estimate(other_rows + 1);
  double tokens = 1.0, power = 1.0;
  for (int32_t k = 1; k <= limit; ++k) {
    power *= acceptance;
    tokens += power;
    const double rate = tokens / (costs.estimate(other_rows + k + 1) + draft_token_seconds * k);
    if (rate > best_rate) {
      best = k;
      best_rate = rate;
    }
  }
  return best;
}

namespace {

void check_same_vocabulary(const model::Model& draft, const model::Model& target) {
  const model::HyperParams &d = draft.params, &t = target.params;
  const auto mismatch = [](const std::string& what) {
    throw Error("DRAFT_VOCAB_MISMATCH", "the draft model's vocabulary differs from the model's: " + what);
  };
  if (d.vocab != t.vocab) mismatch(std::to_string(d.vocab) + " tokens, not " + std::to_string(t.vocab));
  if (d.bos_token != t.bos_token || d.eos_token != t.eos_token) mismatch("other BOS or EOS tokens");
  const auto draft_tokens = draft.file.get_strings("tokenizer.ggml.tokens");
  const auto target_tokens = target.file.get_strings("tokenizer.ggml.tokens");
  if (!draft_tokens || !target_tokens || draft_tokens->size() != target_tokens->size()) {
    mismatch("tokenizer.ggml.tokens differs in length");
  }
  for (size_t i = 0; i < draft_tokens->size(); ++i) {
    if ((*draft_tokens)[i] != (*target_tokens)[i]) mismatch("token " + std::to_string(i) + " differs");
  }
}

}  // namespace

DraftModel::DraftModel(std::unique_ptr<model::Model> model, const model::Model& target) : model_(std::move(model)) {
  check_same_vocabulary(*model_, target);
  if (model::has_recurrent_layers(*model_)) {
    throw Error("DRAFT_UNSUPPORTED", "a draft model with recurrent layers (" + model_->params.architecture +
                                         ") cannot be rolled back to any position");
  }
  for (const model::LayerWeights& layer : model_->layers) {
    if (layer.attention.windowed) {
      throw Error("DRAFT_UNSUPPORTED", "a draft model with sliding-window layers (" + model_->params.architecture +
                                           ") cannot be rolled back to any position");
    }
  }
}

std::unique_ptr<DraftSequence> DraftModel::new_sequence(int64_t capacity) const {
  return std::make_unique<DraftSequence>(*model_, std::min(capacity, model_->params.context_length));
}

void DraftModel::propose(std::span<DraftJob> jobs, int64_t step_tokens, cpu::ThreadPool& pool) {
  const int64_t vocab = model_->params.vocab;
  struct Progress {
    size_t next = 0;    // the first context token the sequence's cache lacks
    bool done = false;  // drafted `width` tokens, or stopped
  };
  std::vector<Progress> progress(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    DraftJob& job = jobs[i];
    job.drafted->clear();
    const int64_t capacity = job.sequence->cache.capacity();
    // The whole context and the drafts but the last must fit the draft model's cache.
    job.width =
        static_cast<int32_t>(std::min<int64_t>(job.width, capacity - static_cast<int64_t>(job.context.size()) + 1));
    // The last context token is evaluated again when the cache holds it: its logits draft the first token.
    const auto kept = std::min<int64_t>(common_prefix(job.sequence->tokens, job.context),
                                        static_cast<int64_t>(job.context.size()) - 1);
    job.sequence->tokens.resize(static_cast<size_t>(kept));
    progress[i] = {static_cast<size_t>(kept), job.width <= 0};
  }
  std::vector<SequenceRows> batch;
  std::vector<size_t> in_batch;
  std::vector<std::vector<int32_t>> rows(jobs.size());
  for (;;) {
    batch.clear();
    in_batch.clear();
    int64_t budget = step_tokens;
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (progress[i].done) continue;
      const DraftJob& job = jobs[i];
      if (progress[i].next < job.context.size()) {
        if (budget <= 0) continue;
        const size_t take = std::min<size_t>(job.context.size() - progress[i].next, static_cast<size_t>(budget));
        rows[i].assign(job.context.begin() + static_cast<ptrdiff_t>(progress[i].next),
                       job.context.begin() + static_cast<ptrdiff_t>(progress[i].next + take));
      } else {
        rows[i] = {job.drafted->back()};
      }
      budget -= static_cast<int64_t>(rows[i].size());
      batch.push_back(
          {rows[i], static_cast<int64_t>(job.sequence->tokens.size()), &job.sequence->cache, LogitRows::kLast});
      in_batch.push_back(i);
    }
    if (batch.empty()) return;
    forward(*model_, batch, logits_, scratch_, pool);
    for (size_t b = 0; b < in_batch.size(); ++b) {
      const size_t i = in_batch[b];
      DraftJob& job = jobs[i];
      Progress& at = progress[i];
      job.sequence->tokens.insert(job.sequence->tokens.end(), rows[i].begin(), rows[i].end());
      if (at.next < job.context.size()) at.next += rows[i].size();
      if (at.next < job.context.size()) continue;
      const int32_t best =
          confident_draft_token(std::span(logits_.data() + b * static_cast<size_t>(vocab), vocab), job.p_min);
      if (best < 0) {
        at.done = true;
        continue;
      }
      job.drafted->push_back(best);
      // Nothing follows the end of the generation.
      at.done = static_cast<int32_t>(job.drafted->size()) >= job.width || best == model_->params.eos_token;
    }
  }
}

}  // namespace bloomery::engine
