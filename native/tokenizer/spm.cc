#include <functional>
#include <string>

#include "base/error.h"
#include "tokenizer/merge.h"
#include "tokenizer/utf8.h"

namespace bloomery::tokenizer {

namespace {

// Higher scores merge first.
using SpmQueue = MergeQueue<float, std::greater<float>>;

class SpmSession {
 public:
  SpmSession(const Vocab& vocab, std::string_view text) : vocab_(vocab), text_(text) {}

  void run(std::vector<uint32_t>& out) {
    for (size_t i = 0; i < text_.size();) {
      const size_t len = std::min(text_.size() - i, utf8_sequence_length(uint8_t(text_[i])));
      sym_.push_back({i, len, int(sym_.size()) - 1, i + len == text_.size() ? -1 : int(sym_.size()) + 1});
      i += len;
    }
    for (int i = 1; i < int(sym_.size()); ++i) consider(i - 1, i);
    for (SpmQueue::Entry p; queue_.pop(p);) {
      MergeSymbol& l = sym_[p.left];
      MergeSymbol& r = sym_[p.right];
      if (l.len == 0 || r.len == 0 || l.len + r.len != p.len) continue;
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) sym_[r.next].prev = p.left;
      consider(l.prev, p.left);
      consider(p.left, l.next);
    }
    for (int s = sym_.empty() ? -1 : 0; s >= 0; s = sym_[s].next) emit(s, out);
  }

 private:
  std::string_view piece(int s, size_t len) const { return text_.substr(sym_[s].start, len); }

  void consider(int l, int r) {
    if (l < 0 || r < 0) return;
    const std::string_view merged = piece(l, sym_[l].len + sym_[r].len);
    const auto id = vocab_.find(merged);
    if (!id) return;
    queue_.push({vocab_.score[*id], l, r, uint32_t(merged.size())});
  }

  // A final symbol: its token, or (a character the vocabulary lacks) its bytes. Only pairs
  // whose text is a token are ever merged, so a merged symbol is always a token.
  void emit(int s, std::vector<uint32_t>& out) const {
    const std::string_view text = piece(s, sym_[s].len);
    if (const auto id = vocab_.find(text)) {
      out.push_back(*id);
      return;
    }
    for (const char c : text) out.push_back(byte_token(uint8_t(c)));
  }

  uint32_t byte_token(uint8_t b) const {
    static constexpr char kHex[] = "0123456789ABCDEF";
    const char name[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    if (const auto id = vocab_.find(std::string_view(name, 6))) return *id;
    if (const auto id = vocab_.find(std::string_view(reinterpret_cast<const char*>(&b), 1))) return *id;
    throw Error("TOKENIZER_BAD_VOCAB", "the vocabulary has no token for byte " + std::string(name, 6));
  }

  const Vocab& vocab_;
  std::string_view text_;
  std::vector<MergeSymbol> sym_;
  SpmQueue queue_;
};

}  // namespace

void spm_encode(const Vocab& vocab, std::string_view text, std::vector<uint32_t>& out) {
  SpmSession(vocab, text).run(out);
}

}  // namespace bloomery::tokenizer
