#include "engine/grammar_matcher.h"

#include <algorithm>

#include "base/error.h"

namespace bloomery::engine {

namespace {

// Bytes of the UTF-8 sequence `lead` begins; 0 for a byte that cannot begin one.
size_t sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xe) return 3;
  if ((lead >> 3) == 0x1e) return 4;
  return 0;
}

// The code point of a whole sequence, or the range of those an unfinished one can still become;
// false when the bytes are not UTF-8: a malformed continuation byte, an overlong form (which
// would let a grammar's characters through spelled another way), a surrogate, or beyond U+10FFFF.
bool decode(std::string_view bytes, size_t length, uint32_t& low, uint32_t& high) {
  static constexpr uint32_t kShortest[5] = {0, 0, 0x80, 0x800, 0x10000};
  const auto lead = static_cast<uint8_t>(bytes[0]);
  uint32_t value = length == 1 ? lead : lead & (0x7fu >> length);
  for (size_t i = 1; i < bytes.size(); ++i) {
    const auto next = static_cast<uint8_t>(bytes[i]);
    if ((next & 0xc0) != 0x80) return false;
    value = (value << 6) | (next & 0x3f);
  }
  const size_t missing_bits = 6 * (length - bytes.size());
  low = std::max(value << missing_bits, kShortest[length]);
  high = std::min((value << missing_bits) | ((1u << missing_bits) - 1), 0x10ffffu);
  if (low > high) return false;
  return bytes.size() < length || low < 0xd800 || low > 0xdfff;
}

// The character of a text that starts at some byte: whole (low == high) or unfinished (the
// range of code points it can still become).
struct TextChar {
  uint32_t low = 0;
  uint32_t high = 0;
  size_t length = 0;  // bytes of the whole sequence
  bool whole = false;
};

// The character of `text` at byte `at`; false when it cannot be UTF-8.
bool char_at(std::string_view text, size_t at, TextChar& out) {
  out.length = sequence_length(static_cast<uint8_t>(text[at]));
  if (out.length == 0) return false;
  const std::string_view sequence = text.substr(at, out.length);
  out.whole = sequence.size() == out.length;
  return decode(sequence, out.length, out.low, out.high);
}

// The code points a class covers, as sorted inclusive ranges (its complement when negated).
std::vector<std::pair<uint32_t, uint32_t>> covered(const CharClass& c) {
  if (!c.negated) return c.ranges;
  std::vector<std::pair<uint32_t, uint32_t>> out;
  uint32_t next = 0;
  for (const auto& [first, last] : c.ranges) {
    if (first > next) out.emplace_back(next, first - 1);
    next = std::max(next, last + 1);
  }
  if (next <= 0x10ffff) out.emplace_back(next, 0x10ffff);
  return out;
}

// A stack made costs an allocation besides its elements: about as much as 32 checks of a
// text's character against a class, the budget's unit.
constexpr uint64_t kStackCost = 32;

}  // namespace

void GrammarMatcher::Budget::spend(uint64_t units) {
  spent_ += units;
  if (spent_ > kGrammarMatchBudget) {
    throw Error("GRAMMAR_TOO_COMPLEX",
                "the grammar is too ambiguous or too deeply nested to follow: one step takes more than " +
                    std::to_string(kGrammarMatchBudget) + " units of work (parses opened and characters checked)");
  }
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  Budget budget;
  for (uint32_t start : grammar_->alternatives[grammar_->root]) {
    Stack stack;
    if (grammar_->elements[start].kind != ElementKind::kEnd) stack.push_back(start);
    expand(std::move(stack), state_.stacks, budget);
  }
  deduplicate(state_.stacks);
}

bool GrammarMatcher::top_reads(const Stack& stack, uint32_t low, uint32_t high) const {
  if (stack.empty()) return false;
  const GrammarElement& top = grammar_->elements[stack.back()];
  return top.kind == ElementKind::kChar && grammar_->classes[top.index].intersects(low, high);
}

bool GrammarMatcher::top_takes(const Stack& stack, int32_t token) const {
  if (stack.empty()) return false;
  const GrammarElement& top = grammar_->elements[stack.back()];
  const bool same = static_cast<int64_t>(top.index) == token;
  return (top.kind == ElementKind::kToken && same) || (top.kind == ElementKind::kTokenNot && !same);
}

std::vector<GrammarMatcher::Stack> GrammarMatcher::after_token(int32_t token, Budget& budget) const {
  std::vector<Stack> out;
  if (!state_.partial.empty()) return out;
  for (const Stack& stack : state_.stacks) {
    budget.spend(1);
    if (!top_takes(stack, token)) continue;
    for (Stack& s : after_char(stack, budget)) out.push_back(std::move(s));
  }
  deduplicate(out);
  return out;
}

bool GrammarMatcher::allows_token(int32_t token, std::string_view bytes) const {
  Budget budget;
  return !after_token(token, budget).empty() || allows(bytes, budget);
}

