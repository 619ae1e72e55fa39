// Text to token ids and back, from a GGUF file's vocabulary, giving the ids llama.cpp gives.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace bloomery::tokenizer {

class Tokenizer {
 public:
  explicit Tokenizer(Vocab vocab);

  // Reads the vocabulary of a GGUF file (its tensors are not touched).
  static std::shared_ptr<const Tokenizer> open(const std::string& path);

  const Vocab& vocab() const { return vocab_; }

  // `add_special` adds BOS/EOS where the vocabulary asks for them; `parse_special` turns the
  // text of control tokens (<|im_start|>) into those tokens. User-defined tokens always are.
  std::vector<uint32_t> tokenize(std::string_view text, bool add_special, bool parse_special) const;

  // The bytes of one token (INVALID_ARGUMENT for an id outside the vocabulary). Control and
  // unknown tokens are empty unless `special`.
  std::string_view piece(uint32_t id, bool special) const;

  // Appends one token's bytes. SPM vocabularies put a space before the text and after every
  // control or user-defined token; `at_fragment_start` (true at the start) tracks where, so
  // that space is taken off again.
  void append_piece(std::string& out, uint32_t id, bool special, bool& at_fragment_start) const;

  // The bytes of a token sequence; for text that tokenize() produced, the text itself.
  std::string detokenize(std::span<const uint32_t> tokens, bool special) const;

 private:
  void encode_text(std::string_view text, bool after_special, std::vector<uint32_t>& out) const;

  Vocab vocab_;
  std::vector<std::string> pieces_;     // each token's bytes, as shown with special = true
  std::vector<uint32_t> split_tokens_;  // control, unknown and user-defined tokens, longest first
};

// Detokenizes a stream of tokens, returning only whole UTF-8 characters: bytes of a character
// that a later token completes are held back until then.
class StreamDecoder {
 public:
  StreamDecoder(std::shared_ptr<const Tokenizer> tokenizer, bool special);

  std::string push(std::span<const uint32_t> tokens);
  // What is still held back (an unfinished character at the end of the stream), as is.
  std::string flush();

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  bool special_;
  bool at_fragment_start_ = true;
  std::string pending_;
};

}  // namespace bloomery::tokenizer
