#include "engine/grammar.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "base/error.h"

namespace bloomery::engine {

bool CharClass::contains(uint32_t code_point) const { return intersects(code_point, code_point); }

bool CharClass::intersects(uint32_t low, uint32_t high) const {
  if (!negated) {
    return std::any_of(ranges.begin(), ranges.end(), [&](const auto& r) { return r.first <= high && low <= r.second; });
  }
  // Negated: some code point of [low, high] is left uncovered by the (sorted, merged) ranges.
  uint32_t next = low;
  for (const auto& [first, last] : ranges) {
    if (last < next) continue;
    if (first > next) return true;
    if (last >= high) return false;
    next = last + 1;
  }
  return next <= high;
}

namespace {

constexpr size_t kNowhere = std::numeric_limits<size_t>::max();
constexpr uint32_t kUnbounded = std::numeric_limits<uint32_t>::max();

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

struct RuleDraft {
  std::string name;    // empty for a generated rule, which is
  size_t named_after;  // named after the rule it appears in (kNowhere for a named rule)
  std::vector<std::vector<GrammarElement>> alternatives;
  bool defined = false;
  size_t defined_at = kNowhere;
  size_t first_use = kNowhere;
};

class Parser {
 public:
  Parser(std::string_view text, const tokenizer::Tokenizer* vocabulary) : text_(text), vocabulary_(vocabulary) {}

