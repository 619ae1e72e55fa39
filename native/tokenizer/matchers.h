// The pre-tokenizer regexes, written out by hand. Each matcher answers one question: does
// its regex match at `pos` (leftmost-first alternation, greedy with backtracking, the way
// ECMAScript and llama.cpp's hand-written splitters do), and where does the match end?
// It returns `pos` for no match. Matchers see one segment [begin, end) of the text:
// lookaheads stop at its end, as a regex run over that segment alone would.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tokenizer/unicode_categories.h"

namespace bloomery::tokenizer {

struct Segment {
  const std::vector<uint32_t>& cpts;
  const std::vector<CharClass>& classes;
  size_t begin;
  size_t end;

  bool has(size_t i) const { return i >= begin && i < end; }
  // Out-of-segment positions read as a code point no class contains.
  uint32_t at(size_t i) const { return has(i) ? cpts[i] : 0xffffffffu; }
  CharClass cls(size_t i) const { return has(i) ? classes[i] : CharClass{}; }
  // [^\s\p{L}\p{N}] at i, inside the segment.
  bool other(size_t i) const {
    if (!has(i)) return false;
    const CharClass& c = classes[i];
    return !(c.whitespace || c.letter || c.number);
  }
};

using Matcher = size_t (*)(const Segment& s, size_t pos);

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ (GPT-2).
size_t match_gpt2(const Segment& s, size_t pos);
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
size_t match_llama3(const Segment& s, size_t pos);
// The same with \p{N} (one digit per piece): Qwen2 and Qwen3.
size_t match_qwen2(const Segment& s, size_t pos);
// Qwen2's with combining marks in letter runs, [\p{L}\p{M}]+, and out of punctuation runs: Qwen3.5.
size_t match_qwen35(const Segment& s, size_t pos);
// o200k (GPT-4o, gpt-oss): case-aware letter runs with optional contractions, \p{N}{1,3},
// punctuation runs with trailing [\r\n/]*, then the whitespace rules of llama3.
size_t match_gpt4o(const Segment& s, size_t pos);
// DeepSeek-V3's third split: [ASCII punctuation][A-Za-z]+ | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
// |  ?[\p{P}\p{S}]+[\r\n]* | whitespace rules.
size_t match_deepseek_v3(const Segment& s, size_t pos);
// DeepSeek-LLM / DeepSeek-V2 ("deepseek-llm") and DeepSeek-Coder's splits (matchers_deepseek_llm.cc):
// \s?[Latin, Greek, Cyrillic, ... letters]+ and \s?[ASCII and fullwidth punctuation]+ (std::wregex
// classes), \s?\p{L}+ and \s?\p{P}+ (Coder), and the single-class steps around them.
size_t match_deepseek_llm_letters(const Segment& s, size_t pos);
size_t match_deepseek_llm_punctuation(const Segment& s, size_t pos);
size_t match_deepseek_coder_letters(const Segment& s, size_t pos);
size_t match_deepseek_coder_punctuation(const Segment& s, size_t pos);
// [\r\n]
size_t match_newline(const Segment& s, size_t pos);
// \s+$ (the whitespace that ends the segment)
size_t match_trailing_whitespace(const Segment& s, size_t pos);
// [一-龥ࠀ-一가-퟿]+ (U+0800..U+9FA5 and Hangul, whitespace excluded as std::wregex sees it)
size_t match_cjk_hangul(const Segment& s, size_t pos);
// \p{N}
size_t match_number(const Segment& s, size_t pos);
// Kimi-K2: Han runs, then the llama3 rules with Han taken out of letter runs (matchers_kimi.cc).
size_t match_kimi_k2(const Segment& s, size_t pos);

// \p{N}{1,3}
size_t match_numbers_upto3(const Segment& s, size_t pos);
// \p{N}+
size_t match_numbers(const Segment& s, size_t pos);
// [0-9][0-9][0-9]
size_t match_ascii_digit_triple(const Segment& s, size_t pos);
// [一-龥぀-ゟ゠-ヿ]+ (CJK ideographs, hiragana, katakana)
size_t match_cjk_kana(const Segment& s, size_t pos);
// [\p{P}\$\+<=>\^~\|]+
size_t match_punctuation_run(const Segment& s, size_t pos);
// \s*[\r\n]+ | \s+(?!\S) | \s+, the whitespace steps that end the GPT-2-style splitters (llama3,
// qwen2, gpt-4o, deepseek-v3, kimi-k2): up to the last newline of the run at pos, else the run
// less its last whitespace where a non-space follows, else the whole run. Returns pos where pos
// is not whitespace.
size_t match_whitespace_steps(const Segment& s, size_t pos);

}  // namespace bloomery::tokenizer
