#include <string>

#include "tokenizer/merge.h"
#include "tokenizer/utf8.h"

namespace bloomery::tokenizer {

void BpeEncoder::encode_word(std::string_view word, std::vector<uint32_t>& out) {
  if (vocab_.ignore_merges) {
    if (const auto id = vocab_.find(word)) {
      out.push_back(*id);
      return;
    }
  }

  sym_.clear();
  for (size_t i = 0; i < word.size();) {
    const size_t len = std::min(word.size() - i, utf8_sequence_length(uint8_t(word[i])));
    sym_.push_back({i, len, int(sym_.size()) - 1, i + len == word.size() ? -1 : int(sym_.size()) + 1});
    i += len;
  }
  for (int i = 1; i < int(sym_.size()); ++i) consider(word, i - 1, i);

  for (Queue::Entry p; queue_.pop(p);) {
    MergeSymbol& l = sym_[p.left];
    MergeSymbol& r = sym_[p.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != p.len || l.next != p.right) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym_[r.next].prev = p.left;
    consider(word, l.prev, p.left);
    consider(word, p.left, l.next);
  }

  for (int s = sym_.empty() ? -1 : 0; s >= 0; s = sym_[s].next) {
    const std::string_view text = word.substr(sym_[s].start, sym_[s].len);
    if (const auto id = vocab_.find(text)) {
      out.push_back(*id);
      continue;
    }
    // A merge result missing from the vocabulary: its single bytes, where they are tokens.
    for (const char c : text) {
      if (const auto id = vocab_.find(std::string_view(&c, 1))) out.push_back(*id);
    }
  }
}

void BpeEncoder::consider(std::string_view word, int left, int right) {
  if (left < 0 || right < 0) return;
  const MergeSymbol& l = sym_[left];
  const MergeSymbol& r = sym_[right];
  key_.assign(word.substr(l.start, l.len));
  key_ += ' ';
  key_.append(word.substr(r.start, r.len));
  const auto it = vocab_.merge_rank.find(key_);
  if (it == vocab_.merge_rank.end()) return;
  queue_.push({it->second, left, right, uint32_t(l.len + r.len)});
}

}  // namespace bloomery::tokenizer
