// A GBNF grammar (llama.cpp's dialect), parsed into flat rules that GrammarMatcher walks.
//
//   root  ::= object          # a rule; `root` is where matching starts
//   object ::= "{" ws ( pair ( "," ws pair )* )? "}"
//   pair  ::= [a-z_]+ ":" ws value{1,3}
//
// Literals with escapes (\n \t \r \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH), character classes with
// ranges and negation ([^"\\]), `.` for any character, groups, alternation, and the repetitions
// * + ? {m} {m,} {m,n}. Repetitions and groups become generated rules, so the matcher only knows
// characters, tokens, rule references and alternatives.
//
// A token of the vocabulary, read whole, by id or by its text (llama.cpp's token terminals):
//
//   call  ::= <[128010]> name <｜tool▁sep｜> args     # <[id]>, or <text> of exactly one token
//   other ::= !<|im_end|>                            # any one token but that one
//
// This is how a grammar takes control tokens, whose text is empty in generated output.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace bloomery::engine {

// A set of code points: sorted, non-overlapping inclusive ranges, or everything outside them.
struct CharClass {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  bool negated = false;

  bool contains(uint32_t code_point) const;
  // Whether some code point in [low, high] is in the set (for a character whose first bytes
  // are known: they narrow it to such a range).
  bool intersects(uint32_t low, uint32_t high) const;
};

enum class ElementKind : uint8_t {
  kChar,      // one code point from classes[index]
  kToken,     // the token whose id is `index`, whole
  kTokenNot,  // any one token but the one whose id is `index`
  kRule,      // rule number `index`
  kEnd,       // ends an alternative
};

struct GrammarElement {
  ElementKind kind;
  uint32_t index;
};

struct Grammar {
  // Every alternative of every rule, one after another, each closed by a kEnd element.
  std::vector<GrammarElement> elements;
  // For each rule, where each of its alternatives starts in `elements`.
  std::vector<std::vector<uint32_t>> alternatives;
  std::vector<CharClass> classes;
  uint32_t root = 0;
};

// What one grammar may take, so that no text can exhaust the parser's stack or memory. Parsing
// is linear in the text plus the copies repetitions make; only groups recurse.
struct GrammarLimits {
  size_t bytes;              // of the grammar's text
  size_t nesting;            // groups open inside one another
  size_t rules;              // named ones, and those that groups and repetitions generate
  uint32_t repetition;       // the counts of {m}, {m,}, {m,n}
  uint64_t copied_elements;  // what all repetitions copy together: (("a"{100}){100}){100} copies a million
};
inline constexpr GrammarLimits kGrammarLimits{1u << 20, 256, 200'000, 10'000, 1'000'000};

// Throws Error GRAMMAR_INVALID with the line and column of the first fault: bad syntax, an
// undefined or twice-defined rule, a missing `root`, left recursion (a rule that can reach
// itself before reading a character, which no top-down matcher can walk), or a token terminal
// that names no token of `vocabulary` (an id outside it, a text that is not exactly one token;
// without a vocabulary, ids are taken as they are and texts refused); GRAMMAR_TOO_COMPLEX naming
// the limit of kGrammarLimits that the grammar goes past.
Grammar parse_grammar(std::string_view text, const tokenizer::Tokenizer* vocabulary = nullptr);

}  // namespace bloomery::engine
