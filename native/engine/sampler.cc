#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "base/error.h"
#include "engine/grammar.h"

namespace bloomery::engine {

namespace {

[[noreturn]] void refuse(const std::string& message) { throw Error("INVALID_ARGUMENT", message); }

// Most likely first; equal logits by token id, so every order the filters see is deterministic.
bool more_likely(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

void validate(const SamplerParams& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) refuse("temperature must be a finite number >= 0");
  if (p.top_k < 0) refuse("topK must be an integer >= 0 (0: no limit)");
  if (!(p.top_p >= 0.0f && p.top_p <= 1.0f)) refuse("topP must be between 0 and 1");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) refuse("minP must be between 0 and 1");
  if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty)) {
    refuse("repeatPenalty must be a finite number > 0");
  }
  if (p.repeat_last_n < -1) refuse("repeatLastN must be -1 (all tokens), 0 (off) or a count of tokens");
  if (!std::isfinite(p.presence_penalty)) refuse("presencePenalty must be a finite number");
  if (!std::isfinite(p.frequency_penalty)) refuse("frequencyPenalty must be a finite number");
  for (const auto& [token, bias] : p.logit_bias) {
    if (token < 0) refuse("logitBias names token " + std::to_string(token) + ", which is not a token id");
    if (std::isnan(bias) || bias == std::numeric_limits<float>::infinity()) {
      refuse("logitBias of token " + std::to_string(token) + " must be a finite number or -Infinity");
    }
  }
  if (p.logprobs < -1) refuse("logprobs must be a count of alternatives >= 0 (or -1: off)");
}

Xoshiro256::Xoshiro256(uint64_t seed) {
  for (uint64_t& word : s_) word = splitmix64(seed);
}

uint64_t Xoshiro256::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Xoshiro256::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

Sampler::Sampler(SamplerParams params, std::shared_ptr<const tokenizer::Tokenizer> tokenizer)
    : params_(std::move(params)), rng_(params_.seed), tokenizer_(std::move(tokenizer)) {
  validate(params_);
  if (!params_.grammar.empty()) {
    if (!tokenizer_) refuse("a grammar needs the model's tokenizer, for the bytes of each token");
    grammar_.emplace(std::make_shared<const Grammar>(parse_grammar(params_.grammar, tokenizer_.get())));
    awaiting_trigger_ = !params_.grammar_triggers.empty();
  } else if (!params_.grammar_triggers.empty()) {
    refuse("grammar triggers need a grammar");
  }
  for (const std::string& trigger : params_.grammar_triggers) {
    if (trigger.empty()) refuse("a grammar trigger must not be empty");
    std::vector<uint32_t> ids;
    try {
      ids = tokenizer_->tokenize(trigger, false, true);
    } catch (const Error&) {
      // A word the vocabulary cannot spell is no token of it: it stays a word.
    }
    if (ids.size() == 1 && tokenizer_->piece(ids[0], false).empty()) {
      trigger_tokens_.push_back(static_cast<int32_t>(ids[0]));
    }
  }
}

void Sampler::watch_for_trigger(std::string_view piece) {
  trigger_tail_ += piece;
  size_t first = std::string::npos, longest = 0;
  for (const std::string& trigger : params_.grammar_triggers) {
    first = std::min(first, trigger_tail_.find(trigger));
    longest = std::max(longest, trigger.size());
  }
  if (first == std::string::npos) {
    // Only the end that could begin a trigger matters for the next token.
    if (trigger_tail_.size() >= longest) trigger_tail_.erase(0, trigger_tail_.size() - (longest - 1));
    return;
  }
  awaiting_trigger_ = false;
  const std::string constrained = trigger_tail_.substr(first);
  trigger_tail_.clear();
  if (!grammar_->allows(constrained)) {
    throw Error("GRAMMAR_INVALID", "the text from the grammar's trigger on does not begin a sentence of the grammar");
  }
  grammar_->advance(constrained);
}

void Sampler::accept_prompt(std::span<const int32_t> tokens) {
  history_.insert(history_.end(), tokens.begin(), tokens.end());
}

