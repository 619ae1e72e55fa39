#include <queue>
#include <string>

#include "tokenizer/merge.h"
#include "tokenizer/utf8.h"

namespace bloomery::tokenizer {

namespace {

// A run of the word's bytes; merged-away symbols keep len 0.
struct Symbol {
  size_t start;
  size_t len;
  int prev;
  int next;
};

struct Pair {
  uint32_t rank;
  int left;
  int right;
  std::string text;  // the merged text when queued: a stale pair no longer spells it
};

struct LaterPair {
  bool operator()(const Pair& a, const Pair& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

void bpe_encode_word(const Vocab& vocab, std::string_view word, std::vector<uint32_t>& out) {
  if (vocab.ignore_merges) {
    if (const auto id = vocab.find(word)) {
      out.push_back(*id);
      return;
    }
  }

  std::vector<Symbol> sym;
  for (size_t i = 0; i < word.size();) {
    const size_t len = std::min(word.size() - i, utf8_sequence_length(uint8_t(word[i])));
    sym.push_back({i, len, int(sym.size()) - 1, i + len == word.size() ? -1 : int(sym.size()) + 1});
    i += len;
  }
  auto piece = [&](int s) { return word.substr(sym[s].start, sym[s].len); };

  std::priority_queue<Pair, std::vector<Pair>, LaterPair> queue;
  std::string key;
  auto consider = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    key.assign(piece(l));
    key += ' ';
    key += piece(r);
    const auto it = vocab.merge_rank.find(key);
    if (it == vocab.merge_rank.end()) return;
    std::string merged(piece(l));
    merged += piece(r);
    queue.push({it->second, l, r, std::move(merged)});
  };
  for (int i = 1; i < int(sym.size()); ++i) consider(i - 1, i);

  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    Symbol& l = sym[p.left];
    Symbol& r = sym[p.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != p.text.size() || l.next != p.right) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = p.left;
    consider(l.prev, p.left);
    consider(p.left, l.next);
  }

  for (int s = sym.empty() ? -1 : 0; s >= 0; s = sym[s].next) {
    const std::string_view text = piece(s);
    if (const auto id = vocab.find(text)) {
      out.push_back(*id);
      continue;
    }
    // A merge result missing from the vocabulary: its single bytes, where they are tokens.
    for (const char c : text) {
      if (const auto id = vocab.find(std::string_view(&c, 1))) out.push_back(*id);
    }
  }
}

}  // namespace bloomery::tokenizer
