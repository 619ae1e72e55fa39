// Unicode facts the pre-tokenizers need: the general-category class of a code point (the
// \p{L}, \p{N}, ... of the tokenizer regexes) and whether it counts as whitespace (\s).
#pragma once

#include <cstdint>

namespace bloomery::tokenizer {

// General categories folded to their major class, as the pre-tokenizer regexes use them.
enum class Category : uint8_t {
  kUndefined = 0,  // unassigned (Cn), and anything past U+10FFFF
  kNumber,         // N*
  kLetter,         // L*
  kSeparator,      // Z*
  kMark,           // M*
  kPunctuation,    // P*
  kSymbol,         // S*
  kControl,        // Cc, Cf, Co, Cs
};

// Generated table (unicode_categories.cc, from tools/unicode/categories.mjs).
Category category(uint32_t cpt);

// The whitespace set of the tokenizer regexes: the White_Space property minus the four
// ASCII information separators, which llama.cpp's tables also leave out.
bool is_whitespace(uint32_t cpt);

// What one code point is, for the pre-tokenizer matchers. Whitespace wins over the category
// (U+00A0 is whitespace, not a separator that \p{...} classes could see).
struct CharClass {
  bool whitespace = false;
  bool letter = false;
  bool number = false;
  bool mark = false;
  bool punctuation = false;
  bool symbol = false;
};

CharClass classify(uint32_t cpt);

// Lower case for the ASCII letters only: the case-insensitive contractions ('S, 'LL) are ASCII.
inline uint32_t ascii_lower(uint32_t cpt) { return cpt >= 'A' && cpt <= 'Z' ? cpt + 32 : cpt; }

}  // namespace bloomery::tokenizer