void Sampler::accept(int32_t token) {
  if (grammar_ && !is_end_token(token)) {
    if (token < 0 || static_cast<size_t>(token) >= tokenizer_->vocab().size()) {
      refuse("token " + std::to_string(token) + " is outside the vocabulary");
    }
    const std::string_view piece = tokenizer_->piece(static_cast<uint32_t>(token), false);
    if (awaiting_trigger_ &&
        std::find(trigger_tokens_.begin(), trigger_tokens_.end(), token) != trigger_tokens_.end()) {
      awaiting_trigger_ = false;
      trigger_tail_.clear();
      if (!grammar_->allows_token(token, piece)) {
        throw Error("GRAMMAR_INVALID", "the grammar does not begin with its trigger token " + std::to_string(token));
      }
      grammar_->advance_token(token, piece);
    } else if (awaiting_trigger_) {
      watch_for_trigger(piece);
    } else {
      grammar_->advance_token(token, piece);
    }
  }
  history_.push_back(token);
}

bool Sampler::is_end_token(int32_t token) const {
  const tokenizer::Vocab& v = tokenizer_->vocab();
  return token == v.eos || token == v.eot;
}

// The end of generation only where the grammar is complete; other tokens of the vocabulary by
// their text or, at a token terminal, by their id (a control token has no text: only a terminal
// takes it); rows past the vocabulary never. The candidates are checked together: one step of the
// grammar serves all.
void Sampler::keep_grammar_candidates() {
  const size_t vocab = tokenizer_->vocab().size();
  const bool complete = grammar_->complete();
  // The candidates the grammar judges (not end tokens, not past the vocabulary), by index into `of`.
  std::vector<int32_t> tokens;
  std::vector<std::string_view> texts;
  const auto judged = [&](const auto& of, auto token_of) {
    tokens.clear();
    texts.clear();
    std::vector<size_t> where;
    for (size_t i = 0; i < of.size(); ++i) {
      const int32_t token = token_of(of, i);
      if (is_end_token(token) || token < 0 || static_cast<size_t>(token) >= vocab) continue;
      where.push_back(i);
      tokens.push_back(token);
      texts.push_back(tokenizer_->piece(static_cast<uint32_t>(token), false));
    }
    return where;
  };
  const std::vector<size_t> where =
      judged(candidates_, [](const std::vector<Candidate>& c, size_t i) { return c[i].token; });
  const std::vector<bool> allowed = grammar_->allows_each(tokens, texts);
  std::vector<bool> keep(candidates_.size(), false);
  for (size_t i = 0; i < candidates_.size(); ++i) keep[i] = is_end_token(candidates_[i].token) && complete;
  for (size_t k = 0; k < where.size(); ++k) keep[where[k]] = allowed[k];
  std::vector<Candidate> kept;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (keep[i]) kept.push_back(candidates_[i]);
  }
  candidates_ = std::move(kept);
  if (!candidates_.empty()) {
    double total = 0.0;
    for (const Candidate& c : candidates_) total += c.probability;
    for (Candidate& c : candidates_) c.probability = static_cast<float>(c.probability / total);
    return;
  }
  // The filters kept nothing the grammar allows: mask the vocabulary, then filter again.
  constexpr float kBanned = -std::numeric_limits<float>::infinity();
  std::vector<size_t> open;  // the rows not banned yet
  for (size_t i = 0; i < adjusted_.size(); ++i) {
    if (adjusted_[i] != kBanned) open.push_back(i);
  }
  const std::vector<size_t> open_judged =
      judged(open, [](const std::vector<size_t>& rows, size_t i) { return static_cast<int32_t>(rows[i]); });
  const std::vector<bool> each = grammar_->allows_each(tokens, texts);
  std::vector<bool> allow(open.size(), false);
  for (size_t i = 0; i < open.size(); ++i) allow[i] = is_end_token(static_cast<int32_t>(open[i])) && complete;
  for (size_t k = 0; k < open_judged.size(); ++k) allow[open_judged[k]] = each[k];
  for (size_t i = 0; i < open.size(); ++i) {
    if (!allow[i]) adjusted_[open[i]] = kBanned;
  }
  filter_candidates();
  if (candidates_.empty()) {
    throw Error("GRAMMAR_INVALID", "no token of the vocabulary that logitBias leaves can continue the grammar here");
  }
}

