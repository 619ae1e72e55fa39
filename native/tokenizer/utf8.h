// UTF-8 as the tokenizer reads and writes it. Decoding is lenient the way llama.cpp's is
// (a byte that cannot start or finish a sequence becomes U+FFFD and decoding goes on), so
// the same bytes split into the same code points in both engines.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bloomery::tokenizer {

inline constexpr uint32_t kReplacementChar = 0xfffd;

// Bytes of the sequence a lead byte announces (1 for ASCII, continuation and invalid bytes).
inline size_t utf8_sequence_length(uint8_t lead) {
  static constexpr uint8_t kByHighNibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kByHighNibble[lead >> 4];
}

std::vector<uint32_t> decode_utf8(std::string_view text);

void append_utf8(std::string& out, uint32_t cpt);

// The length of the longest prefix of `bytes` that does not end inside an unfinished
// sequence: what a stream can emit now. Invalid bytes are never held back.
size_t complete_utf8_prefix(std::string_view bytes);

}  // namespace bloomery::tokenizer