  Grammar parse() {
    if (text_.size() > kGrammarLimits.bytes) {
      too_complex("the grammar is " + std::to_string(text_.size()) + " bytes; the limit is " +
                  std::to_string(kGrammarLimits.bytes));
    }
    skip_space(true);
    while (!at_end()) {
      const size_t at = pos_;
      const std::string_view name = parse_name();
      if (name.empty()) fail(at, "expected a rule name");
      skip_space(false);
      if (text_.substr(pos_, 3) != "::=") fail(pos_, "expected ::= after rule name '" + std::string(name) + "'");
      pos_ += 3;
      const uint32_t id = rule_id(name, kNowhere);
      if (rules_[id].defined) fail(at, "rule '" + std::string(name) + "' is defined twice");
      rules_[id].defined = true;
      rules_[id].defined_at = at;
      current_rule_ = id;
      skip_space(true);
      parse_alternatives(id, false);
      if (!at_end() && peek() != '\n' && peek() != '\r') fail(pos_, "unexpected " + describe(peek()));
      skip_space(true);
    }
    return finish();
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& what, const char* code = "GRAMMAR_INVALID") const {
    at = std::min(at, text_.size());
    size_t line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < at; ++i) {
      if (text_[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    throw Error(
        code, "grammar line " + std::to_string(line) + ", column " + std::to_string(at - line_start + 1) + ": " + what);
  }

  [[noreturn]] static void too_complex(const std::string& what) { throw Error("GRAMMAR_TOO_COMPLEX", what); }

  static std::string describe(char c) {
    if (c == '\n') return "end of line";
    // Built in place: GCC 12 flags "'" + std::string(1, c) with a false -Wrestrict.
    std::string quoted(3, '\'');
    quoted[1] = c;
    return quoted;
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return text_[pos_]; }

  // Blanks and # comments; line ends too when `newlines` (inside groups, after ::= and |).
  void skip_space(bool newlines) {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string_view parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(peek())) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  uint32_t rule_id(std::string_view name, size_t used_at) {
    auto [it, added] = ids_.try_emplace(std::string(name), static_cast<uint32_t>(rules_.size()));
    if (added) {
      count_rule();
      rules_.push_back({std::string(name), kNowhere, {}, false, kNowhere, kNowhere});
    }
    if (used_at != kNowhere && rules_[it->second].first_use == kNowhere) rules_[it->second].first_use = used_at;
    return it->second;
  }

  // A rule for a group or a repetition, named after the rule it appears in (for messages).
  uint32_t generated_rule(size_t at) {
    count_rule();
    rules_.push_back({{}, current_rule_, {}, true, at, kNowhere});
    return static_cast<uint32_t>(rules_.size() - 1);
  }

  void count_rule() {
    if (rules_.size() >= kGrammarLimits.rules) {
      too_complex("the grammar has more than " + std::to_string(kGrammarLimits.rules) +
                  " rules (each group and each optional copy of a repetition is one)");
    }
  }

  const std::string& name_of(uint32_t rule) const {
    const RuleDraft& r = rules_[rule];
    return r.named_after == kNowhere ? r.name : rules_[r.named_after].name;
  }

  uint32_t add_class(CharClass c) {
    classes_.push_back(std::move(c));
    return static_cast<uint32_t>(classes_.size() - 1);
  }

  GrammarElement single(uint32_t code_point) {
    return {ElementKind::kChar, add_class({{{code_point, code_point}}, false})};
  }

  // A sequence may add rules (groups, repetitions), so rules_ is indexed only once it is read.
  void parse_alternatives(uint32_t rule, bool nested) {
    std::vector<GrammarElement> first = parse_sequence(nested);
    rules_[rule].alternatives.push_back(std::move(first));
    while (!at_end() && peek() == '|') {
      ++pos_;
      skip_space(true);
      std::vector<GrammarElement> next = parse_sequence(nested);
      rules_[rule].alternatives.push_back(std::move(next));
    }
  }

  std::vector<GrammarElement> parse_sequence(bool nested) {
    std::vector<GrammarElement> seq;
    size_t symbol = kNowhere;  // where the last symbol (what a repetition applies to) starts in seq
    for (;;) {
      skip_space(nested);
      if (at_end()) break;
      const size_t at = pos_;
      const char c = peek();
      if (c == '"') {
        ++pos_;
        symbol = seq.size();
        while (at_end() || peek() != '"') {
          if (at_end() || peek() == '\n') fail(at, "unterminated string literal");
          seq.push_back(single(parse_char()));
        }
        ++pos_;
      } else if (c == '[') {
        symbol = seq.size();
        seq.push_back({ElementKind::kChar, add_class(parse_class())});
      } else if (c == '.') {
        ++pos_;
        symbol = seq.size();
        seq.push_back({ElementKind::kChar, add_class({{}, true})});
      } else if (is_name_char(c)) {
        const std::string_view name = parse_name();
        const size_t after = pos_;
        skip_space(false);
        if (text_.substr(pos_, 3) == "::=") fail(at, "expected a line break before rule '" + std::string(name) + "'");
        pos_ = after;
        symbol = seq.size();
        seq.push_back({ElementKind::kRule, rule_id(name, at)});
      } else if (c == '<' || (c == '!' && text_.substr(pos_, 2) == "!<")) {
        symbol = seq.size();
        seq.push_back(parse_token());
      } else if (c == '(') {
        ++pos_;
        skip_space(true);
        // Groups parse by recursion: their depth is what bounds the parser's stack.
        if (++nesting_ > kGrammarLimits.nesting) {
          fail(at, "groups nest deeper than " + std::to_string(kGrammarLimits.nesting), "GRAMMAR_TOO_COMPLEX");
        }
        const uint32_t group = generated_rule(at);
        parse_alternatives(group, true);
        if (at_end() || peek() != ')') fail(pos_, "expected ')' to close the group opened at column " + column(at));
        ++pos_;
        --nesting_;
        symbol = seq.size();
        seq.push_back({ElementKind::kRule, group});
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (symbol == kNowhere) fail(at, "'" + std::string(1, c) + "' has nothing to repeat");
        uint32_t min = 0;
        uint32_t max = kUnbounded;
        ++pos_;
        if (c == '+') min = 1;
        if (c == '?') max = 1;
        if (c == '{') parse_bounds(at, min, max);
        repeat(seq, symbol, min, max, at);
        symbol = kNowhere;
      } else {
        break;
      }
    }
    return seq;
  }

  std::string column(size_t at) const {
    const size_t line_start = text_.rfind('\n', at == 0 ? 0 : at - 1);
    return std::to_string(line_start == std::string_view::npos ? at + 1 : at - line_start);
  }

  uint32_t parse_count(size_t at) {
    skip_space(true);
    const size_t start = pos_;
    uint64_t n = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      n = n * 10 + static_cast<uint64_t>(peek() - '0');
      if (n > kGrammarLimits.repetition) {
        fail(at, "repetition count above " + std::to_string(kGrammarLimits.repetition), "GRAMMAR_TOO_COMPLEX");
      }
      ++pos_;
    }
    if (pos_ == start) fail(pos_, "expected a repetition count");
    skip_space(true);
    return static_cast<uint32_t>(n);
  }

  // {m}, {m,} or {m,n}; the '{' is read.
  void parse_bounds(size_t at, uint32_t& min, uint32_t& max) {
    min = parse_count(at);
    max = min;
    if (!at_end() && peek() == ',') {
      ++pos_;
      skip_space(true);
      max = !at_end() && peek() == '}' ? kUnbounded : parse_count(at);
    }
    if (at_end() || peek() != '}') fail(pos_, "expected '}' to close the repetition");
    ++pos_;
    if (max < min) fail(at, "repetition {" + std::to_string(min) + "," + std::to_string(max) + "} has max below min");
  }

  // Replaces seq[symbol..] by `min` copies of it followed by the optional rest: a rule
  // R ::= S R | (empty) when unbounded, otherwise (max - min) nested optional copies.
  void repeat(std::vector<GrammarElement>& seq, size_t symbol, uint32_t min, uint32_t max, size_t at) {
    const std::vector<GrammarElement> item(seq.begin() + static_cast<ptrdiff_t>(symbol), seq.end());
    seq.resize(symbol);
    if (item.empty()) return;
    const uint64_t copies = max == kUnbounded ? static_cast<uint64_t>(min) + 1 : max;
    copied_ += copies * item.size();
    if (copied_ > kGrammarLimits.copied_elements) {
      fail(at, "the repetitions expand to more than " + std::to_string(kGrammarLimits.copied_elements) + " elements",
           "GRAMMAR_TOO_COMPLEX");
    }
    for (uint32_t i = 0; i < min; ++i) seq.insert(seq.end(), item.begin(), item.end());
    if (max == kUnbounded) {
      const uint32_t loop = generated_rule(at);
      std::vector<GrammarElement> again = item;
      again.push_back({ElementKind::kRule, loop});
      rules_[loop].alternatives = {std::move(again), {}};
      seq.push_back({ElementKind::kRule, loop});
      return;
    }
    if (max == min) return;
    uint32_t rest = 0;
    bool has_rest = false;
    for (uint32_t i = min; i < max; ++i) {
      const uint32_t optional = generated_rule(at);
      std::vector<GrammarElement> once = item;
      if (has_rest) once.push_back({ElementKind::kRule, rest});
      rules_[optional].alternatives = {std::move(once), {}};
      rest = optional;
      has_rest = true;
    }
    seq.push_back({ElementKind::kRule, rest});
  }

  // <[id]>, <text> (the text of exactly one token of the vocabulary, brackets included), or
  // either after '!' (any one token but that one).
  GrammarElement parse_token() {
    const size_t at = pos_;
    const bool negated = peek() == '!';
    if (negated) ++pos_;
    const size_t open = pos_;
    ++pos_;
    uint64_t id = 0;
    if (!at_end() && peek() == '[') {
      ++pos_;
      const size_t digits = pos_;
      while (!at_end() && peek() >= '0' && peek() <= '9') {
        id = id * 10 + static_cast<uint64_t>(peek() - '0');
        if (id > std::numeric_limits<int32_t>::max()) fail(at, "token id out of range");
        ++pos_;
      }
      if (pos_ == digits || text_.substr(pos_, 2) != "]>") {
        fail(at, "expected <[id]>: a token id in brackets");
      }
      pos_ += 2;
      if (vocabulary_ && id >= vocabulary_->vocab().size()) {
        fail(at, "token " + std::to_string(id) + " is outside the vocabulary of " +
                     std::to_string(vocabulary_->vocab().size()) + " tokens");
      }
    } else {
      while (!at_end() && peek() != '>' && peek() != '\n') ++pos_;
      if (at_end() || peek() != '>') fail(at, "unterminated token: expected '>'");
      ++pos_;
      const std::string_view name = text_.substr(open, pos_ - open);
      if (!vocabulary_)
        fail(at, "the token " + std::string(name) + " is named by its text, which needs the model's vocabulary");
      std::vector<uint32_t> ids;
      try {
        ids = vocabulary_->tokenize(name, false, true);
      } catch (const Error&) {
        // Text the vocabulary cannot spell is no token of it either.
      }
      if (ids.size() != 1) fail(at, std::string(name) + " is not one token of the vocabulary");
      id = ids[0];
    }
    return {negated ? ElementKind::kTokenNot : ElementKind::kToken, static_cast<uint32_t>(id)};
  }

  CharClass parse_class() {
    const size_t at = pos_;
    ++pos_;
    CharClass out;
    if (!at_end() && peek() == '^') {
      out.negated = true;
      ++pos_;
    }
    while (at_end() || peek() != ']') {
      if (at_end() || peek() == '\n') fail(at, "unterminated character class");
      const uint32_t low = parse_char();
      uint32_t high = low;
      if (pos_ + 1 < text_.size() && peek() == '-' && text_[pos_ + 1] != ']') {
        const size_t dash = pos_;
        ++pos_;
        high = parse_char();
        if (high < low) fail(dash, "character range ends below its start");
      }
      out.ranges.emplace_back(low, high);
    }
    ++pos_;
    std::sort(out.ranges.begin(), out.ranges.end());
    std::vector<std::pair<uint32_t, uint32_t>> merged;
    for (const auto& r : out.ranges) {
      if (!merged.empty() && r.first <= merged.back().second + 1) {
        merged.back().second = std::max(merged.back().second, r.second);
      } else {
        merged.push_back(r);
      }
    }
    out.ranges = std::move(merged);
    return out;
  }

  uint32_t parse_hex(size_t digits, size_t at) {
    uint32_t value = 0;
    for (size_t i = 0; i < digits; ++i) {
      const int d = at_end() ? -1 : hex_value(peek());
      if (d < 0) fail(at, "escape needs " + std::to_string(digits) + " hex digits");
      value = value * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    if (value > 0x10ffff) fail(at, "escape names a code point above U+10FFFF");
    return value;
  }

  // One character of a literal or class: an escape, or one UTF-8 encoded code point.
  uint32_t parse_char() {
    const size_t at = pos_;
    const auto lead = static_cast<uint8_t>(peek());
    if (lead == '\\') {
      ++pos_;
      if (at_end()) fail(at, "unfinished escape");
      const char e = peek();
      ++pos_;
      switch (e) {
        case 'x':
          return parse_hex(2, at);
        case 'u':
          return parse_hex(4, at);
        case 'U':
          return parse_hex(8, at);
        case 't':
          return '\t';
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
          return static_cast<uint8_t>(e);
        default:
          fail(at, "unknown escape \\" + std::string(1, e));
      }
    }
    const size_t length = lead < 0x80           ? 1
                          : (lead >> 5) == 0x6  ? 2
                          : (lead >> 4) == 0xe  ? 3
                          : (lead >> 3) == 0x1e ? 4
                                                : 0;
    if (length == 0 || pos_ + length > text_.size()) fail(at, "invalid UTF-8");
    uint32_t value = length == 1 ? lead : lead & (0x7f >> length);
    for (size_t i = 1; i < length; ++i) {
      const auto next = static_cast<uint8_t>(text_[pos_ + i]);
      if ((next & 0xc0) != 0x80) fail(at, "invalid UTF-8");
      value = (value << 6) | (next & 0x3f);
    }
    pos_ += length;
    return value;
  }

  Grammar finish() {
    for (const RuleDraft& rule : rules_) {
      if (!rule.defined) fail(rule.first_use, "rule '" + rule.name + "' is not defined");
    }
    const auto root = ids_.find("root");
    if (root == ids_.end()) fail(text_.size(), "the grammar has no rule named root");
    refuse_left_recursion();

    Grammar g;
    g.root = root->second;
    g.classes = std::move(classes_);
    for (const RuleDraft& rule : rules_) {
      std::vector<uint32_t>& starts = g.alternatives.emplace_back();
      for (const auto& alt : rule.alternatives) {
        starts.push_back(static_cast<uint32_t>(g.elements.size()));
        g.elements.insert(g.elements.end(), alt.begin(), alt.end());
        g.elements.push_back({ElementKind::kEnd, 0});
      }
    }
    return g;
  }

  // A rule that can begin with itself, reading nothing in between, would send the matcher
  // into endless expansion: find such a cycle over "may begin with" edges and refuse it. Both
  // passes take time linear in the grammar and no stack: a chain of many rules is ordinary input.
  void refuse_left_recursion() const {
    const size_t n = rules_.size();
    const std::vector<bool> nullable = nullable_rules();
    std::vector<std::vector<uint32_t>> begins_with(n);
    for (size_t r = 0; r < n; ++r) {
      for (const auto& alt : rules_[r].alternatives) {
        for (const GrammarElement& e : alt) {
          if (e.kind != ElementKind::kRule) break;
          begins_with[r].push_back(e.index);
          if (!nullable[e.index]) break;
        }
      }
    }
    // Depth-first, with an explicit stack of (rule, next edge to follow).
    enum : uint8_t { kUnseen, kOnPath, kDone };
    std::vector<uint8_t> state(n, kUnseen);
    std::vector<std::pair<uint32_t, size_t>> path;
    for (uint32_t start = 0; start < n; ++start) {
      if (state[start] != kUnseen) continue;
      state[start] = kOnPath;
      path.emplace_back(start, 0);
      while (!path.empty()) {
        auto& [rule, edge] = path.back();
        if (edge == begins_with[rule].size()) {
          state[rule] = kDone;
          path.pop_back();
          continue;
        }
        const uint32_t next = begins_with[rule][edge++];
        if (state[next] == kOnPath) {
          fail(rules_[next].defined_at, "rule '" + name_of(next) + "' is left-recursive");
        }
        if (state[next] == kUnseen) {
          state[next] = kOnPath;
          path.emplace_back(next, 0);
        }
      }
    }
  }

  // The rules that can match the empty text: a worklist from the empty alternatives up, each
  // alternative counting the elements it still waits on.
  std::vector<bool> nullable_rules() const {
    const size_t n = rules_.size();
    std::vector<bool> nullable(n, false);
    struct Waiting {
      uint32_t rule;
      size_t alternative;
    };
    std::vector<std::vector<Waiting>> waiting_on(n);  // alternatives that hold each rule
    std::vector<std::vector<size_t>> missing(n);      // per rule and alternative: elements not yet nullable
    std::vector<uint32_t> found;
    for (uint32_t r = 0; r < n; ++r) {
      const auto& alts = rules_[r].alternatives;
      missing[r].assign(alts.size(), 0);
      for (size_t a = 0; a < alts.size(); ++a) {
        const bool has_char = std::any_of(alts[a].begin(), alts[a].end(),
                                          [](const GrammarElement& e) { return e.kind != ElementKind::kRule; });
        if (has_char) {
          missing[r][a] = kNowhere;  // never empty
          continue;
        }
        missing[r][a] = alts[a].size();
        for (const GrammarElement& e : alts[a]) waiting_on[e.index].push_back({r, a});
        if (alts[a].empty() && !nullable[r]) {
          nullable[r] = true;
          found.push_back(r);
        }
      }
    }
    while (!found.empty()) {
      const uint32_t rule = found.back();
      found.pop_back();
      for (const auto& [holder, alternative] : waiting_on[rule]) {
        if (--missing[holder][alternative] == 0 && !nullable[holder]) {
          nullable[holder] = true;
          found.push_back(holder);
        }
      }
    }
    return nullable;
  }

  std::string_view text_;
  const tokenizer::Tokenizer* vocabulary_;
  size_t pos_ = 0;
  std::vector<RuleDraft> rules_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<CharClass> classes_;
  uint32_t current_rule_ = 0;
  uint64_t copied_ = 0;  // elements the repetitions have copied so far
  size_t nesting_ = 0;   // groups open around the position
};

}  // namespace

Grammar parse_grammar(std::string_view text, const tokenizer::Tokenizer* vocabulary) {
  return Parser(text, vocabulary).parse();
}

}  // namespace bloomery::engine
