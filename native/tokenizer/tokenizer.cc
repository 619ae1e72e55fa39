#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <charconv>
#include <utility>

#include "base/error.h"
#include "gguf/gguf_file.h"
#include "tokenizer/byte_symbols.h"
#include "tokenizer/merge.h"
#include "tokenizer/utf8.h"

namespace bloomery::tokenizer {

namespace {

// A run of raw text, or a token already found in it.
struct Fragment {
  bool is_token;
  uint32_t id;
  size_t begin;
  size_t len;
};

// What a token's text decodes to: byte symbols back to bytes for BPE, U+2581 to spaces for SPM.
std::string decode_piece(const Vocab& v, uint32_t id) {
  const std::string& text = v.text[id];
  switch (v.type[id]) {
    case TokenType::kControl:
    case TokenType::kUnknown:
    case TokenType::kUserDefined:
      return text;
    case TokenType::kByte: {
      // "<0xAB>" is byte 0xAB; a byte token not named that way keeps its text.
      unsigned value = 0;
      if (text.size() == 6 && text.starts_with("<0x") && text.ends_with('>') &&
          std::from_chars(text.data() + 3, text.data() + 5, value, 16).ptr == text.data() + 5) {
        return std::string(1, char(value));
      }
      return text;
    }
    case TokenType::kNormal:
      break;
    default:
      return {};  // unused and undefined tokens have no text, as in llama.cpp
  }
  std::string out;
  if (v.kind == VocabKind::kSpm) {
    for (size_t i = 0; i < text.size(); ++i) {
      if (text.compare(i, 3, "\xe2\x96\x81") == 0) {
        out += ' ';
        i += 2;
      } else {
        out += text[i];
      }
    }
    return out;
  }
  // A code point outside the byte alphabet is kept as its UTF-8 (real vocabularies have none).
  for (const uint32_t cpt : decode_utf8(text)) {
    if (const auto b = symbol_to_byte(cpt)) {
      out += char(*b);
    } else {
      append_utf8(out, cpt);
    }
  }
  return out;
}

}  // namespace

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {
  pieces_.reserve(vocab_.size());
  for (uint32_t id = 0; id < vocab_.size(); ++id) {
    pieces_.push_back(decode_piece(vocab_, id));
    const TokenType t = vocab_.type[id];
    if (t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUserDefined)
      split_tokens_.push_back(id);
  }
  // Longest first, so that a token containing another (<|im_start|> vs <|im|>) wins.
  std::stable_sort(split_tokens_.begin(), split_tokens_.end(),
                   [&](uint32_t a, uint32_t b) { return vocab_.text[a].size() > vocab_.text[b].size(); });
}

std::shared_ptr<const Tokenizer> Tokenizer::open(const std::string& path) {
  const gguf::GgufFile file = gguf::GgufFile::open(path);
  return std::make_shared<const Tokenizer>(load_vocab(file));
}

std::vector<uint32_t> Tokenizer::tokenize(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<Fragment> frags;
  if (!text.empty()) frags.push_back({false, 0, 0, text.size()});
  // Each token in turn cuts the raw fragments left by the longer ones.
  for (const uint32_t id : split_tokens_) {
    if (!parse_special && vocab_.is_special(id)) continue;
    const std::string& needle = vocab_.text[id];
    std::vector<Fragment> next;
    next.reserve(frags.size());
    for (const Fragment& f : frags) {
      if (f.is_token) {
        next.push_back(f);
        continue;
      }
      const std::string_view raw = text.substr(f.begin, f.len);
      size_t at = 0;
      for (size_t hit; (hit = raw.find(needle, at)) != std::string_view::npos; at = hit + needle.size()) {
        if (hit > at) next.push_back({false, 0, f.begin + at, hit - at});
        next.push_back({true, id, 0, 0});
      }
      if (at < raw.size()) next.push_back({false, 0, f.begin + at, raw.size() - at});
    }
    frags = std::move(next);
  }

  std::vector<uint32_t> out;
  if (add_special && vocab_.add_bos) out.push_back(uint32_t(vocab_.bos));
  bool after_special = true;
  for (const Fragment& f : frags) {
    if (f.is_token) {
      out.push_back(f.id);
      after_special = true;
    } else {
      encode_text(text.substr(f.begin, f.len), after_special, out);
      after_special = false;
    }
  }
  if (add_special && vocab_.add_eos) out.push_back(uint32_t(vocab_.eos));
  return out;
}

void Tokenizer::encode_text(std::string_view text, bool after_special, std::vector<uint32_t>& out) const {
  if (vocab_.kind == VocabKind::kSpm) {
    std::string escaped;
    if (vocab_.add_space_prefix && after_special) escaped = "\xe2\x96\x81";
    for (const char c : text) {
      if (c == ' ') {
        escaped += "\xe2\x96\x81";
      } else {
        escaped += c;
      }
    }
    spm_encode(vocab_, escaped, out);
    return;
  }
  BpeEncoder encoder(vocab_);
  for (const std::string& word : pre_tokenize(vocab_.pre, text)) encoder.encode_word(encode_byte_symbols(word), out);
}

std::string_view Tokenizer::piece(uint32_t id, bool special) const {
  if (id >= pieces_.size()) {
    throw Error("INVALID_ARGUMENT",
                "token " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(pieces_.size()) + ")");
  }
  if (!special && vocab_.is_special(id)) return {};
  return pieces_[id];
}

void Tokenizer::append_piece(std::string& out, uint32_t id, bool special, bool& at_fragment_start) const {
  std::string_view p = piece(id, special);
  const TokenType t = vocab_.type[id];
  if (t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUserDefined) {
    at_fragment_start = true;
  } else {
    if (at_fragment_start && vocab_.kind == VocabKind::kSpm && vocab_.add_space_prefix && p.starts_with(' ')) {
      p.remove_prefix(1);
    }
    at_fragment_start = false;
  }
  out += p;
}

std::string Tokenizer::detokenize(std::span<const uint32_t> tokens, bool special) const {
  std::string out;
  bool at_fragment_start = true;
  for (const uint32_t id : tokens) append_piece(out, id, special, at_fragment_start);
  return out;
}

StreamDecoder::StreamDecoder(std::shared_ptr<const Tokenizer> tokenizer, bool special)
    : tokenizer_(std::move(tokenizer)), special_(special) {}

std::string StreamDecoder::push(std::span<const uint32_t> tokens) {
  for (const uint32_t id : tokens) tokenizer_->append_piece(pending_, id, special_, at_fragment_start_);
  const size_t ready = complete_utf8_prefix(pending_);
  std::string out = pending_.substr(0, ready);
  pending_.erase(0, ready);
  return out;
}

std::string StreamDecoder::flush() { return std::exchange(pending_, {}); }

}  // namespace bloomery::tokenizer
