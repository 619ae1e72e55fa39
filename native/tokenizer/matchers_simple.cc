// Single-class runs: the digit, CJK and punctuation splits that some pre-tokenizers apply
// before (or after) their main word split.
#include "tokenizer/matchers.h"

namespace bloomery::tokenizer {

size_t match_whitespace_steps(const Segment& s, size_t pos) {
  size_t n = 0;
  size_t last_newline = 0;
  while (s.cls(pos + n).whitespace) {
    if (s.at(pos + n) == '\r' || s.at(pos + n) == '\n') last_newline = pos + n + 1;
    ++n;
  }
  if (last_newline) return last_newline;
  if (n > 1 && s.has(pos + n)) return pos + n - 1;
  return pos + n;
}

size_t match_numbers_upto3(const Segment& s, size_t pos) {
  size_t e = pos;
  while (e - pos < 3 && s.cls(e).number) ++e;
  return e;
}

size_t match_numbers(const Segment& s, size_t pos) {
  size_t e = pos;
  while (s.cls(e).number) ++e;
  return e;
}

size_t match_ascii_digit_triple(const Segment& s, size_t pos) {
  for (size_t i = pos; i < pos + 3; ++i) {
    if (s.at(i) < '0' || s.at(i) > '9') return pos;
  }
  return pos + 3;
}

size_t match_cjk_kana(const Segment& s, size_t pos) {
  auto in = [&](size_t i) {
    const uint32_t c = s.at(i);
    return (c >= 0x4e00 && c <= 0x9fa5) || (c >= 0x3040 && c <= 0x30ff);
  };
  size_t e = pos;
  while (in(e)) ++e;
  return e;
}

size_t match_punctuation_run(const Segment& s, size_t pos) {
  auto in = [&](size_t i) {
    const uint32_t c = s.at(i);
    return s.cls(i).punctuation || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' || c == '~' ||
           c == '|';
  };
  size_t e = pos;
  while (in(e)) ++e;
  return e;
}

}  // namespace bloomery::tokenizer
