// The GBNF parser (what it accepts, what it refuses and where), the matcher over bytes
// (repetitions, classes, UTF-8 split across tokens), and the sampler under a grammar.
#include "engine/grammar.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/grammar_matcher.h"
#include "engine/sampler.h"
#include "tests/check.h"
#include "tests/text.h"
#include "tokenizer/tokenizer.h"

using namespace bloomery;
using namespace bloomery::engine;

namespace {

GrammarMatcher matcher(const std::string& gbnf) {
  return GrammarMatcher(std::make_shared<const Grammar>(parse_grammar(gbnf)));
}

// Whether the grammar takes `text` whole, fed one byte at a time (so every character is split).
bool accepts_bytewise(const std::string& gbnf, const std::string& text) {
  GrammarMatcher m = matcher(gbnf);
  for (char c : text) {
    const std::string byte(1, c);
    if (!m.allows(byte)) return false;
    m.advance(byte);
  }
  return m.complete();
}

// Whether the grammar takes `text` whole, in one piece.
bool accepts(const std::string& gbnf, const std::string& text) {
  GrammarMatcher m = matcher(gbnf);
  if (!text.empty()) {
    if (!m.allows(text)) return false;
    m.advance(text);
  }
  const bool whole = m.complete();
  CHECK(accepts_bytewise(gbnf, text) == whole) << "bytewise and whole disagree on \"" << text << "\"";
  return whole;
}

// The message of the GRAMMAR_INVALID error parsing `gbnf` throws, or "" when it parses.
std::string refusal(const std::string& gbnf) {
  try {
    parse_grammar(gbnf);
  } catch (const Error& e) {
    CHECK(e.code() == "GRAMMAR_INVALID") << e.code();
    return e.what();
  }
  return "";
}

// The code of the Error `work` throws, or "" when it throws none.
template <typename Work>
std::string refusal_code(Work work) {
  try {
    work();
  } catch (const Error& e) {
    return e.code();
  }
  return "";
}

bool mentions(const std::string& message, const std::string& part) { return message.find(part) != std::string::npos; }

// The message of the GRAMMAR_TOO_COMPLEX error `work` throws, or "" when it throws none.
template <typename Work>
std::string limit(Work work) {
  try {
    work();
  } catch (const Error& e) {
    CHECK(e.code() == "GRAMMAR_TOO_COMPLEX") << e.code() << ": " << e.what();
    return e.what();
  }
  return "";
}

std::string nested_groups(size_t depth) {
  return tests::cat("root ::= ", std::string(depth, '('), "\"a\"", std::string(depth, ')'));
}

// r0 ::= r1 <tail>, r1 ::= r2 <tail>, ..., the last one `last`.
std::string rule_chain(size_t rules, const std::string& tail, const std::string& last) {
  std::string g = "root ::= r0\n";
  for (size_t i = 0; i + 1 < rules; ++i) g += tests::cat("r", i, " ::= r", i + 1, tail, "\n");
  return g + tests::cat("r", rules - 1, " ::= ", last, "\n");
}

}  // namespace

TEST(grammar_literals_alternatives_and_groups) {
  const std::string g = "root ::= \"yes\" | \"no\" | (\"may\" \"be\")  # a comment\n";
  CHECK(accepts(g, "yes"));
  CHECK(accepts(g, "no"));
  CHECK(accepts(g, "maybe"));
  CHECK(!accepts(g, "ye"));
  CHECK(!accepts(g, "yesno"));
  CHECK(!accepts(g, "nope"));
  CHECK(accepts("root ::= greeting \" \" name\ngreeting ::= \"hi\"\nname ::= [a-z]+\n", "hi bob"));
}