void Sampler::find_changes(std::span<const float> logits) {
  std::map<int32_t, float> changed;
  const auto vocab = static_cast<int64_t>(logits.size());
  for (const auto& [token, bias] : params_.logit_bias) {
    if (token >= vocab) {
      refuse("logitBias names token " + std::to_string(token) + ", outside the vocabulary of " + std::to_string(vocab));
    }
    changed.try_emplace(token, logits[static_cast<size_t>(token)]).first->second += bias;
  }

  const SamplerParams& p = params_;
  const bool penalize = p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  if (penalize && p.repeat_last_n != 0 && !history_.empty()) {
    const size_t window =
        p.repeat_last_n < 0 ? history_.size() : std::min(history_.size(), static_cast<size_t>(p.repeat_last_n));
    std::vector<int32_t> recent(history_.end() - static_cast<ptrdiff_t>(window), history_.end());
    std::sort(recent.begin(), recent.end());
    for (size_t i = 0; i < recent.size();) {
      size_t j = i;
      while (j < recent.size() && recent[j] == recent[i]) ++j;
      const int32_t token = recent[i];
      const auto count = static_cast<float>(j - i);
      i = j;
      if (token < 0 || token >= vocab) continue;
      // The repeat penalty shrinks a logit toward "less likely" whatever its sign (llama.cpp's rule).
      float& logit = changed.try_emplace(token, logits[static_cast<size_t>(token)]).first->second;
      logit = logit <= 0.0f ? logit * p.repeat_penalty : logit / p.repeat_penalty;
      logit -= count * p.frequency_penalty + p.presence_penalty;
    }
  }
  changes_.assign(changed.begin(), changed.end());
}

void Sampler::apply_changes(std::span<const float> logits) {
  adjusted_.assign(logits.begin(), logits.end());
  for (const auto& [token, logit] : changes_) adjusted_[static_cast<size_t>(token)] = logit;
}

// Greedy: the most likely token of the logits unchanged (the first of equals; NaN never wins),
// found without copying the vocabulary, when no token of changes_ beats it (a token they
// changed may not win here either: then the full path decides).
bool Sampler::greedy_without_copy(std::span<const float> logits) {
  constexpr float kNone = -std::numeric_limits<float>::infinity();
  constexpr size_t kLanes = 16;  // independent maxima, each with where it first occurs, so the loop vectorizes
  float lane_max[kLanes];
  int32_t lane_at[kLanes];
  std::fill(lane_max, lane_max + kLanes, kNone);
  std::fill(lane_at, lane_at + kLanes, -1);
  const size_t whole = logits.size() / kLanes * kLanes;
  for (size_t i = 0; i < whole; i += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) {
      const bool above = logits[i + l] > lane_max[l];
      lane_max[l] = above ? logits[i + l] : lane_max[l];
      lane_at[l] = above ? static_cast<int32_t>(i + l) : lane_at[l];
    }
  }
  // The largest value, at the first place it occurs: each lane holds its first occurrence, so
  // the lowest such place among the lanes that hold it.
  float best = kNone;
  int32_t winner = -1;
  for (size_t l = 0; l < kLanes; ++l) {
    if (lane_max[l] > best || (lane_max[l] == best && lane_at[l] < winner)) {
      best = lane_max[l];
      winner = lane_at[l];
    }
  }
  for (size_t i = whole; i < logits.size(); ++i) {
    if (logits[i] > best) {
      best = logits[i];
      winner = static_cast<int32_t>(i);
    }
  }
  if (best == kNone) return false;
  for (const auto& [token, logit] : changes_) {
    if (token == winner || logit > best || (logit == best && token < winner)) return false;
  }
  candidates_.assign(1, {winner, best, 1.0f});
  sorted_ = true;
  return true;
}

