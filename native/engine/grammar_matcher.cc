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

// Expansions one character may take. Nested empty-able repetitions such as (("a"?)?){0,1000}
// double the ways to reach each point; past this the grammar is refused, not followed for ages.
constexpr size_t kMaxExpansions = 1'000'000;

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  size_t work = 0;
  for (uint32_t start : grammar_->alternatives[grammar_->root]) {
    Stack stack;
    if (grammar_->elements[start].kind != ElementKind::kEnd) stack.push_back(start);
    expand(std::move(stack), state_.stacks, work);
  }
  deduplicate(state_.stacks);
}

bool GrammarMatcher::allows(std::string_view bytes) const {
  if (bytes.empty()) return false;
  // Most tokens fail on their first character: test it on the stacks as they are, before
  // copying them to read the rest.
  if (state_.partial.empty()) {
    const size_t length = sequence_length(static_cast<uint8_t>(bytes[0]));
    if (length == 0) return false;
    uint32_t low = 0;
    uint32_t high = 0;
    if (!decode(bytes.substr(0, std::min(length, bytes.size())), length, low, high)) return false;
    const bool readable = std::any_of(state_.stacks.begin(), state_.stacks.end(), [&](const Stack& s) {
      return !s.empty() && grammar_->classes[grammar_->elements[s.back()].index].intersects(low, high);
    });
    if (!readable) return false;
  }
  State trial = state_;
  return read(trial, bytes);
}

std::vector<bool> GrammarMatcher::allows_each(std::span<const std::string_view> texts) const {
  std::vector<bool> allowed(texts.size(), false);
  if (!state_.partial.empty()) {
    // Rare (the last token ended inside a character): each text completes it differently.
    for (size_t t = 0; t < texts.size(); ++t) allowed[t] = allows(texts[t]);
    return allowed;
  }
  std::vector<Reading> readings;
  readings.reserve(texts.size());
  for (size_t t = 0; t < texts.size(); ++t) {
    if (!texts[t].empty()) readings.push_back({static_cast<uint32_t>(t), 0});
  }
  size_t work = 0;
  for (const Stack& stack : state_.stacks) {
    std::erase_if(readings, [&](const Reading& r) { return allowed[r.text]; });
    if (readings.empty()) break;
    accept_for_stack(stack, texts, readings, allowed, work);
  }
  return allowed;
}

// Marks the readings that `stack` (and the stacks it becomes) can take to the end of their text.
void GrammarMatcher::accept_for_stack(const Stack& stack, std::span<const std::string_view> texts,
                                      const std::vector<Reading>& readings, std::vector<bool>& allowed,
                                      size_t& work) const {
  const Grammar& g = *grammar_;
  if (stack.empty()) return;  // a finished parse reads nothing more
  const CharClass& top = g.classes[g.elements[stack.back()].index];
  std::vector<Reading> next;
  for (const Reading& r : readings) {
    const std::string_view text = texts[r.text];
    const size_t length = sequence_length(static_cast<uint8_t>(text[r.at]));
    if (length == 0) continue;
    const std::string_view sequence = text.substr(r.at, length);
    uint32_t low = 0;
    uint32_t high = 0;
    if (!decode(sequence, length, low, high) || !top.intersects(low, high)) continue;
    if (sequence.size() < length || r.at + length == text.size()) {
      allowed[r.text] = true;  // its last character: whole and read, or unfinished and still readable
    } else {
      next.push_back({r.text, static_cast<uint32_t>(r.at + length)});
    }
  }
  if (next.empty()) return;
  Stack advanced = stack;
  const uint32_t after = advanced.back() + 1;
  advanced.pop_back();
  if (g.elements[after].kind != ElementKind::kEnd) advanced.push_back(after);
  std::vector<Stack> stacks;
  expand(std::move(advanced), stacks, work);
  deduplicate(stacks);
  for (const Stack& s : stacks) {
    std::erase_if(next, [&](const Reading& r) { return allowed[r.text]; });
    if (next.empty()) return;
    accept_for_stack(s, texts, next, allowed, work);
  }
}

void GrammarMatcher::advance(std::string_view bytes) {
  State next = state_;
  if (bytes.empty() || !read(next, bytes)) {
    throw Error("INVALID_ARGUMENT", "the grammar does not allow the text \"" + std::string(bytes) + "\" here");
  }
  state_ = std::move(next);
}

bool GrammarMatcher::complete() const {
  return state_.partial.empty() &&
         std::any_of(state_.stacks.begin(), state_.stacks.end(), [](const Stack& s) { return s.empty(); });
}

bool GrammarMatcher::read(State& state, std::string_view bytes) const {
  std::string joined;
  if (!state.partial.empty()) {
    joined = state.partial + std::string(bytes);
    bytes = joined;
    state.partial.clear();
  }
  size_t i = 0;
  while (i < bytes.size()) {
    const size_t length = sequence_length(static_cast<uint8_t>(bytes[i]));
    if (length == 0) return false;
    const std::string_view sequence = bytes.substr(i, length);
    uint32_t low = 0;
    uint32_t high = 0;
    if (!decode(sequence, length, low, high)) return false;
    if (sequence.size() < length) {
      // The character ends in a later token: keep its bytes if some parse could read it.
      const bool readable = std::any_of(state.stacks.begin(), state.stacks.end(), [&](const Stack& s) {
        return !s.empty() && grammar_->classes[grammar_->elements[s.back()].index].intersects(low, high);
      });
      if (!readable) return false;
      state.partial = std::string(sequence);
      return true;
    }
    step(state.stacks, low);
    if (state.stacks.empty()) return false;
    i += length;
  }
  return true;
}

void GrammarMatcher::step(std::vector<Stack>& stacks, uint32_t code_point) const {
  const Grammar& g = *grammar_;
  std::vector<Stack> next;
  size_t work = 0;
  for (const Stack& stack : stacks) {
    if (stack.empty() || !g.classes[g.elements[stack.back()].index].contains(code_point)) continue;
    Stack advanced = stack;
    const uint32_t after = advanced.back() + 1;
    advanced.pop_back();
    if (g.elements[after].kind != ElementKind::kEnd) advanced.push_back(after);
    expand(std::move(advanced), next, work);
  }
  deduplicate(next);
  stacks = std::move(next);
}

// Enters rules at the top of `stack` until a character is on top (or nothing is left: a
// finished parse), one stack per way of doing so. The grammar has no left recursion, so this ends.
void GrammarMatcher::expand(Stack stack, std::vector<Stack>& out, size_t& work) const {
  const Grammar& g = *grammar_;
  if (++work > kMaxExpansions) {
    throw Error("GRAMMAR_INVALID", "the grammar is too ambiguous to follow: one character opens over a million parses");
  }
  if (stack.empty() || g.elements[stack.back()].kind == ElementKind::kChar) {
    out.push_back(std::move(stack));
    return;
  }
  const uint32_t at = stack.back();
  const uint32_t rule = g.elements[at].index;
  stack.pop_back();
  // The rest of the current alternative waits below the rule; nothing waits when the rule ends it.
  if (g.elements[at + 1].kind != ElementKind::kEnd) stack.push_back(at + 1);
  for (uint32_t start : g.alternatives[rule]) {
    Stack entered = stack;
    if (g.elements[start].kind != ElementKind::kEnd) entered.push_back(start);
    expand(std::move(entered), out, work);
  }
}

void GrammarMatcher::deduplicate(std::vector<Stack>& stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
}

}  // namespace bloomery::engine