TEST(grammar_repetitions) {
  const std::string star = "root ::= \"ab\"*";
  CHECK(accepts(star, ""));
  CHECK(accepts(star, "ababab"));
  CHECK(!accepts(star, "aba"));
  CHECK(!accepts("root ::= \"a\"+", ""));
  CHECK(accepts("root ::= \"a\"+", "aaaa"));
  CHECK(accepts("root ::= \"a\"? \"b\"", "b"));
  CHECK(accepts("root ::= \"a\"? \"b\"", "ab"));
  const std::string bounded = "root ::= [0-9]{2,4}";
  CHECK(!accepts(bounded, "1"));
  CHECK(accepts(bounded, "12"));
  CHECK(accepts(bounded, "1234"));
  CHECK(!accepts(bounded, "12345"));
  CHECK(accepts("root ::= \"x\"{3}", "xxx"));
  CHECK(!accepts("root ::= \"x\"{3}", "xx"));
  CHECK(accepts("root ::= \"x\"{2,} \"y\"", "xxxxy"));
  CHECK(!accepts("root ::= \"x\"{2,} \"y\"", "xy"));
  CHECK(accepts("root ::= (\"a\" | \"b\"){0,2} \"c\"", "bac"));
}

TEST(grammar_char_classes_escapes_and_any) {
  CHECK(accepts("root ::= [^\"\\\\]*", "plain text"));
  CHECK(!accepts("root ::= [^\"\\\\]*", "say \"hi\""));
  CHECK(accepts("root ::= [a-cx-z_]+", "abz_x"));
  CHECK(!accepts("root ::= [a-cx-z_]+", "abd"));
  CHECK(accepts("root ::= \"\\x41\\u00e9\\t\\n\\\"\"", "A\xc3\xa9\t\n\""));
  CHECK(accepts("root ::= . . .", "a\xe2\x82\xac!"));  // three characters, one of them three bytes
  CHECK(!accepts("root ::= . .", "abc"));
  CHECK(accepts("root ::= [\\]\\[-]+", "[]-"));
}

TEST(grammar_utf8_split_across_tokens) {
  const std::string greek = "root ::= [\xce\xb1-\xcf\x89]+";  // [α-ω]+
  GrammarMatcher m = matcher(greek);
  CHECK(m.allows("\xce"));  // the first byte of α..ο: some of them fit
  m.advance("\xce");
  CHECK(!m.complete());  // half a character is not a sentence
  CHECK(!m.allows("a"));
  CHECK(m.allows("\xb1"));
  m.advance("\xb1\xcf\x89");  // α, then ω whole
  CHECK(m.complete());
  CHECK(!m.allows("\xd0"));  // Cyrillic lead byte: nothing in the class begins so
  CHECK(!m.allows("\x80"));  // a stray continuation byte
  CHECK(!m.allows("\xff"));  // never UTF-8
  // Overlong forms would spell a character the grammar allows in bytes it does not.
  GrammarMatcher letter = matcher("root ::= \"\xc3\x89\"");  // É, C3 89 in UTF-8
  CHECK(letter.allows("\xc3"));
  CHECK(!letter.allows("\xf0\x80"));  // no four-byte form of it is UTF-8
  CHECK(!letter.allows("\xe0\x83"));  // nor three-byte
  CHECK(!matcher("root ::= \"e\"").allows("\xc1\xa5"));
  CHECK(!matcher("root ::= [^a]").allows("\xed\xa0\x80"));  // a surrogate
  CHECK(!matcher("root ::= [^a]").allows(""));
  // A negated class lets through a character begun by bytes its ranges do not cover whole.
  CHECK(accepts_bytewise("root ::= [^\xce\xb1] [^\xce\xb1]", "\xce\xb2\xe4\xb8\x80"));
  CHECK(!accepts_bytewise("root ::= [^\xce\xb1]", "\xce\xb1"));
}

TEST(grammar_json_like_recursion) {
  const std::string json =
      "root ::= value\n"
      "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\")\n"
      "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
      "array ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
      "string ::= \"\\\"\" [^\"\\\\]* \"\\\"\" ws\n"
      "number ::= \"-\"? [0-9]+ ws\n"
      "ws ::= [ \\t\\n]*\n";
  CHECK(accepts(json, "{\"a\": [1, -2, {\"b\": null}], \"c\": \"x\"}"));
  CHECK(accepts(json, "[[[[]]]]"));
  CHECK(!accepts(json, "{\"a\" 1}"));
  CHECK(!accepts(json, "[1,]"));
  CHECK(!accepts(json, "[[]"));
}

