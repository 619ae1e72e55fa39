// Fuzzes the GBNF parser and matcher with random grammars, mutations of valid ones and
// adversarial shapes (deep nesting, long rule chains, left recursion through empty rules, huge
// repetitions, wide alternations, bad UTF-8), then walks each grammar that parses with random
// texts. Every outcome must be a result or an engine Error with a grammar code; each case must
// end quickly. The seed is printed; BLOOMERY_FUZZ_SEED sets it.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/grammar.h"
#include "engine/grammar_matcher.h"
#include "tests/check.h"
#include "tests/text.h"

using namespace bloomery;
using namespace bloomery::engine;

namespace {

class Fuzzer {
 public:
  explicit Fuzzer(uint64_t seed) : rng_(seed) {}

  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng_() % n); }
  bool chance(int percent) { return below(100) < static_cast<size_t>(percent); }
  template <typename T>
  const T& pick(const std::vector<T>& xs) {
    return xs[below(xs.size())];
  }

  // A character of a literal or class: plain, escaped, multi-byte, or a byte that is not UTF-8.
  std::string character() {
    static const std::vector<std::string> kChars = {"a",
                                                    "b",
                                                    "z",
                                                    "0",
                                                    "9",
                                                    " ",
                                                    "{",
                                                    "}",
                                                    "[",
                                                    "]",
                                                    ":",
                                                    ",",
                                                    "-",
                                                    "\\n",
                                                    "\\t",
                                                    "\\\\",
                                                    "\\\"",
                                                    "\\x41",
                                                    "\\u00e9",
                                                    "\\U0001F600",
                                                    "\xc3\xa9",
                                                    "\xe2\x82\xac",
                                                    "\xf0\x9f\x98\x80",
                                                    "\xff",
                                                    "\xc3",
                                                    "\\x",
                                                    "\\q",
                                                    "\\u12",
                                                    "\\U00110000",
                                                    "^"};
    return pick(kChars);
  }

  std::string literal() {
    std::string out = "\"";
    for (size_t n = below(6); n > 0; --n) out += character();
    if (!chance(3)) out += "\"";
    return out;
  }

  std::string char_class() {
    std::string out = chance(30) ? "[^" : "[";
    for (size_t n = 1 + below(4); n > 0; --n) {
      out += character();
      if (chance(40)) out += tests::cat("-", character());
    }
    if (!chance(3)) out += "]";
    return out;
  }

  std::string repetition() {
    static const std::vector<std::string> kReps = {"*",     "+",       "?",         "{2}",     "{0,3}", "{1,}",
                                                   "{3,1}", "{10000}", "{0,10000}", "{99999}", "{",     "{,2}"};
    return pick(kReps);
  }

  // A sequence of symbols, `depth` groups deep at most.
  std::string sequence(size_t rules, size_t depth) {
    std::string out;
    for (size_t n = 1 + below(4); n > 0; --n) {
      switch (below(6)) {
        case 0:
        case 1:
          out += literal();
          break;
        case 2:
          out += char_class();
          break;
        case 3:
          out += chance(10) ? "undefined-rule" : tests::cat("r", below(rules));
          break;
        case 4:
          out += depth > 0 ? tests::cat("(", alternatives(rules, depth - 1), ")") : ".";
          break;
        default:
          out += ".";
      }
      if (chance(25)) out += repetition();
      out += chance(10) ? "\n  " : " ";
    }
    return out;
  }

  std::string alternatives(size_t rules, size_t depth) {
    std::string out = sequence(rules, depth);
    for (size_t n = below(3); n > 0; --n) out += chance(30) ? " |\n " : tests::cat(" | ", sequence(rules, depth));
    if (chance(10)) out += " |";
    return out;
  }

  std::string random_grammar() {
    const size_t rules = 1 + below(6);
    std::string g;
    for (size_t r = 0; r < rules; ++r) {
      g += tests::cat(r == 0 ? "root" : tests::cat("r", r), " ::= ", alternatives(rules, below(4)), "\n");
      if (chance(10)) g += "# a comment\n";
    }
    return g;
  }

  std::string adversarial() {
    const size_t n = pick(std::vector<size_t>{10, 255, 256, 257, 1000, 20'000});
    switch (below(7)) {
      case 0:
        return tests::cat("root ::= ", std::string(n, '('), "\"a\"", std::string(n, ')'));
      case 1: {  // a chain, each rule the whole of the next (or with a character after it)
        const std::string tail = chance(50) ? "" : " \"x\"";
        std::string g = "root ::= r0\n";
        for (size_t i = 0; i + 1 < n; ++i) g += tests::cat("r", i, " ::= r", i + 1, tail, "\n");
        return g + tests::cat("r", n - 1, chance(50) ? " ::= \"a\"\n" : " ::= r0 \"a\" | \"b\"\n");
      }
      case 2:  // left recursion through rules that can be empty
        return "root ::= a b root \"x\" | \"y\"\na ::= \"p\"?\nb ::= a*\n";
      case 3:  // nested empty-able repetitions: ambiguity that doubles per level
        return tests::cat("root ::= ", std::string(std::min<size_t>(n, 60), '('), "\"a\"?",
                          std::string(std::min<size_t>(n, 60), ')'), "{0,40} \"b\"");
      case 4: {  // a wide alternation
        std::string g = "root ::= (\"w0\"";
        for (size_t i = 1; i < n * 5; ++i) g += tests::cat(" | \"w", i, "\"");
        return g + ")+";
      }
      case 5:  // nested repetitions that multiply
        return tests::cat("root ::= ((\"ab\"{", below(2000), "}){", below(2000), "})");
      default:  // right recursion, deep
        return "root ::= \"(\" root \")\" | \"x\"";
    }
  }

  std::string mutate(std::string g) {
    for (size_t n = 1 + below(4); n > 0 && !g.empty(); --n) {
      const size_t at = below(g.size());
      switch (below(5)) {
        case 0:
          g[at] = static_cast<char>(below(256));
          break;
        case 1:
          g.erase(at, 1 + below(4));
          break;
        case 2:
          g.insert(at, pick(std::vector<std::string>{"(", ")", "|", "*", "\"", "[", "]", "::=", "\n", "root", "\\"}));
          break;
        case 3:
          g.resize(at);
          break;
        default:
          g.insert(at, g.substr(at, below(64)));
      }
    }
    return g;
  }

  std::string text() {
    static const std::vector<std::string> kPieces = {
        "a",        "b",    "ab",   "{",    "}",    "[",    "]",        "\"",   ":",
        ",",        " ",    "\n",   "0",    "12",   "x",    "(",        ")",    "w1",
        "\xc3\xa9", "\xc3", "\xa9", "\xff", "null", "true", "\xe2\x82", "\xac", "\xf0\x9f\x98\x80"};
    std::string out;
    for (size_t n = 1 + below(3); n > 0; --n) out += pick(kPieces);
    return out;
  }

 private:
  std::mt19937_64 rng_;
};

const char* const kJson =
    "root ::= value\n"
    "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
    "array ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" "
    "ws\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)? ws\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

bool is_grammar_code(const std::string& code) {
  return code == "GRAMMAR_INVALID" || code == "GRAMMAR_TOO_COMPLEX" || code == "INVALID_ARGUMENT";
}

}  // namespace

