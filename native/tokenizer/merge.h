// The two merge algorithms: byte-level BPE (merge the adjacent pair of lowest rank first)
// and SentencePiece (merge the adjacent pair whose merged token has the highest score).
// Both break ties to the left, as llama.cpp does, so equal inputs give equal ids.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace bloomery::tokenizer {

// One pre-tokenized word, already in byte symbols, appended to `out` as token ids.
void bpe_encode_word(const Vocab& vocab, std::string_view word, std::vector<uint32_t>& out);

// One text fragment with spaces already escaped as U+2581, appended to `out`.
void spm_encode(const Vocab& vocab, std::string_view text, std::vector<uint32_t>& out);

}  // namespace bloomery::tokenizer