std::vector<bool> GrammarMatcher::allows_each(std::span<const int32_t> tokens,
                                              std::span<const std::string_view> texts) const {
  if (tokens.size() != texts.size()) throw Error("INVALID_ARGUMENT", "allows_each needs one text per token");
  std::vector<bool> allowed = allows_each(texts);
  if (!state_.partial.empty()) return allowed;
  // Only the stacks at a token terminal look at the ids; a state has few of them.
  Budget budget;
  for (const Stack& stack : state_.stacks) {
    if (stack.empty() || grammar_->elements[stack.back()].kind == ElementKind::kChar) continue;
    budget.spend(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (!allowed[i] && top_takes(stack, tokens[i])) allowed[i] = true;
    }
  }
  return allowed;
}

bool GrammarMatcher::allows(std::string_view bytes) const {
  Budget budget;
  return allows(bytes, budget);
}

bool GrammarMatcher::allows(std::string_view bytes, Budget& budget) const {
  if (bytes.empty()) return false;
  // Most texts fail on their first character: only the stacks that can read it are copied
  // to read the rest.
  const std::string first = state_.partial + std::string(bytes.substr(0, 4));
  TextChar c;
  if (!char_at(first, 0, c)) return false;
  State trial;
  trial.partial = state_.partial;
  for (const Stack& s : state_.stacks) {
    if (!top_reads(s, c.low, c.high)) continue;
    budget.spend(kStackCost + s.size());
    trial.stacks.push_back(s);
  }
  return !trial.stacks.empty() && read(trial, bytes, budget);
}

std::vector<bool> GrammarMatcher::allows_each(std::span<const std::string_view> texts) const {
  const Grammar& g = *grammar_;
  std::vector<bool> allowed(texts.size(), false);
  Budget budget;
  if (!state_.partial.empty()) {
    // Rare (the last token ended inside a character): each text completes it differently.
    for (size_t t = 0; t < texts.size(); ++t) allowed[t] = allows(texts[t], budget);
    return allowed;
  }

  struct Reading {
    uint32_t text;  // index into texts
    uint32_t at;    // the byte where its next character starts
  };
  // Texts still being read by one stack (and by those it becomes), depth first.
  struct Frame {
    Stack stack;
    std::shared_ptr<const std::vector<Reading>> readings;
  };
  std::vector<Frame> frames;
  // The texts that `stack` read a character of and go on: onto the frames, once per stack it becomes.
  auto continue_reading = [&](const Stack& stack, std::vector<Reading>&& next) {
    if (next.empty()) return;
    auto shared = std::make_shared<const std::vector<Reading>>(std::move(next));
    for (Stack& s : after_char(stack, budget)) frames.push_back({std::move(s), shared});
  };
  // `text` read its character from `at`: allowed if that was its last, else it reads on.
  auto read_char = [&](uint32_t text, size_t at, const TextChar& c, std::vector<Reading>& next) {
    if (!c.whole || at + c.length == texts[text].size()) {
      allowed[text] = true;  // its last character: whole and read, or unfinished and still readable
    } else {
      next.push_back({text, static_cast<uint32_t>(at + c.length)});
    }
  };

  // The first characters, sorted: each stack visits only the texts its class takes (a state
  // of many stacks, such as a long enum, must not cost stacks x vocabulary).
  struct First {
    uint32_t text;
    TextChar c;
  };
  std::vector<First> wholes;
  std::vector<First> unfinished;  // texts that are the start of one character
  for (size_t t = 0; t < texts.size(); ++t) {
    TextChar c;
    if (texts[t].empty() || !char_at(texts[t], 0, c)) continue;
    (c.whole ? wholes : unfinished).push_back({static_cast<uint32_t>(t), c});
  }
  budget.spend(texts.size());
  std::sort(wholes.begin(), wholes.end(), [](const First& a, const First& b) { return a.c.low < b.c.low; });
  for (const Stack& stack : state_.stacks) {
    // A finished parse reads nothing more; one at a token terminal reads no text.
    if (stack.empty() || g.elements[stack.back()].kind != ElementKind::kChar) continue;
    const CharClass& top = g.classes[g.elements[stack.back()].index];
    std::vector<Reading> next;
    for (const auto& [low, high] : covered(top)) {
      auto it = std::lower_bound(wholes.begin(), wholes.end(), low,
                                 [](const First& f, uint32_t code_point) { return f.c.low < code_point; });
      for (; it != wholes.end() && it->c.low <= high; ++it) {
        budget.spend(1);
        if (!allowed[it->text]) read_char(it->text, 0, it->c, next);
      }
    }
    for (const First& u : unfinished) {
      budget.spend(1);
      if (!allowed[u.text] && top.intersects(u.c.low, u.c.high)) allowed[u.text] = true;
    }
    continue_reading(stack, std::move(next));
  }

  while (!frames.empty()) {
    const Frame frame = std::move(frames.back());
    frames.pop_back();
    if (frame.stack.empty() || g.elements[frame.stack.back()].kind != ElementKind::kChar) continue;
    const CharClass& top = g.classes[g.elements[frame.stack.back()].index];
    std::vector<Reading> next;
    for (const Reading& r : *frame.readings) {
      budget.spend(1);
      if (allowed[r.text]) continue;
      TextChar c;
      if (!char_at(texts[r.text], r.at, c) || !top.intersects(c.low, c.high)) continue;
      read_char(r.text, r.at, c, next);
    }
    continue_reading(frame.stack, std::move(next));
  }
  return allowed;
}