TEST(grammar_fuzz_every_outcome_is_a_result_or_a_coded_error) {
  const char* env = std::getenv("BLOOMERY_FUZZ_SEED");
  const uint64_t seed = env ? std::strtoull(env, nullptr, 0) : 0x6b6e6f62;
  std::printf("  grammar fuzz seed: %llu (set BLOOMERY_FUZZ_SEED to reproduce)\n",
              static_cast<unsigned long long>(seed));
  Fuzzer fuzz(seed);
  constexpr int kCases = 3000;
  int parsed = 0;
  int followed = 0;
  int refused = 0;
  const auto started = std::chrono::steady_clock::now();
  for (int i = 0; i < kCases; ++i) {
    const int kind = static_cast<int>(fuzz.below(10));
    const std::string g = kind < 4   ? fuzz.random_grammar()
                          : kind < 7 ? fuzz.mutate(kJson)
                          : kind < 9 ? fuzz.adversarial()
                                     : fuzz.mutate(fuzz.adversarial());
    const auto case_start = std::chrono::steady_clock::now();
    try {
      auto grammar = std::make_shared<const Grammar>(parse_grammar(g));
      ++parsed;
      GrammarMatcher m(grammar);
      std::vector<std::string> texts(16);
      for (std::string& t : texts) t = fuzz.text();
      const std::vector<std::string_view> views(texts.begin(), texts.end());
      for (int step = 0; step < 6; ++step) {
        const std::vector<bool> each = m.allows_each(views);
        for (size_t t = 0; t < texts.size(); t += 5) {
          CHECK(each[t] == m.allows(texts[t])) << "seed " << seed << " case " << i << ": allows_each and allows differ";
        }
        const std::string next = texts[fuzz.below(texts.size())];
        if (m.allows(next)) m.advance(next);
        (void)m.complete();
      }
      ++followed;
    } catch (const Error& e) {
      ++refused;
      CHECK(is_grammar_code(e.code())) << "seed " << seed << " case " << i << ": " << e.code() << ": " << e.what();
    } catch (const std::exception& e) {
      CHECK(false) << "seed " << seed << " case " << i << ": not an engine error: " << e.what();
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - case_start).count();
    CHECK(ms < 2000) << "seed " << seed << " case " << i << " took " << ms << " ms";
  }
  const double total = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  std::printf("  %d grammars: %d parsed, %d followed, %d refused by code, in %.0f ms\n", kCases, parsed, followed,
              refused, total);
  // The cases must reach the matcher and the refusals both, not stop at the parser.
  CHECK(followed > kCases / 10 && refused > kCases / 10) << followed << " followed, " << refused << " refused";
}
