// The splits of the first DeepSeek vocabularies (DeepSeek-LLM and DeepSeek-V2: "deepseek-llm";
// DeepSeek-Coder: "deepseek-coder"), as llama.cpp runs them. Regexes without a \p{...} class
// run through std::wregex on the code points, where \s is ASCII whitespace and every other
// whitespace code point reads as U+000B (so it is \s, and in no explicit class); those with one
// run on llama.cpp's collapsed text, where the classes are our CharClass.
#include <algorithm>
#include <array>

#include "tokenizer/matchers.h"

namespace bloomery::tokenizer {

namespace {

struct Range {
  uint32_t lo;
  uint32_t hi;
};

// The letters of DeepSeek-LLM's word split, [A-Za-zµÀ-ÖØ-öø-ƺ...𞤀-𞥃], in order.
constexpr std::array<Range, 87> kLlmLetters = {{
    {0x41, 0x5a},       {0x61, 0x7a},       {0xb5, 0xb5},       {0xc0, 0xd6},       {0xd8, 0xf6},
    {0xf8, 0x1ba},      {0x1bc, 0x1bf},     {0x1c4, 0x293},     {0x295, 0x2af},     {0x370, 0x373},
    {0x376, 0x376},     {0x377, 0x377},     {0x37b, 0x37d},     {0x37f, 0x37f},     {0x386, 0x386},
    {0x388, 0x38a},     {0x38c, 0x38c},     {0x38e, 0x3a1},     {0x3a3, 0x3f5},     {0x3f7, 0x481},
    {0x48a, 0x52f},     {0x531, 0x556},     {0x10a0, 0x10c5},   {0x13a0, 0x13f5},   {0x13f8, 0x13fd},
    {0x1c90, 0x1cba},   {0x1cbd, 0x1cbf},   {0x1d00, 0x1d2b},   {0x1d6b, 0x1d77},   {0x1d79, 0x1d9a},
    {0x1e00, 0x1f15},   {0x1f18, 0x1f1d},   {0x1f20, 0x1f45},   {0x1f48, 0x1f4d},   {0x1f50, 0x1f57},
    {0x1f59, 0x1f59},   {0x1f5b, 0x1f5b},   {0x1f5d, 0x1f5d},   {0x1f5f, 0x1f7d},   {0x1f80, 0x1fb4},
    {0x1fb6, 0x1fbc},   {0x1fbe, 0x1fbe},   {0x1fc2, 0x1fc4},   {0x1fc6, 0x1fcc},   {0x1fd0, 0x1fd3},
    {0x1fd6, 0x1fdb},   {0x1fe0, 0x1fec},   {0x1ff2, 0x1ff4},   {0x1ff6, 0x1ffc},   {0x2102, 0x2102},
    {0x2107, 0x2107},   {0x210a, 0x2113},   {0x2115, 0x2115},   {0x2119, 0x211d},   {0x2124, 0x2124},
    {0x2126, 0x2126},   {0x2128, 0x2128},   {0x212a, 0x212d},   {0x212f, 0x2134},   {0x2139, 0x2139},
    {0x213c, 0x213f},   {0x2145, 0x2149},   {0x214e, 0x214e},   {0x2183, 0x2183},   {0x2184, 0x2184},
    {0x2c00, 0x2c7b},   {0x2c7e, 0x2ce4},   {0x2ceb, 0x2cee},   {0x2cf2, 0x2cf2},   {0x2cf3, 0x2cf3},
    {0xa640, 0xa66d},   {0xa680, 0xa69b},   {0xa722, 0xa76f},   {0xa771, 0xa787},   {0xa78b, 0xa78e},
    {0xab70, 0xabbf},   {0xfb00, 0xfb06},   {0xfb13, 0xfb17},   {0xff21, 0xff3a},   {0xff41, 0xff5a},
    {0x10400, 0x1044f}, {0x104b0, 0x104d3}, {0x104d8, 0x104fb}, {0x10c80, 0x10cb2}, {0x10cc0, 0x10cf2},
    {0x118a0, 0x118df}, {0x1e900, 0x1e943},
}};

// The code point std::wregex sees: whitespace beyond ASCII reads as U+000B.
uint32_t wide(const Segment& s, size_t i) {
  const uint32_t c = s.at(i);
  return c > 0x7f && s.cls(i).whitespace ? 0x0b : c;
}

bool llm_letter(const Segment& s, size_t i) {
  const uint32_t c = wide(s, i);
  const auto it =
      std::upper_bound(kLlmLetters.begin(), kLlmLetters.end(), c, [](uint32_t v, const Range& r) { return v < r.lo; });
  return it != kLlmLetters.begin() && c <= std::prev(it)->hi;
}

// [!-/:-~！-／：-～‘-‟　-。]
bool llm_punctuation(const Segment& s, size_t i) {
  const uint32_t c = wide(s, i);
  return (c >= '!' && c <= '/') || (c >= ':' && c <= '~') || (c >= 0xff01 && c <= 0xff0f) ||
         (c >= 0xff1a && c <= 0xff5e) || (c >= 0x2018 && c <= 0x201f) || (c >= 0x3000 && c <= 0x3002);
}

// \s?[class]+: the optional whitespace is taken only when the class follows it.
template <typename InClass>
size_t spaced_run(const Segment& s, size_t pos, InClass in) {
  size_t e = s.cls(pos).whitespace && in(pos + 1) ? pos + 1 : pos;
  if (!in(e)) return pos;
  while (in(e)) ++e;
  return e;
}

}  // namespace

size_t match_newline(const Segment& s, size_t pos) { return s.at(pos) == '\r' || s.at(pos) == '\n' ? pos + 1 : pos; }

size_t match_deepseek_llm_letters(const Segment& s, size_t pos) {
  return spaced_run(s, pos, [&](size_t i) { return llm_letter(s, i); });
}

size_t match_deepseek_llm_punctuation(const Segment& s, size_t pos) {
  return spaced_run(s, pos, [&](size_t i) { return llm_punctuation(s, i); });
}

size_t match_deepseek_coder_letters(const Segment& s, size_t pos) {
  return spaced_run(s, pos, [&](size_t i) { return s.cls(i).letter; });
}

size_t match_deepseek_coder_punctuation(const Segment& s, size_t pos) {
  return spaced_run(s, pos, [&](size_t i) { return s.cls(i).punctuation; });
}

size_t match_trailing_whitespace(const Segment& s, size_t pos) {
  // A run that a match tried from an earlier position fails here too: each run is scanned once.
  if (!s.cls(pos).whitespace || (s.has(pos - 1) && s.cls(pos - 1).whitespace)) return pos;
  size_t e = pos;
  while (s.cls(e).whitespace) ++e;
  return e == s.end ? e : pos;
}

size_t match_cjk_hangul(const Segment& s, size_t pos) {
  auto in = [&](size_t i) {
    const uint32_t c = wide(s, i);
    return (c >= 0x0800 && c <= 0x9fa5) || (c >= 0xac00 && c <= 0xd7ff);
  };
  size_t e = pos;
  while (in(e)) ++e;
  return e;
}

size_t match_number(const Segment& s, size_t pos) { return s.cls(pos).number ? pos + 1 : pos; }

}  // namespace bloomery::tokenizer
