// The GPT-2 family of splitters: GPT-2 itself, and llama3/qwen2/qwen35 that add case-insensitive
// contractions, a non-letter prefix to letter runs, capped digit runs and newline rules.
#include "tokenizer/matchers.h"

namespace bloomery::tokenizer {

namespace {

// 's 't 're 've 'm 'll 'd at pos; `fold` makes it case-insensitive. Returns the match end or pos.
size_t contraction(const Segment& s, size_t pos, bool fold) {
  if (s.at(pos) != '\'' || !s.has(pos + 1)) return pos;
  auto low = [&](size_t i) { return fold ? ascii_lower(s.at(i)) : s.at(i); };
  const uint32_t a = low(pos + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return pos + 2;
  if (!s.has(pos + 2)) return pos;
  const uint32_t b = low(pos + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return pos + 3;
  return pos;
}

// \s+(?!\S) then \s+ over the whitespace run at pos: a run followed by a non-space gives its
// last whitespace to the next piece (" word"); a run that ends the segment stays whole.
size_t whitespace_run(const Segment& s, size_t pos) {
  size_t n = 0;
  while (s.cls(pos + n).whitespace) ++n;
  if (n > 1 && s.has(pos + n)) return pos + n - 1;
  return pos + n;
}

// `marks`: letter runs take combining marks (\p{M}) too, and punctuation runs stop at them (Qwen3.5).
size_t match_llama_family(const Segment& s, size_t pos, size_t max_digits, bool marks) {
  const uint32_t c = s.at(pos);
  const CharClass cls = s.cls(pos);
  auto word = [&](size_t i) {
    const CharClass k = s.cls(i);
    return k.letter || (marks && k.mark);
  };

  if (size_t e = contraction(s, pos, true); e != pos) return e;

  // [^\r\n\p{L}\p{N}]?\p{L}+ (or [\p{L}\p{M}]+)
  if (!(c == '\r' || c == '\n' || cls.number) && (word(pos) || word(pos + 1))) {
    size_t e = pos + 1;
    while (word(e)) ++e;
    return e;
  }

  if (cls.number) {
    size_t e = pos;
    while (e - pos < max_digits && s.cls(e).number) ++e;
    return e;
  }

  // ' '?[^\s\p{L}\p{N}]+[\r\n]* (or [^\s\p{L}\p{M}\p{N}]+)
  auto other = [&](size_t i) { return s.other(i) && !(marks && s.cls(i).mark); };
  const size_t body = c == ' ' ? pos + 1 : pos;
  if (other(body)) {
    size_t e = body;
    while (other(e)) ++e;
    while (s.at(e) == '\r' || s.at(e) == '\n') ++e;
    return e;
  }

  const size_t e = match_whitespace_steps(s, pos);
  return e != pos ? e : pos + 1;
}

}  // namespace

size_t match_gpt2(const Segment& s, size_t pos) {
  if (size_t e = contraction(s, pos, false); e != pos) return e;
  const size_t body = s.at(pos) == ' ' ? pos + 1 : pos;
  const CharClass b = s.cls(body);
  size_t e = body;
  if (b.letter) {
    while (s.cls(e).letter) ++e;
    return e;
  }
  if (b.number) {
    while (s.cls(e).number) ++e;
    return e;
  }
  if (s.other(body)) {
    while (s.other(e)) ++e;
    return e;
  }
  if (s.cls(pos).whitespace) return whitespace_run(s, pos);
  return pos + 1;
}

size_t match_llama3(const Segment& s, size_t pos) { return match_llama_family(s, pos, 3, false); }

size_t match_qwen2(const Segment& s, size_t pos) { return match_llama_family(s, pos, 1, false); }

size_t match_qwen35(const Segment& s, size_t pos) { return match_llama_family(s, pos, 1, true); }

}  // namespace bloomery::tokenizer
