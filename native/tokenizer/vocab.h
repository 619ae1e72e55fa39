// A tokenizer vocabulary read from GGUF metadata (the tokenizer.ggml.* keys).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gguf/gguf_file.h"
#include "tokenizer/pre_tokenizer.h"

namespace bloomery::tokenizer {

// tokenizer.ggml.token_type values.
enum class TokenType : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

enum class VocabKind {
  kBpe,  // "gpt2": byte-level BPE with ranked merges
  kSpm,  // "llama": SentencePiece, score-ranked merges with <0xXX> byte fallback
};

inline constexpr int64_t kNoToken = -1;

// Lets the maps below be searched with a string_view, without building a std::string.
struct TextHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TextMap = std::unordered_map<std::string, uint32_t, TextHash, std::equal_to<>>;

struct Vocab {
  VocabKind kind = VocabKind::kBpe;
  PreTokenizer pre = PreTokenizer::kDefault;
  std::vector<std::string> text;
  std::vector<TokenType> type;
  std::vector<float> score;
  // Later duplicates of a token text win, as in llama.cpp.
  TextMap id_of;
  // Merge rank by "left right" (the merge's own text); the first of duplicates wins.
  TextMap merge_rank;

  int64_t bos = kNoToken;
  int64_t eos = kNoToken;
  int64_t eot = kNoToken;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;  // SPM: a space before the text (and after each special token)
  bool ignore_merges = false;

  size_t size() const { return text.size(); }
  std::optional<uint32_t> find(std::string_view piece) const;
  // Control and unknown tokens: matched in text only on request, invisible unless asked for.
  bool is_special(uint32_t id) const { return type[id] == TokenType::kControl || type[id] == TokenType::kUnknown; }
};

// Reads the vocabulary; TOKENIZER_UNSUPPORTED names a model or pre-tokenizer we do not
// implement, TOKENIZER_BAD_VOCAB a missing or inconsistent key.
Vocab load_vocab(const gguf::GgufFile& file);

}  // namespace bloomery::tokenizer
