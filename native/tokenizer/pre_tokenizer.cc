#include "tokenizer/pre_tokenizer.h"

#include <array>
#include <span>

#include "tokenizer/matchers.h"
#include "tokenizer/utf8.h"

namespace bloomery::tokenizer {

namespace {

struct NameEntry {
  std::string_view name;
  PreTokenizer pre;
};

// The names llama.cpp's vocabulary loader maps to these splits.
constexpr std::array kNames = {
    NameEntry{"default", PreTokenizer::kDefault},
    NameEntry{"gpt-2", PreTokenizer::kGpt2},
    NameEntry{"phi-2", PreTokenizer::kGpt2},
    NameEntry{"roberta-bpe", PreTokenizer::kGpt2},
    NameEntry{"llama3", PreTokenizer::kLlama3},
    NameEntry{"llama-v3", PreTokenizer::kLlama3},
    NameEntry{"llama-bpe", PreTokenizer::kLlama3},
    NameEntry{"falcon3", PreTokenizer::kLlama3},
    NameEntry{"pixtral", PreTokenizer::kLlama3},
    NameEntry{"qwen2", PreTokenizer::kQwen2},
    NameEntry{"deepseek-r1-qwen", PreTokenizer::kQwen2},
    NameEntry{"megrez", PreTokenizer::kQwen2},
    NameEntry{"qwen35", PreTokenizer::kQwen35},
    NameEntry{"deepseek-v3", PreTokenizer::kDeepseekV3},
    NameEntry{"gpt-4o", PreTokenizer::kGpt4o},
    NameEntry{"llama4", PreTokenizer::kGpt4o},
    NameEntry{"minimax-m2", PreTokenizer::kGpt4o},
    NameEntry{"glm4", PreTokenizer::kChatGlm4},
    NameEntry{"chatglm-bpe", PreTokenizer::kChatGlm4},
    NameEntry{"kimi-k2", PreTokenizer::kKimiK2},
    NameEntry{"deepseek-llm", PreTokenizer::kDeepseekLlm},
    NameEntry{"deepseek-coder", PreTokenizer::kDeepseekCoder},
};

// Piece lengths, in code points, covering the text in order.
using Pieces = std::vector<size_t>;

// Runs one regex split inside every piece: its matches and the gaps between them become pieces.
Pieces split(const std::vector<uint32_t>& cpts, const std::vector<CharClass>& classes, const Pieces& in,
             Matcher match) {
  Pieces out;
  out.reserve(in.size());
  size_t begin = 0;
  for (const size_t len : in) {
    const Segment s{cpts, classes, begin, begin + len};
    size_t gap = begin;
    for (size_t pos = begin; pos < s.end;) {
      const size_t e = match(s, pos);
      if (e == pos) {
        ++pos;
        continue;
      }
      if (pos > gap) out.push_back(pos - gap);
      out.push_back(e - pos);
      pos = gap = e;
    }
    if (s.end > gap) out.push_back(s.end - gap);
    begin = s.end;
  }
  return out;
}

std::span<const Matcher> steps(PreTokenizer pre) {
  static constexpr Matcher kDefault[] = {match_punctuation_run, match_gpt2, match_numbers, match_ascii_digit_triple};
  static constexpr Matcher kGpt2[] = {match_gpt2};
  static constexpr Matcher kLlama3[] = {match_llama3};
  static constexpr Matcher kQwen2[] = {match_qwen2};
  static constexpr Matcher kQwen35[] = {match_qwen35};
  static constexpr Matcher kDeepseekV3[] = {match_numbers_upto3, match_cjk_kana, match_deepseek_v3};
  static constexpr Matcher kGpt4o[] = {match_gpt4o};
  static constexpr Matcher kKimiK2[] = {match_kimi_k2};
  static constexpr Matcher kDeepseekLlm[] = {match_newline,
                                             match_deepseek_llm_letters,
                                             match_deepseek_llm_punctuation,
                                             match_trailing_whitespace,
                                             match_cjk_hangul,
                                             match_numbers};
  static constexpr Matcher kDeepseekCoder[] = {match_newline, match_deepseek_coder_letters,
                                               match_deepseek_coder_punctuation, match_cjk_hangul, match_number};
  switch (pre) {
    case PreTokenizer::kGpt2:
      return kGpt2;
    case PreTokenizer::kLlama3:
    case PreTokenizer::kChatGlm4:
      return kLlama3;
    case PreTokenizer::kQwen2:
      return kQwen2;
    case PreTokenizer::kQwen35:
      return kQwen35;
    case PreTokenizer::kDeepseekV3:
      return kDeepseekV3;
    case PreTokenizer::kGpt4o:
      return kGpt4o;
    case PreTokenizer::kKimiK2:
      return kKimiK2;
    case PreTokenizer::kDeepseekLlm:
      return kDeepseekLlm;
    case PreTokenizer::kDeepseekCoder:
      return kDeepseekCoder;
    case PreTokenizer::kDefault:
      break;
  }
  return kDefault;
}

}  // namespace

std::optional<PreTokenizer> pre_tokenizer_from_name(std::string_view name) {
  for (const NameEntry& e : kNames) {
    if (e.name == name) return e.pre;
  }
  return std::nullopt;
}

bool pre_tokenizer_ignores_merges(PreTokenizer pre) { return pre == PreTokenizer::kLlama3; }

std::vector<std::string> pre_tokenize(PreTokenizer pre, std::string_view text) {
  const std::vector<uint32_t> cpts = decode_utf8(text);
  std::vector<CharClass> classes(cpts.size());
  for (size_t i = 0; i < cpts.size(); ++i) classes[i] = classify(cpts[i]);

  Pieces pieces{cpts.size()};
  for (const Matcher m : steps(pre)) pieces = split(cpts, classes, pieces, m);

  std::vector<std::string> words;
  words.reserve(pieces.size());
  size_t begin = 0;
  for (const size_t len : pieces) {
    std::string& w = words.emplace_back();
    for (size_t i = begin; i < begin + len; ++i) append_utf8(w, cpts[i]);
    begin += len;
  }
  return words;
}

}  // namespace bloomery::tokenizer