void GrammarMatcher::advance(std::string_view bytes) {
  Budget budget;
  State next = state_;
  if (bytes.empty() || !read(next, bytes, budget)) {
    throw Error("INVALID_ARGUMENT", "the grammar does not allow the text \"" + std::string(bytes) + "\" here");
  }
  state_ = std::move(next);
}

void GrammarMatcher::advance_token(int32_t token, std::string_view bytes) {
  Budget budget;
  std::vector<Stack> taken = after_token(token, budget);
  State next = state_;
  const bool read_text = !bytes.empty() && read(next, bytes, budget);
  if (taken.empty() && !read_text) {
    throw Error("INVALID_ARGUMENT", "the grammar does not allow token " + std::to_string(token) + " here");
  }
  // A parse that read the text whole goes on beside those past the token terminal; one left inside
  // an unfinished character cannot (the state holds one unfinished character for all its parses).
  if (!taken.empty()) {
    if (read_text && next.partial.empty()) taken.insert(taken.end(), next.stacks.begin(), next.stacks.end());
    deduplicate(taken);
    next.stacks = std::move(taken);
    next.partial.clear();
  }
  state_ = std::move(next);
}

bool GrammarMatcher::complete() const {
  return state_.partial.empty() &&
         std::any_of(state_.stacks.begin(), state_.stacks.end(), [](const Stack& s) { return s.empty(); });
}

bool GrammarMatcher::read(State& state, std::string_view bytes, Budget& budget) const {
  std::string joined;
  if (!state.partial.empty()) {
    joined = state.partial + std::string(bytes);
    bytes = joined;
    state.partial.clear();
  }
  size_t i = 0;
  while (i < bytes.size()) {
    TextChar c;
    if (!char_at(bytes, i, c)) return false;
    if (!c.whole) {
      // The character ends in a later token: keep its bytes if some parse could read it.
      const bool readable = std::any_of(state.stacks.begin(), state.stacks.end(),
                                        [&](const Stack& s) { return top_reads(s, c.low, c.high); });
      if (!readable) return false;
      state.partial = std::string(bytes.substr(i));
      return true;
    }
    step(state.stacks, c.low, budget);
    if (state.stacks.empty()) return false;
    i += c.length;
  }
  return true;
}

void GrammarMatcher::step(std::vector<Stack>& stacks, uint32_t code_point, Budget& budget) const {
  std::vector<Stack> next;
  for (const Stack& stack : stacks) {
    if (!top_reads(stack, code_point, code_point)) continue;
    for (Stack& s : after_char(stack, budget)) next.push_back(std::move(s));
  }
  deduplicate(next);
  stacks = std::move(next);
}

std::vector<GrammarMatcher::Stack> GrammarMatcher::after_char(const Stack& stack, Budget& budget) const {
  const Grammar& g = *grammar_;
  Stack advanced = stack;
  const uint32_t after = advanced.back() + 1;
  advanced.pop_back();
  if (g.elements[after].kind != ElementKind::kEnd) advanced.push_back(after);
  std::vector<Stack> out;
  expand(std::move(advanced), out, budget);
  deduplicate(out);
  return out;
}

// Enters rules at the top of `stack` until a character or a token is on top (or nothing is left: a
// finished parse), one stack per way of doing so. The grammar has no left recursion, so this
// ends; the budget bounds how long it takes.
void GrammarMatcher::expand(Stack stack, std::vector<Stack>& out, Budget& budget) const {
  const Grammar& g = *grammar_;
  std::vector<Stack> todo;
  todo.push_back(std::move(stack));
  while (!todo.empty()) {
    Stack s = std::move(todo.back());
    todo.pop_back();
    budget.spend(kStackCost + s.size());
    if (s.empty() || g.elements[s.back()].kind != ElementKind::kRule) {
      out.push_back(std::move(s));
      continue;
    }
    const uint32_t at = s.back();
    const uint32_t rule = g.elements[at].index;
    s.pop_back();
    // The rest of the current alternative waits below the rule; nothing waits when the rule ends it.
    if (g.elements[at + 1].kind != ElementKind::kEnd) s.push_back(at + 1);
    for (uint32_t start : g.alternatives[rule]) {
      Stack entered = s;
      if (g.elements[start].kind != ElementKind::kEnd) entered.push_back(start);
      todo.push_back(std::move(entered));
    }
  }
}

void GrammarMatcher::deduplicate(std::vector<Stack>& stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
}

}  // namespace bloomery::engine