TEST(grammar_allows_each_agrees_with_allows) {
  // Random texts over JSON's characters, some multi-byte and some cut inside a character, checked
  // together and one by one from several points of a grammar, a character split included.
  const std::string g =
      "root ::= \"{\" ws \"\\\"k\\\"\" ws \":\" ws (str | num) ws \"}\"\n"
      "str ::= \"\\\"\" [^\"\\\\\\x00-\\x1f]{0,8} \"\\\"\"\nnum ::= \"-\"? [0-9]{1,4}\nws ::= [ \\n]{0,2}\n";
  const std::vector<std::string> alphabet = {
      "{", "}",        "\"",           "k",    ":",        " ",    "\n", "-",   "7", "0",
      "a", "\xc3\xa9", "\xe2\x82\xac", "\xc3", "\xe2\x82", "\xac", "\\", "\x01"};
  uint64_t seed = 12345;
  const auto next = [&] { return (seed = seed * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  std::vector<std::string> texts(3000);
  for (std::string& t : texts) {
    for (uint64_t n = 1 + next() % 4; n > 0; --n) t += alphabet[next() % alphabet.size()];
  }
  const std::vector<std::string_view> views(texts.begin(), texts.end());
  for (const char* prefix : {"", "{", "{ \"k\":", "{\"k\": \"a", "{\"k\":\"\xe2\x82", "{\"k\":-1"}) {
    GrammarMatcher m = matcher(g);
    if (*prefix) m.advance(prefix);
    const std::vector<bool> together = m.allows_each(views);
    size_t allowed = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      CHECK(together[i] == m.allows(texts[i])) << "after \"" << prefix << "\": \"" << texts[i] << "\"";
      allowed += together[i];
    }
    CHECK(allowed > 0 && allowed < texts.size()) << prefix << ": " << allowed;
  }
}

TEST(grammar_refuses_bad_grammars_with_line_and_column) {
  CHECK(mentions(refusal("root ::= \"abc"), "line 1, column 10: unterminated string literal"));
  CHECK(mentions(refusal("root ::= foo"), "line 1, column 10: rule 'foo' is not defined"));
  CHECK(mentions(refusal("start ::= \"a\""), "no rule named root"));
  CHECK(mentions(refusal("root ::= \"a\"\nroot ::= \"b\""), "line 2, column 1: rule 'root' is defined twice"));
  CHECK(mentions(refusal("root ::= \"a\" \n  # note\nx = \"b\""), "line 3, column 3: expected ::="));
  CHECK(mentions(refusal("root ::= (\"a\" | \"b\""), "expected ')'"));
  CHECK(mentions(refusal("root ::= [a-"), "unterminated character class"));
  CHECK(mentions(refusal("root ::= [z-a]"), "line 1, column 12: character range ends below its start"));
  CHECK(mentions(refusal("root ::= \"\\q\""), "unknown escape \\q"));
  CHECK(mentions(refusal("root ::= \"\\x4\""), "2 hex digits"));
  CHECK(mentions(refusal("root ::= * \"a\""), "'*' has nothing to repeat"));
  CHECK(mentions(refusal("root ::= \"a\"{3,1}"), "max below min"));
  CHECK(mentions(refusal("root ::= \"a\" @"), "unexpected '@'"));
  CHECK(mentions(refusal("root ::= \"a\" \"\xff\""), "invalid UTF-8"));
  CHECK(refusal("root ::= \"a\"\n\n# only a comment\nother ::= root \"b\"\n").empty());
}

TEST(grammar_refuses_left_recursion) {
  CHECK(mentions(refusal("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\""),
                 "line 2, column 1: rule 'expr' is left-recursive"));
  // Through another rule, and through a prefix that can be empty.
  CHECK(mentions(refusal("root ::= a\na ::= b \"x\"\nb ::= \"y\"? a"), "left-recursive"));
  CHECK(mentions(refusal("root ::= (\"a\"?)*"), "left-recursive"));
  // The check walks without recursion: a cycle through 50,000 rules is found, not a crash.
  CHECK(mentions(refusal(rule_chain(50'000, "", "r0 \"x\" | \"y\"")), "rule 'r0' is left-recursive"));
  // Right recursion is fine.
  CHECK(accepts("root ::= \"1\" (\"+\" root)?", "1+1+1"));
}

TEST(grammar_limits_refuse_by_name) {
  CHECK(mentions(limit([] { parse_grammar("root ::= \"a\"{99999}"); }), "repetition count above 10000"));
  // A group repeats as one rule reference; a long literal repeats as all its characters.
  CHECK(limit([] { parse_grammar("root ::= ((\"ab\"{1000}){1000}){1000}"); }).empty());
  CHECK(mentions(limit([] { parse_grammar("root ::= \"" + std::string(200, 'x') + "\"{9000}"); }),
                 "expand to more than 1000000 elements"));
  // Each optional copy is a rule: 21 repetitions of 10,000 make more rules than the limit.
  std::string many = "root ::=";
  for (int i = 0; i < 21; ++i) many += " \"a\"{0,10000}";
  CHECK(mentions(limit([&] { parse_grammar(many); }), "more than 200000 rules"));
  CHECK(mentions(limit([] { parse_grammar("root ::= \"" + std::string(kGrammarLimits.bytes, 'a') + "\""); }),
                 "bytes; the limit is 1048576"));
  // Groups are what the parser recurses into: 20,000 of them (40 KB) are refused where the
  // nesting passes the limit, which a grammar at the limit is not.
  CHECK(
      mentions(limit([] { parse_grammar(nested_groups(20'000)); }), "line 1, column 266: groups nest deeper than 256"));
  CHECK(accepts(nested_groups(kGrammarLimits.nesting), "a"));
}

TEST(grammar_long_rule_chains_need_no_stack) {
  // 50,000 rules, each the whole of the one before: parsed, checked and followed without
  // recursion (each stack stays one deep: nothing waits below a rule that ends its alternative).
  const std::string tail_chain = rule_chain(50'000, "", "\"a\"");
  CHECK(accepts(tail_chain, "a"));
  CHECK(!accepts(tail_chain, "b"));
  // With a character after each, every rule entered waits on the stack: 40,000 deep before the
  // first character. Following that costs more than one step's budget, and says so.
  const std::string deep = rule_chain(40'000, " \"x\"", "\"a\"");
  CHECK(limit([&] { parse_grammar(deep); }).empty());
  CHECK(mentions(limit([&] { matcher(deep); }), "too ambiguous or too deeply nested"));
  // 2,000 deep is followed.
  CHECK(accepts(rule_chain(2'000, " \"x\"", "\"a\""), "a" + std::string(1'999, 'x')));
}

TEST(grammar_matching_has_a_budget) {
  // Ambiguity that doubles the parses at each of 40 levels is refused, not followed: at the
  // start, or where it begins.
  CHECK(mentions(limit([] { matcher("root ::= ((\"a\"?)?){0,40} \"b\""); }), "too ambiguous"));
  GrammarMatcher later = matcher("root ::= \"x\" ((\"a\"?)?){0,40} \"b\"");
  CHECK(mentions(limit([&] { later.allows("xa"); }), "too ambiguous"));
  CHECK(mentions(limit([&] { later.advance("x"); }), "too ambiguous"));
  // Right recursion 5,000 deep is only a deep stack (read a character at a time, as tokens come).
  GrammarMatcher nested = matcher("root ::= \"(\" root \")\" | \"x\"");
  for (int i = 0; i < 5'000; ++i) nested.advance("(");
  nested.advance("x");
  CHECK(nested.allows(")") && !nested.allows("x") && !nested.complete());
  // A long alternation (a big enum) opens a parse per alternative, checked once per text.
  std::string words = "root ::= \"\\\"\" (\"w0\"";
  for (size_t i = 1; i < 20'000; ++i) words += tests::cat(" | \"w", i, "\"");
  words += ") \"\\\"\"";
  GrammarMatcher choice = matcher(words);
  choice.advance("\"w1");
  const std::vector<std::string_view> texts = {"2345\"", "x", "\"", "0000", "9"};
  CHECK((choice.allows_each(texts) == std::vector<bool>{true, false, true, true, true}));
  // A text of a million characters (a hostile vocabulary's token) is checked without recursion.
  const std::string long_text(1'000'000, 'a');
  const std::vector<std::string_view> one = {long_text};
  GrammarMatcher any = matcher("root ::= [a-z]*");
  const std::string refused = limit([&] { CHECK(any.allows_each(one)[0]); });
  CHECK(refused.empty() || mentions(refused, "too ambiguous or too deeply nested")) << refused;
}

namespace {

// A small SentencePiece-style vocabulary: token i has text kTexts[i]; 0 is the end of sequence.
// 12 is a control token (no text in output).
const std::vector<std::string> kTexts = {"</s>", "{",      "}",      "a", "b",  "ab",      "ba",
                                         "\"",   "<0xCE>", "<0xB1>", "x", "{}", "<|call|>"};
constexpr int32_t kCall = 12;

std::shared_ptr<const tokenizer::Tokenizer> tiny_tokenizer() {
  tokenizer::Vocab v;
  v.kind = tokenizer::VocabKind::kSpm;
  v.text = kTexts;
  for (size_t i = 0; i < kTexts.size(); ++i) {
    v.type.push_back(i == 0 || i == kCall           ? tokenizer::TokenType::kControl
                     : kTexts[i].starts_with("<0x") ? tokenizer::TokenType::kByte
                                                    : tokenizer::TokenType::kNormal);
    v.score.push_back(0.0f);
    v.id_of[kTexts[i]] = static_cast<uint32_t>(i);
  }
  v.eos = 0;
  return std::make_shared<const tokenizer::Tokenizer>(std::move(v));
}

SamplerParams constrained(const std::string& gbnf, float temperature) {
  SamplerParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.grammar = gbnf;
  return p;
}

// Draws until the end token (at most 50 steps), returning the text.
std::string generate(Sampler& sampler, const std::vector<float>& logits) {
  std::string text;
  for (int step = 0; step < 50; ++step) {
    const int32_t token = sampler.sample(logits);
    sampler.accept(token);
    if (token == 0) return text;
    text += kTexts[static_cast<size_t>(token)].starts_with("<0x") ? "?" : kTexts[static_cast<size_t>(token)];
  }
  return text + "...";
}

}  // namespace

TEST(sampler_grammar_forces_its_text_whatever_the_logits) {
  // The model wants "x" forever (then "}", and never the end); the grammar wants "{", a's and
  // b's, "}" and the end.
  std::vector<float> logits(kTexts.size(), 0.0f);
  logits[10] = 9.0f;
  logits[2] = 3.0f;
  logits[0] = -9.0f;
  Sampler greedy(constrained("root ::= \"{\" (\"a\" | \"b\")+ \"}\"", 0.0f), tiny_tokenizer());
  const std::string text = generate(greedy, logits);
  CHECK(text.front() == '{' && text.back() == '}' && text.size() >= 3) << text;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    SamplerParams p = constrained("root ::= \"{\" (\"a\" | \"b\")+ \"}\"", 1.5f);
    p.seed = seed;
    Sampler sampled(p, tiny_tokenizer());
    const std::string out = generate(sampled, logits);
    CHECK(out.size() >= 3 && out.front() == '{' && out.back() == '}' &&
          out.substr(1, out.size() - 2).find_first_not_of("ab") == std::string::npos)
        << out;
  }
}

TEST(sampler_grammar_keeps_the_filtered_candidates_it_allows) {
  // Top-k keeps "a" and "b"; the grammar allows only "b": it alone is left, with probability 1.
  std::vector<float> logits(kTexts.size(), 0.0f);
  logits[3] = 5.0f;
  logits[4] = 4.0f;
  SamplerParams p = constrained("root ::= \"b\" [ab]*", 1.0f);
  p.top_k = 2;
  Sampler sampler(p, tiny_tokenizer());
  const std::vector<Candidate>& only_b = sampler.distribution(logits);
  CHECK(only_b.size() == 1 && only_b[0].token == 4 && std::fabs(only_b[0].probability - 1.0f) < 1e-6f);
  // Top-k keeps "a" and "ab", neither allowed: the vocabulary is masked instead, then top-k
  // keeps the two best of what the grammar allows, "ba" and "b".
  logits[5] = 4.5f;
  logits[4] = 1.0f;
  logits[6] = 2.0f;
  const std::vector<Candidate>& masked = sampler.distribution(logits);
  CHECK(masked.size() == 2) << masked.size();
  for (const Candidate& c : masked) CHECK(c.token == 4 || c.token == 6) << c.token;
}

TEST(sampler_grammar_lets_the_end_through_only_when_complete) {
  std::vector<float> logits(kTexts.size(), -5.0f);
  logits[0] = 10.0f;  // the model wants to stop at once
  Sampler sampler(constrained("root ::= \"a\" \"b\"?", 0.0f), tiny_tokenizer());
  const int32_t first = sampler.sample(logits);
  CHECK(first == 3 || first == 5) << first;  // "a" or "ab", never the end
  sampler.accept(first);
  CHECK(sampler.sample(logits) == 0);
  // A character split over byte tokens: after <0xCE> the end is not allowed, <0xB1> is.
  Sampler alpha(constrained("root ::= \"\xce\xb1\"", 0.0f), tiny_tokenizer());
  CHECK(alpha.sample(logits) == 8);
  alpha.accept(8);
  CHECK(alpha.sample(logits) == 9);
  alpha.accept(9);
  CHECK(alpha.sample(logits) == 0);
}

TEST(grammar_token_terminals_read_whole_tokens_by_id_or_text) {
  // By id, without a vocabulary: a control token (no text) only where the grammar names it.
  GrammarMatcher m = matcher("root ::= \"a\" <[12]> \"b\"");
  CHECK(!m.allows_token(kCall, "") && m.allows_token(3, "a"));
  m.advance_token(3, "a");
  CHECK(m.allows_token(kCall, "") && !m.allows_token(4, "b") && !m.allows("b") && !m.complete());
  const std::vector<int32_t> ids = {kCall, 4, 5, 3};
  const std::vector<std::string_view> texts = {"", "b", "ab", "a"};
  CHECK((m.allows_each(ids, texts) == std::vector<bool>{true, false, false, false}));
  m.advance_token(kCall, "");
  CHECK(m.allows_token(4, "b") && !m.allows_token(kCall, ""));
  m.advance_token(4, "b");
  CHECK(m.complete());
  CHECK(refusal_code([&] { m.advance_token(kCall, ""); }) == "INVALID_ARGUMENT");

  // !<[id]>: any one token but that one, whole, whatever its text; a text token is read whole.
  GrammarMatcher other = matcher("root ::= !<[12]> \"}\"");
  CHECK(other.allows_token(5, "ab") && other.allows_token(10, "x") && !other.allows_token(kCall, ""));
  other.advance_token(5, "ab");
  CHECK(!other.allows_token(3, "a") && other.allows_token(2, "}"));

  // Between characters only: inside a character split over tokens, a token terminal waits.
  GrammarMatcher split = matcher("root ::= \"\xce\xb1\"? <[12]>");
  CHECK(split.allows_token(kCall, ""));
  split.advance_token(8, "\xce");
  CHECK(!split.allows_token(kCall, ""));
  split.advance_token(9, "\xb1");
  CHECK(split.allows_token(kCall, ""));

  // By text, through the vocabulary: the one token whose text it is.
  const auto vocabulary = tiny_tokenizer();
  const Grammar named = parse_grammar("root ::= <|call|> | !<|call|>", vocabulary.get());
  CHECK(named.elements[0].kind == ElementKind::kToken && named.elements[0].index == 12);
  CHECK(named.elements[2].kind == ElementKind::kTokenNot && named.elements[2].index == 12);
  const auto refused = [&](const std::string& gbnf, const tokenizer::Tokenizer* v) {
    try {
      parse_grammar(gbnf, v);
    } catch (const Error& e) {
      CHECK(e.code() == "GRAMMAR_INVALID") << e.code();
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(mentions(refused("root ::= <|call|>", nullptr), "needs the model's vocabulary"));
  CHECK(mentions(refused("root ::= <abab>", vocabulary.get()), "<abab> is not one token of the vocabulary"));
  CHECK(mentions(refused("root ::= <[13]>", vocabulary.get()), "token 13 is outside the vocabulary of 13 tokens"));
  CHECK(mentions(refused("root ::= <[x]>", nullptr), "expected <[id]>"));
  CHECK(mentions(refused("root ::= <|call", vocabulary.get()), "unterminated token"));
  // Repeated like any symbol.
  CHECK(refused("root ::= <[12]>{2} !<[0]>*", vocabulary.get()).empty());
}

TEST(sampler_grammar_draws_control_tokens_its_terminals_name) {
  // The model wants to stop, then "x"; the grammar wants "a", the control token, then the end.
  std::vector<float> logits(kTexts.size(), 0.0f);
  logits[0] = 9.0f;
  logits[10] = 5.0f;
  Sampler sampler(constrained("root ::= \"a\" <|call|>", 0.0f), tiny_tokenizer());
  CHECK(sampler.sample(logits) == 3);
  sampler.accept(3);
  CHECK(sampler.sample(logits) == kCall);
  sampler.accept(kCall);
  CHECK(sampler.sample(logits) == 0);
  // Without a terminal that names it, a control token is never drawn (it has no text to read).
  std::vector<float> wants_call(kTexts.size(), 0.0f);
  wants_call[kCall] = 9.0f;
  Sampler free_text(constrained("root ::= [a-z]+", 0.0f), tiny_tokenizer());
  CHECK(free_text.sample(wants_call) != kCall);
}

TEST(sampler_lazy_grammar_triggered_by_a_control_token) {
  // The trigger is a control token's text: the grammar holds from that token on, read as a token.
  SamplerParams p = constrained("root ::= <|call|> \"ab\"", 0.0f);
  p.grammar_triggers = {"<|call|>"};
  Sampler sampler(p, tiny_tokenizer());
  std::vector<float> logits(kTexts.size(), 0.0f);
  logits[10] = 9.0f;  // the model wants "x" (then "ab"): free until the trigger
  logits[5] = 1.0f;
  CHECK(sampler.sample(logits) == 10);
  sampler.accept(10);
  sampler.accept(kCall);
  CHECK(sampler.sample(logits) == 5);  // "ab", the best the grammar allows
  sampler.accept(5);
  CHECK(sampler.sample(logits) == 0);
  // A grammar that does not begin with its trigger token is refused when the token comes.
  SamplerParams wrong = constrained("root ::= \"ab\"", 0.0f);
  wrong.grammar_triggers = {"<|call|>"};
  Sampler refused(wrong, tiny_tokenizer());
  CHECK(refusal_code([&] { refused.accept(kCall); }) == "GRAMMAR_INVALID");
}

TEST(sampler_lazy_grammar_holds_from_its_trigger_on) {
  // The model wants "x" and, after the trigger, never "}": free text until "ab" appears (across
  // two tokens, "a" then "ba"), then the grammar, which began at the trigger, takes over.
  std::vector<float> logits(kTexts.size(), 0.0f);
  logits[10] = 9.0f;
  logits[0] = -9.0f;
  SamplerParams p = constrained("root ::= \"ab\" \"a\"* \"}\"", 0.0f);
  p.grammar_triggers = {"ab"};
  Sampler sampler(p, tiny_tokenizer());
  CHECK(sampler.sample(logits) == 10);  // free: "x", which the grammar would refuse
  sampler.accept(10);
  sampler.accept(3);  // "a": could begin the trigger, still free
  CHECK(sampler.sample(logits) == 10);
  sampler.accept(6);  // "ba": "xaba" holds "ab" from its third byte on; "aba" is read
  const int32_t next = sampler.sample(logits);
  CHECK(next == 3 || next == 2) << next;  // "a" or "}" only
  sampler.accept(2);
  CHECK(sampler.sample(logits) == 0);  // complete: only the end
  // Text after the trigger that the grammar refuses ends the generation by name.
  Sampler refusing(p, tiny_tokenizer());
  refusing.accept(5);  // "ab": the trigger
  std::string code;
  try {
    refusing.accept(6);  // "ba": "b" after "ab" is not in the grammar
  } catch (const Error& e) {
    code = e.code();
  }
  CHECK(code == "INVALID_ARGUMENT") << code;
  SamplerParams bad = constrained("root ::= \"ab\" \"}\"", 0.0f);
  bad.grammar_triggers = {"b"};
  Sampler mid(bad, tiny_tokenizer());
  code.clear();
  try {
    mid.accept(6);  // "ba" holds the trigger "b", but "ba" does not begin a sentence
  } catch (const Error& e) {
    code = e.code();
  }
  CHECK(code == "GRAMMAR_INVALID") << code;
}

TEST(sampler_grammar_refusals) {
  bool needs_tokenizer = false;
  try {
    Sampler sampler(constrained("root ::= \"a\"", 0.0f));
  } catch (const Error& e) {
    needs_tokenizer = e.code() == "INVALID_ARGUMENT" && mentions(e.what(), "tokenizer");
  }
  CHECK(needs_tokenizer);
  Sampler sampler(constrained("root ::= \"a\"", 0.0f), tiny_tokenizer());
  bool rejected = false;
  try {
    sampler.accept(4);
  } catch (const Error& e) {
    rejected = e.code() == "INVALID_ARGUMENT";
  }
  CHECK(rejected);
  // No token of this vocabulary spells "z".
  Sampler dead(constrained("root ::= \"z\"", 0.0f), tiny_tokenizer());
  bool dead_end = false;
  try {
    dead.sample(std::vector<float>(kTexts.size(), 0.0f));
  } catch (const Error& e) {
    dead_end = e.code() == "GRAMMAR_INVALID";
  }
  CHECK(dead_end);
}

TEST(sampler_logprobs_are_the_raw_log_softmax) {
  // Bias and temperature change the draw, not the reported log-probabilities.
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f};
  SamplerParams p;
  p.logprobs = 2;
  p.logit_bias = {{3, 100.0f}};
  Sampler sampler(p);
  CHECK(sampler.sample(logits) == 3);
  const std::optional<DrawLogprobs>& lp = sampler.last_logprobs();
  CHECK(lp.has_value());
  const double total = std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + std::exp(0.0);
  CHECK(lp->drawn.token == 3 && std::fabs(lp->drawn.logprob - (0.0 - std::log(total))) < 1e-5);
  CHECK(lp->top.size() == 2);
  CHECK(lp->top[0].token == 1 && std::fabs(lp->top[0].logprob - (3.0 - std::log(total))) < 1e-5);
  CHECK(lp->top[1].token == 2 && std::fabs(lp->top[1].logprob - (2.0 - std::log(total))) < 1e-5);
  Sampler off{SamplerParams{}};
  off.sample(logits);
  CHECK(!off.last_logprobs().has_value());
}

TEST(sampler_logprobs_after_sampling_report_the_draws_own_distribution) {
  // min_p 0.3 keeps tokens 1 and 2 (e^2 >= 0.3 e^3 > e^1), temperature 0.5 doubles their logits: the draw's
  // probabilities are e^6 and e^4 over their sum, and tokens 0 and 3 are not among the alternatives.
  const std::vector<float> logits{1.0f, 3.0f, 2.0f, 0.0f};
  SamplerParams p;
  p.temperature = 0.5f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.3f;
  p.logprobs = 3;
  p.logprobs_after_sampling = true;
  Sampler sampler(p);
  const int32_t drawn = sampler.sample(logits);
  const std::optional<DrawLogprobs>& lp = sampler.last_logprobs();
  CHECK(lp.has_value());
  const double total = std::exp(6.0) + std::exp(4.0);
  CHECK(lp->top.size() == 2) << lp->top.size();
  CHECK(lp->top[0].token == 1 && std::fabs(lp->top[0].logprob - (6.0 - std::log(total))) < 1e-5);
  CHECK(lp->top[1].token == 2 && std::fabs(lp->top[1].logprob - (4.0 - std::log(total))) < 1e-5);
  CHECK(lp->drawn.token == drawn && (drawn == 1 || drawn == 2));
  CHECK(lp->drawn.logprob == lp->top[drawn == 1 ? 0 : 1].logprob);
}
