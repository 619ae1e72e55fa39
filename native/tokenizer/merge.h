// The two merge algorithms: byte-level BPE (merge the adjacent pair of lowest rank first)
// and SentencePiece (merge the adjacent pair whose merged token has the highest score).
// Both break ties to the left, as llama.cpp does, so equal inputs give equal ids.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/merge_queue.h"
#include "tokenizer/vocab.h"

namespace bloomery::tokenizer {

// A run of a word's bytes; merged-away symbols keep len 0.
struct MergeSymbol {
  size_t start;
  size_t len;
  int prev;
  int next;
};

// Byte-level BPE over the pre-tokenized words of one text. One encoder serves all the words of
// a call, so its buffers (and the queue's per-rank arrays) are allocated once, not per word.
class BpeEncoder {
 public:
  explicit BpeEncoder(const Vocab& vocab) : vocab_(vocab) {}

  // One word, already in byte symbols, appended to `out` as token ids.
  void encode_word(std::string_view word, std::vector<uint32_t>& out);

 private:
  // Lower ranks merge first.
  using Queue = MergeQueue<uint32_t, std::less<uint32_t>>;

  void consider(std::string_view word, int left, int right);

  const Vocab& vocab_;
  std::vector<MergeSymbol> sym_;
  Queue queue_;
  std::string key_;
};

// One text fragment with spaces already escaped as U+2581, appended to `out`.
void spm_encode(const Vocab& vocab, std::string_view text, std::vector<uint32_t>& out);

}  // namespace bloomery::tokenizer
