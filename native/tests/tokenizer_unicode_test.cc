#include <string>
#include <vector>

#include "tests/check.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode_categories.h"

using namespace bloomery::tokenizer;

TEST(tokenizer_unicode_categories) {
  CHECK(category('a') == Category::kLetter);
  CHECK(category(0x4e2d) == Category::kLetter) << "中";
  CHECK(category(0x0301) == Category::kMark) << "combining acute";
  CHECK(category('7') == Category::kNumber);
  CHECK(category(0x00bd) == Category::kNumber) << "½ is No";
  CHECK(category(0x0663) == Category::kNumber) << "Arabic-Indic three";
  CHECK(category('_') == Category::kPunctuation);
  CHECK(category('$') == Category::kSymbol);
  CHECK(category(0x1f600) == Category::kSymbol) << "emoji are So";
  CHECK(category(0x200d) == Category::kControl) << "ZWJ is Cf";
  CHECK(category(0xe000) == Category::kControl) << "private use";
  CHECK(category(0x0378) == Category::kUndefined) << "unassigned";
  CHECK(category(0x110000) == Category::kUndefined);
  CHECK(category(0x10ffff) == Category::kUndefined) << "noncharacter";
  CHECK(category(0) == Category::kControl);
}

TEST(tokenizer_unicode_whitespace) {
  for (uint32_t c : {0x09u, 0x0au, 0x0du, 0x20u, 0x85u, 0xa0u, 0x2000u, 0x200au, 0x2028u, 0x3000u}) {
    CHECK(is_whitespace(c)) << c;
    CHECK(classify(c).whitespace && !classify(c).letter) << c;
  }
  for (uint32_t c : {0x1cu, 0x1fu, 0x200bu, 0x61u}) CHECK(!is_whitespace(c)) << c;
}

namespace {

std::vector<std::string> words(PreTokenizer pre, const std::string& text) { return pre_tokenize(pre, text); }

}  // namespace

TEST(tokenizer_pre_tokenizer_splits) {
  using V = std::vector<std::string>;
  CHECK((words(PreTokenizer::kLlama3, "Hello world's 12345") == V{"Hello", " world", "'s", " ", "123", "45"}));
  CHECK((words(PreTokenizer::kQwen2, "x 123") == V{"x", " ", "1", "2", "3"}));
  // A combining acute accent (U+0301): a punctuation piece of its own to qwen2, a letter to qwen35.
  CHECK((words(PreTokenizer::kQwen2, "cafe\u0301!") == V{"cafe", "\u0301!"}));
  CHECK((words(PreTokenizer::kQwen35, "cafe\u0301!") == V{"cafe\u0301", "!"}));
  CHECK((words(PreTokenizer::kLlama3, "a  \n\n b") == V{"a", "  \n\n", " b"}));
  CHECK((words(PreTokenizer::kLlama3, "a   b") == V{"a", "  ", " b"})) << "the last space joins the word";
  CHECK((words(PreTokenizer::kGpt4o, "HELLOWorld's") == V{"HELLOWorld's"}));
  CHECK((words(PreTokenizer::kGpt4o, "helloWorld") == V{"hello", "World"}));
  CHECK((words(PreTokenizer::kGpt4o, "x ...//\n") == V{"x", " ...//\n"}));
  CHECK((words(PreTokenizer::kDeepseekV3, "ab12345日本語x") == V{"ab", "123", "45", "日本語", "x"}));
  CHECK((words(PreTokenizer::kGpt2, "I'll 42!") == V{"I", "'ll", " 42", "!"}));
}

TEST(tokenizer_pre_tokenizer_names) {
  CHECK(pre_tokenizer_from_name("qwen2") == PreTokenizer::kQwen2);
  CHECK(pre_tokenizer_from_name("qwen35") == PreTokenizer::kQwen35);
  CHECK(pre_tokenizer_from_name("llama-bpe") == PreTokenizer::kLlama3);
  CHECK(pre_tokenizer_from_name("deepseek-v3") == PreTokenizer::kDeepseekV3);
  CHECK(pre_tokenizer_from_name("gpt-4o") == PreTokenizer::kGpt4o);
  CHECK(pre_tokenizer_from_name("minimax-m2") == PreTokenizer::kGpt4o);
  CHECK(pre_tokenizer_from_name("default") == PreTokenizer::kDefault);
  CHECK(!pre_tokenizer_from_name("no-such-tokenizer"));
}
