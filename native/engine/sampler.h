// Picks the next token from a row of logits: logit bias, then repetition penalties over the
// recent tokens, then top-k, top-p, min-p and temperature (llama.cpp's default order), then a
// grammar constraint, then a draw from a seeded generator. One Sampler serves one generation;
// the same seed, logits and history give the same token on every machine.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/grammar_matcher.h"
#include "tokenizer/tokenizer.h"

namespace bloomery::engine {

// The sampling settings. The defaults are llama.cpp's, except temperature, which defaults to
// greedy decoding so that an unconfigured generation is deterministic.
struct SamplerParams {
  float temperature = 0.0f;                           // 0: always the most likely token (after bias and penalties)
  int32_t top_k = 40;                                 // 0: no limit
  float top_p = 0.95f;                                // 1: off
  float min_p = 0.05f;                                // 0: off
  float repeat_penalty = 1.0f;                        // 1: off
  int32_t repeat_last_n = 64;                         // tokens of history the penalties look at; 0: off, -1: all of it
  float presence_penalty = 0.0f;                      // subtracted once from every token seen in that window
  float frequency_penalty = 0.0f;                     // subtracted once per occurrence in that window
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logit; -infinity bans the token
  uint64_t seed = 0;
  std::string grammar;  // GBNF text (engine/grammar.h); empty: no constraint
  // Set: the grammar is lazy (llama-server's grammar_lazy with word triggers): generation is free
  // until its text contains one of these words, and from the first one found the grammar holds,
  // reading the text from that word on (so the grammar's sentences start with a trigger). A word
  // that is the text of one control token (which has no text in output) is that token: the
  // grammar holds from it on, read as a token (as llama-server turns such words into trigger tokens).
  std::vector<std::string> grammar_triggers;
  int32_t logprobs = -1;  // report each draw's log-probability and this many alternatives; -1: off
  // With logprobs: report the probabilities the draw chose by (after bias, penalties, filters, grammar and
  // temperature: llama-server's post_sampling_probs), the alternatives among the tokens the filters kept.
  bool logprobs_after_sampling = false;
};

// Throws Error INVALID_ARGUMENT naming the first setting out of range (by its TypeScript name).
void validate(const SamplerParams& params);

// xoshiro256** (Blackman and Vigna, 2018), its state filled from the seed by splitmix64, as its
// authors recommend. Small, fast and specified exactly, so a seed means the same everywhere.
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed);
  uint64_t next();
  // Uniform in [0, 1), from the top 53 bits.
  double uniform();

 private:
  uint64_t s_[4];
};

// A token that survived the filters, with its final logit and probability.
struct Candidate {
  int32_t token;
  float logit;
  float probability;
};

struct TokenLogprob {
  int32_t token;
  float logprob;
};

// A draw's log-probabilities as llama-server reports them by default: the log-softmax of the
// model's logits as they came, before bias, penalties, filters, grammar and temperature (or, with
// SamplerParams::logprobs_after_sampling, the logs of the probabilities the draw chose by).
struct DrawLogprobs {
  TokenLogprob drawn;
  std::vector<TokenLogprob> top;  // the most likely tokens, most likely first
};

class Sampler {
 public:
  // Validates the settings (see validate()) and parses the grammar (Error GRAMMAR_INVALID). A
  // grammar needs the tokenizer, for each token's bytes and the end-of-generation tokens.
  explicit Sampler(SamplerParams params, std::shared_ptr<const tokenizer::Tokenizer> tokenizer = nullptr);

  // Adds prompt tokens to the history the penalties look at.
  void accept_prompt(std::span<const int32_t> tokens);

  // Adds a generated token to that history and moves the grammar past its bytes (Error
  // INVALID_ARGUMENT when the grammar does not allow it).
  void accept(int32_t token);

  // The tokens the next draw chooses among and their probabilities (summing to 1), in no
  // particular order. Greedy settings leave one token with probability 1. Under a grammar,
  // the candidates the filters keep that the grammar refuses are dropped; when it refuses them
  // all, the grammar masks the whole vocabulary and the filters run again on what it allows.
  // Throws Error INVALID_ARGUMENT when a biased token lies outside `logits` or every token is
  // banned, GRAMMAR_INVALID when no token of the vocabulary can continue the grammar.
  const std::vector<Candidate>& distribution(std::span<const float> logits);

  // Draws the next token from distribution(logits).
  int32_t sample(std::span<const float> logits);

  // Whether a draw follows a grammar: then it may take milliseconds (up to the grammar's work
  // limit per step), where an unconstrained one takes microseconds.
  bool constrained() const { return grammar_.has_value(); }

  // The log-probabilities of the last sample() (params.logprobs alternatives); nullopt when off.
  const std::optional<DrawLogprobs>& last_logprobs() const { return last_logprobs_; }

 private:
  void filter_candidates();
  bool is_end_token(int32_t token) const;
  void keep_grammar_candidates();
  // Holds the grammar (true) once a trigger appears in the generated text, from there on.
  bool grammar_holds() const { return grammar_ && !awaiting_trigger_; }
  // A lazy grammar reads a generated token's text: watches for a trigger, then starts there.
  void watch_for_trigger(std::string_view piece);
  void record_logprobs(std::span<const float> logits, int32_t drawn);
  void record_sampled_logprobs(int32_t drawn);
  // changes_ = the logits bias and penalties change, with their new values, by token.
  void find_changes(std::span<const float> logits);
  // adjusted_ = the logits with changes_ written over them.
  void apply_changes(std::span<const float> logits);
  bool greedy_without_copy(std::span<const float> logits);
  void take_top_k();
  void keep_top_p();
  void keep_min_p();
  void softmax(float temperature);

  SamplerParams params_;
  Xoshiro256 rng_;
  std::vector<int32_t> history_;
  std::vector<float> adjusted_;  // the logits after bias and penalties
  std::vector<std::pair<int32_t, float>> changes_;
  std::vector<Candidate> candidates_;
  bool sorted_ = false;  // candidates_ is most likely first
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  std::optional<GrammarMatcher> grammar_;
  // A lazy grammar waits for a trigger: the generated text's end that could still hold one.
  bool awaiting_trigger_ = false;
  std::string trigger_tail_;
  std::vector<int32_t> trigger_tokens_;  // the control tokens of grammar_triggers
  std::optional<DrawLogprobs> last_logprobs_;
};

}  // namespace bloomery::engine
