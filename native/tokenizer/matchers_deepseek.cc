// DeepSeek-V3's word split (after its digit and CJK splits), as llama.cpp runs it through
// std::regex:
//   [!-/:-@[-`{-~][A-Za-z]+ | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ | ' '?[\p{P}\p{S}]+[\r\n]*
//   | \s*[\r\n]+ | \s+(?!\S) | \s+
// Code points no alternative takes (digits, controls) are left between matches.
#include "tokenizer/matchers.h"

namespace bloomery::tokenizer {

namespace {

bool is_ascii_letter(uint32_t c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

bool is_ascii_punct(uint32_t c) {
  return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~');
}

}  // namespace

size_t match_deepseek_v3(const Segment& s, size_t pos) {
  const uint32_t c = s.at(pos);
  if (is_ascii_punct(c) && is_ascii_letter(s.at(pos + 1))) {
    size_t e = pos + 1;
    while (is_ascii_letter(s.at(e))) ++e;
    return e;
  }

  auto letter_or_mark = [&](size_t i) { return s.cls(i).letter || s.cls(i).mark; };
  auto punct_or_symbol = [&](size_t i) { return s.cls(i).punctuation || s.cls(i).symbol; };

  // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
  const CharClass cls = s.cls(pos);
  const bool prefix = s.has(pos) && c != '\r' && c != '\n' && !cls.letter && !cls.punctuation && !cls.symbol;
  size_t start = prefix && letter_or_mark(pos + 1) ? pos + 1 : pos;
  if (letter_or_mark(start)) {
    while (letter_or_mark(start)) ++start;
    return start;
  }

  // ' '?[\p{P}\p{S}]+[\r\n]*
  const size_t body = c == ' ' && punct_or_symbol(pos + 1) ? pos + 1 : pos;
  if (punct_or_symbol(body)) {
    size_t e = body;
    while (punct_or_symbol(e)) ++e;
    while (s.at(e) == '\r' || s.at(e) == '\n') ++e;
    return e;
  }

  return match_whitespace_steps(s, pos);
}

}  // namespace bloomery::tokenizer