// The candidates top-k leaves, as keeping every finite logit then the k most likely would (most
// likely first; all of them in token order when there are no more than k). One pass with the k
// best so far in a heap whose root is the least likely of them, so that almost every token of a
// large vocabulary costs one comparison with that root, rather than a candidate of its own and
// a selection over all of them (1.5 ms per draw over 152k logits, half a GPU decode step).
void Sampler::take_top_k() {
  const auto k = static_cast<size_t>(params_.top_k);
  const auto finite = [](float logit) { return logit > -std::numeric_limits<float>::infinity(); };
  size_t count = 0;
  float floor = -std::numeric_limits<float>::infinity();  // the root's logit once the heap holds k
  for (size_t i = 0; i < adjusted_.size(); ++i) {
    const float logit = adjusted_[i];
    if (!finite(logit)) continue;
    ++count;
    // Later tokens lose ties (more_likely): equal to the root's logit is less likely than the root.
    if (candidates_.size() == k && logit <= floor) continue;
    const Candidate c{static_cast<int32_t>(i), logit, 0.0f};
    if (candidates_.size() == k) {
      std::pop_heap(candidates_.begin(), candidates_.end(), more_likely);
      candidates_.back() = c;
    } else {
      candidates_.push_back(c);
    }
    std::push_heap(candidates_.begin(), candidates_.end(), more_likely);
    if (candidates_.size() == k) floor = candidates_.front().logit;
  }
  if (count <= k) {
    candidates_.clear();
    for (size_t i = 0; i < adjusted_.size(); ++i) {
      if (finite(adjusted_[i])) candidates_.push_back({static_cast<int32_t>(i), adjusted_[i], 0.0f});
    }
    return;
  }
  std::sort_heap(candidates_.begin(), candidates_.end(), more_likely);
  sorted_ = true;
}

void Sampler::keep_top_p() {
  if (params_.top_p >= 1.0f) return;
  if (!sorted_) std::sort(candidates_.begin(), candidates_.end(), more_likely);
  sorted_ = true;
  // The smallest most-likely-first prefix whose probability (at temperature 1) reaches top_p.
  const double max = candidates_.front().logit;
  double total = 0.0;
  for (const Candidate& c : candidates_) total += std::exp(c.logit - max);
  double cumulative = 0.0;
  size_t keep = candidates_.size();
  for (size_t i = 0; i < candidates_.size(); ++i) {
    cumulative += std::exp(candidates_[i].logit - max) / total;
    if (cumulative >= params_.top_p) {
      keep = i + 1;
      break;
    }
  }
  candidates_.resize(keep);
}

void Sampler::keep_min_p() {
  if (params_.min_p <= 0.0f) return;
  float max = -std::numeric_limits<float>::infinity();
  for (const Candidate& c : candidates_) max = std::max(max, c.logit);
  // p(token) >= min_p * p(most likely)  <=>  logit >= max + log(min_p).
  const float threshold = max + std::log(params_.min_p);
  std::erase_if(candidates_, [&](const Candidate& c) { return c.logit < threshold; });
}

void Sampler::softmax(float temperature) {
  float max = -std::numeric_limits<float>::infinity();
  for (Candidate& c : candidates_) {
    c.logit /= temperature;
    max = std::max(max, c.logit);
  }
  double total = 0.0;
  for (const Candidate& c : candidates_) total += std::exp(static_cast<double>(c.logit) - max);
  for (Candidate& c : candidates_) {
    c.probability = static_cast<float>(std::exp(static_cast<double>(c.logit) - max) / total);
  }
}

const std::vector<Candidate>& Sampler::distribution(std::span<const float> logits) {
  find_changes(logits);
  if (params_.temperature <= 0.0f && !grammar_holds() && greedy_without_copy(logits)) return candidates_;
  apply_changes(logits);
  filter_candidates();
  if (grammar_holds()) keep_grammar_candidates();
  if (candidates_.empty()) refuse("no token is left to sample: logitBias bans every token");
  return candidates_;
}

