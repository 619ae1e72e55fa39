// Follows a Grammar over generated tokens: the set of every parse still possible, each a stack
// of positions in the grammar (what is left to read of each rule entered), advanced one code
// point at a time, or one whole token at a token terminal. Text arrives as token bytes, so a
// character may end in a later token: its first bytes are kept and only checked against what the
// stacks could still read. A token terminal is read only between characters.
//
// Each public call has a budget of work (stacks made, weighted by their size, and texts
// checked): a grammar so ambiguous or so deeply nested that one call would exceed it is
// refused with Error GRAMMAR_TOO_COMPLEX rather than followed for seconds. Nothing recurses,
// so no grammar or token text can exhaust the thread's stack.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/grammar.h"

namespace bloomery::engine {

// Work one call of GrammarMatcher may spend, in checks of a character against a class (a few
// nanoseconds each; opening a parse costs 32 and one more per rule it is inside): some
// milliseconds. Sampling runs between the forward passes that every sequence shares, so this
// is also how long one grammar may hold up the others per step (a call or two per token).
inline constexpr uint64_t kGrammarMatchBudget = 1u << 22;

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

  // Whether `bytes` can come next: some parse reads all of them (an unfinished last character
  // counts when some parse could read a character that begins so). Empty bytes are refused.
  bool allows(std::string_view bytes) const;

  // allows() of each text, computed together: each parse moves past a character once for all
  // the texts that reach it there, instead of once per text (for masking a whole vocabulary).
  std::vector<bool> allows_each(std::span<const std::string_view> texts) const;

  // Whether token `token`, whose text is `bytes` (empty for a control token), can come next: a
  // parse reads its text, or a parse is at a token terminal that takes it.
  bool allows_token(int32_t token, std::string_view bytes) const;

  // allows_token() of each token with its text (tokens[i] with texts[i]), computed together.
  std::vector<bool> allows_each(std::span<const int32_t> tokens, std::span<const std::string_view> texts) const;

  // Reads `bytes`; throws Error INVALID_ARGUMENT when allows(bytes) is false.
  void advance(std::string_view bytes);

  // Reads token `token` with its text `bytes`: the parses that read the text and those at a token
  // terminal that takes the token go on. Throws Error INVALID_ARGUMENT when allows_token() is false.
  void advance_token(int32_t token, std::string_view bytes);

  // Whether the text so far is a whole sentence of the grammar (the end may come here).
  bool complete() const;

 private:
  using Stack = std::vector<uint32_t>;  // positions in Grammar::elements, innermost last

  struct State {
    std::vector<Stack> stacks;  // each ends at a character or token element, or is empty (a finished parse)
    std::string partial;        // the first bytes of a character not yet whole
  };

  // Counts one call's work; throws GRAMMAR_TOO_COMPLEX past kGrammarMatchBudget.
  class Budget {
   public:
    void spend(uint64_t units);

   private:
    uint64_t spent_ = 0;
  };

  bool allows(std::string_view bytes, Budget& budget) const;
  // Reads bytes into `state`; false when no parse survives them or they are not UTF-8.
  bool read(State& state, std::string_view bytes, Budget& budget) const;
  void step(std::vector<Stack>& stacks, uint32_t code_point, Budget& budget) const;
  // The stacks past the character on top of `stack`, expanded.
  std::vector<Stack> after_char(const Stack& stack, Budget& budget) const;
  void expand(Stack stack, std::vector<Stack>& out, Budget& budget) const;
  bool top_reads(const Stack& stack, uint32_t low, uint32_t high) const;
  // Whether the token terminal on top of `stack` (if that is what is there) takes `token`.
  bool top_takes(const Stack& stack, int32_t token) const;
  // The parses past `token` at their token terminal (none while a character is unfinished).
  std::vector<Stack> after_token(int32_t token, Budget& budget) const;
  static void deduplicate(std::vector<Stack>& stacks);

  std::shared_ptr<const Grammar> grammar_;
  State state_;
};

}  // namespace bloomery::engine
