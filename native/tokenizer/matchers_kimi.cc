// Kimi-K2's split, as llama.cpp's hand-written splitter runs it (not its regex: the splitter
// takes any run of non-Han letters, whatever their case, and leaves combining marks out of
// words):
//   \p{Han}+ | [^\r\n\p{L}\p{N}]?[\p{L}--\p{Han}]+ ('s|'t|'re|'ve|'m|'ll|'d, any case)?
//   | \p{N}{1,3} | ' '?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
#include "tokenizer/matchers.h"

namespace bloomery::tokenizer {

namespace {

// llama.cpp's Han ranges: the CJK unified ideographs (with extensions A to F) and the
// compatibility ideographs, assigned or not.
bool is_han(uint32_t c) {
  return (c >= 0x4e00 && c <= 0x9fff) || (c >= 0x3400 && c <= 0x4dbf) || (c >= 0x20000 && c <= 0x2a6df) ||
         (c >= 0x2a700 && c <= 0x2ebef) || (c >= 0xf900 && c <= 0xfaff) || (c >= 0x2f800 && c <= 0x2fa1f);
}

bool is_word_letter(const Segment& s, size_t i) { return s.cls(i).letter && !is_han(s.at(i)); }

// A contraction after a word, case-insensitive; returns its end, or pos for none.
size_t contraction_after(const Segment& s, size_t pos) {
  if (s.at(pos) != '\'' || !s.has(pos + 1)) return pos;
  const uint32_t a = ascii_lower(s.at(pos + 1));
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return pos + 2;
  if (!s.has(pos + 2)) return pos;
  const uint32_t b = ascii_lower(s.at(pos + 2));
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return pos + 3;
  return pos;
}

}  // namespace

size_t match_kimi_k2(const Segment& s, size_t pos) {
  const uint32_t c = s.at(pos);
  const CharClass cls = s.cls(pos);

  if (is_han(c)) {
    size_t e = pos;
    while (is_han(s.at(e))) ++e;
    return e;
  }

  const bool prefix = !(c == '\r' || c == '\n' || cls.letter || cls.number);
  if (cls.letter || (prefix && is_word_letter(s, pos + 1))) {
    size_t e = cls.letter ? pos : pos + 1;
    while (is_word_letter(s, e)) ++e;
    return contraction_after(s, e);
  }

  if (cls.number) {
    size_t e = pos;
    while (e - pos < 3 && s.cls(e).number) ++e;
    return e;
  }

  const size_t body = c == ' ' ? pos + 1 : pos;
  if (s.other(body)) {
    size_t e = body;
    while (s.other(e)) ++e;
    while (s.at(e) == '\r' || s.at(e) == '\n') ++e;
    return e;
  }

  const size_t e = match_whitespace_steps(s, pos);
  return e != pos ? e : pos + 1;
}

}  // namespace bloomery::tokenizer