// The chain after bias and penalties, over adjusted_: top-k, top-p, min-p, temperature.
void Sampler::filter_candidates() {
  candidates_.clear();
  sorted_ = false;
  if (params_.temperature <= 0.0f) {
    // Greedy: every filter keeps the most likely token, so it alone decides.
    Candidate best{-1, -std::numeric_limits<float>::infinity(), 1.0f};
    for (size_t i = 0; i < adjusted_.size(); ++i) {
      if (adjusted_[i] > best.logit) best = {static_cast<int32_t>(i), adjusted_[i], 1.0f};
    }
    if (best.token >= 0) candidates_.push_back(best);
  } else {
    if (params_.top_k > 0) {
      take_top_k();
    } else {
      for (size_t i = 0; i < adjusted_.size(); ++i) {
        if (adjusted_[i] > -std::numeric_limits<float>::infinity()) {
          candidates_.push_back({static_cast<int32_t>(i), adjusted_[i], 0.0f});
        }
      }
    }
    if (!candidates_.empty()) {
      keep_top_p();
      keep_min_p();
      softmax(params_.temperature);
    }
  }
}

int32_t Sampler::sample(std::span<const float> logits) {
  const std::vector<Candidate>& candidates = distribution(logits);
  // The probabilities' rounding may leave u past their sum: the last token owns that sliver.
  int32_t token = candidates.back().token;
  if (candidates.size() > 1) {
    const double u = rng_.uniform();
    double cumulative = 0.0;
    for (const Candidate& c : candidates) {
      cumulative += c.probability;
      if (u < cumulative) {
        token = c.token;
        break;
      }
    }
  }
  record_logprobs(logits, token);
  return token;
}

void Sampler::record_logprobs(std::span<const float> logits, int32_t drawn) {
  if (params_.logprobs < 0) return;
  if (params_.logprobs_after_sampling) {
    record_sampled_logprobs(drawn);
    return;
  }
  double max = -std::numeric_limits<double>::infinity();
  for (float l : logits) max = std::max(max, static_cast<double>(l));
  double total = 0.0;
  for (float l : logits) total += std::exp(static_cast<double>(l) - max);
  const double log_total = max + std::log(total);
  const auto logprob = [&](int32_t token) {
    return static_cast<float>(logits[static_cast<size_t>(token)] - log_total);
  };

  const size_t n = std::min(static_cast<size_t>(params_.logprobs), logits.size());
  std::vector<int32_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::partial_sort(order.begin(), order.begin() + static_cast<ptrdiff_t>(n), order.end(), [&](int32_t a, int32_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
           (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
  });
  DrawLogprobs out{{drawn, logprob(drawn)}, {}};
  for (size_t i = 0; i < n; ++i) out.top.push_back({order[i], logprob(order[i])});
  last_logprobs_ = std::move(out);
}

// The draw's own distribution, candidates_ as sample() chose from them: the drawn token's
// probability and the most likely kept tokens (a token the filters dropped had probability 0).
void Sampler::record_sampled_logprobs(int32_t drawn) {
  std::vector<Candidate> kept = candidates_;
  std::sort(kept.begin(), kept.end(), [](const Candidate& a, const Candidate& b) {
    return a.probability > b.probability || (a.probability == b.probability && a.token < b.token);
  });
  const auto logprob = [](float probability) { return static_cast<float>(std::log(static_cast<double>(probability))); };
  DrawLogprobs out{{drawn, -std::numeric_limits<float>::infinity()}, {}};
  for (const Candidate& c : kept) {
    if (c.token == drawn) out.drawn.logprob = logprob(c.probability);
  }
  const size_t n = std::min(static_cast<size_t>(params_.logprobs), kept.size());
  for (size_t i = 0; i < n; ++i) out.top.push_back({kept[i].token, logprob(kept[i].probability)});
  last_logprobs_ = std::move(out);
}

}  // namespace bloomery::engine
