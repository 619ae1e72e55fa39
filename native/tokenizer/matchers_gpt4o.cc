// o200k's split (GPT-4o, gpt-oss), as llama.cpp runs it through std::regex:
//   [^\r\n\p{L}\p{N}]?U*L+C? | [^\r\n\p{L}\p{N}]?U+L*C? | \p{N}{1,3} | ' '?[^\s\p{L}\p{N}]+[\r\n/]*
//   | \s*[\r\n]+ | \s+(?!\S) | \s+
// where U is a letter other than a-z, L a letter other than A-Z (so a non-ASCII letter is
// both, whatever its case) and C an optional contraction ('s 't 're 've 'm 'll 'd, any case).
#include "tokenizer/matchers.h"

namespace bloomery::tokenizer {

namespace {

bool is_upperish(const Segment& s, size_t i) {
  const uint32_t c = s.at(i);
  return s.cls(i).letter && !(c >= 'a' && c <= 'z');
}

bool is_lowerish(const Segment& s, size_t i) {
  const uint32_t c = s.at(i);
  return s.cls(i).letter && !(c >= 'A' && c <= 'Z');
}

bool is_prefix(const Segment& s, size_t i) {
  const uint32_t c = s.at(i);
  const CharClass cls = s.cls(i);
  return s.has(i) && c != '\r' && c != '\n' && !cls.letter && !cls.number;
}

size_t contraction(const Segment& s, size_t pos) {
  if (s.at(pos) != '\'') return pos;
  const uint32_t a = ascii_lower(s.at(pos + 1));
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return pos + 2;
  const uint32_t b = ascii_lower(s.at(pos + 2));
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return pos + 3;
  return pos;
}

size_t run(const Segment& s, size_t i, bool (*in)(const Segment&, size_t)) {
  while (in(s, i)) ++i;
  return i;
}

// U*L+ from `start`: U* greedy, then backs off one U at a time until L+ can match.
size_t upper_star_lower_plus(const Segment& s, size_t start) {
  const size_t upper_end = run(s, start, is_upperish);
  for (size_t k = upper_end + 1; k-- > start;) {
    const size_t lower_end = run(s, k, is_lowerish);
    if (lower_end > k) return lower_end;
  }
  return start;
}

size_t upper_plus_lower_star(const Segment& s, size_t start) {
  const size_t upper_end = run(s, start, is_upperish);
  return upper_end == start ? start : run(s, upper_end, is_lowerish);
}

}  // namespace

size_t match_gpt4o(const Segment& s, size_t pos) {
  // The optional prefix is greedy; without it the letter alternatives cannot match a prefix char.
  const size_t start = is_prefix(s, pos) ? pos + 1 : pos;
  if (size_t e = upper_star_lower_plus(s, start); e != start) return contraction(s, e);
  if (size_t e = upper_plus_lower_star(s, start); e != start) return contraction(s, e);

  const CharClass cls = s.cls(pos);
  if (cls.number) {
    size_t e = pos;
    while (e - pos < 3 && s.cls(e).number) ++e;
    return e;
  }

  // ' '?[^\s\p{L}\p{N}]+[\r\n/]*
  const size_t body = s.at(pos) == ' ' && s.other(pos + 1) ? pos + 1 : pos;
  if (s.other(body)) {
    size_t e = body;
    while (s.other(e)) ++e;
    while (s.at(e) == '\r' || s.at(e) == '\n' || s.at(e) == '/') ++e;
    return e;
  }

  return match_whitespace_steps(s, pos);
}

}  // namespace bloomery::tokenizer
