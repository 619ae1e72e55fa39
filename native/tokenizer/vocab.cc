#include "tokenizer/vocab.h"

#include <cmath>

#include "base/error.h"

namespace bloomery::tokenizer {

namespace {

Error bad_vocab(const std::string& message) { return Error("TOKENIZER_BAD_VOCAB", message); }

// A special-token id key: absent keeps the default (none when the vocabulary is too small for
// it, as in llama.cpp); present, it must name a token (llama.cpp would ignore it with a warning).
void read_id(const gguf::GgufFile& f, std::string_view key, size_t n, int64_t& id) {
  if (id >= int64_t(n)) id = kNoToken;
  const std::optional<int64_t> v = f.get_int(key);
  if (!v) return;
  if (*v < 0 || *v >= int64_t(n)) {
    throw bad_vocab(std::string(key) + " = " + std::to_string(*v) + " is not a token of the vocabulary of " +
                    std::to_string(n));
  }
  id = *v;
}

// Token roles llama.cpp assigns by token text, since GGUF files do not record them. They
// decide which tokens special parsing may match, so ids differ without them.
void apply_text_roles(Vocab& v) {
  // End-of-generation tokens are control tokens whatever the file says.
  static constexpr std::string_view kEndOfGeneration[] = {"<|eot_id|>",
                                                          "<|im_end|>",
                                                          "<|end|>",
                                                          "<|return|>",
                                                          "<|call|>",
                                                          "<|flush|>",
                                                          "<|calls|>",
                                                          "<end_of_turn>",
                                                          "<|endoftext|>",
                                                          "</s>",
                                                          "<|eom_id|>",
                                                          "<EOT>",
                                                          "_<EOT>",
                                                          "[EOT]",
                                                          "[EOS]",
                                                          "<|end_of_text|>",
                                                          "<end_of_utterance>",
                                                          "<eos>",
                                                          "<turn|>",
                                                          "<|tool_response>",
                                                          "<｜end▁of▁sentence｜>",
                                                          "[e~["};
  for (const std::string_view t : kEndOfGeneration) {
    if (const auto id = v.find(t)) {
      if (v.type[*id] != TokenType::kUnknown) v.type[*id] = TokenType::kControl;
    }
  }
  // gpt-oss (harmony): these structure tokens are always parsed and shown as text.
  for (const std::string_view t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    if (const auto id = v.find(t)) v.type[*id] = TokenType::kUserDefined;
  }
  // When <|return|> or <|flush|> and <|call|> end turns (harmony, solar-open), <|end|> is ordinary text.
  const auto end = v.find("<|end|>");
  const bool has_call = v.find("<|call|>") || v.find("<|calls|>");
  if (end && has_call && (v.find("<|return|>") || v.find("<|flush|>"))) v.type[*end] = TokenType::kUserDefined;
}

}  // namespace

std::optional<uint32_t> Vocab::find(std::string_view piece) const {
  const auto it = id_of.find(piece);
  if (it == id_of.end()) return std::nullopt;
  return it->second;
}

Vocab load_vocab(const gguf::GgufFile& f) {
  Vocab v;
  const std::optional<std::string_view> model = f.get_string("tokenizer.ggml.model");
  if (!model) throw bad_vocab("the file has no tokenizer (tokenizer.ggml.model is missing)");

  if (*model == "gpt2") {
    v.kind = VocabKind::kBpe;
    const std::string_view pre_name = f.get_string("tokenizer.ggml.pre").value_or("default");
    const std::optional<PreTokenizer> pre = pre_tokenizer_from_name(pre_name);
    if (!pre) {
      throw Error("TOKENIZER_UNSUPPORTED",
                  "pre-tokenizer \"" + std::string(pre_name) + "\" (tokenizer.ggml.pre) is not supported");
    }
    v.pre = *pre;
    v.ignore_merges = pre_tokenizer_ignores_merges(v.pre);
    // GLM's vocabularies have no BOS unless the file names one (llama.cpp's default for them).
    v.bos = v.pre == PreTokenizer::kChatGlm4 ? kNoToken : 11;
    v.eos = 11;
    const auto merges = f.get_strings("tokenizer.ggml.merges");
    if (!merges) throw bad_vocab("tokenizer.ggml.merges is missing");
    v.merge_rank.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
      const std::string_view m = (*merges)[i];
      // Split at the first space after the first byte (a merge's left side may be a space).
      const size_t sp = m.find(' ', 1);
      const std::string key = sp == std::string_view::npos ? std::string(" ") : std::string(m);
      v.merge_rank.emplace(key, uint32_t(i));
    }
  } else if (*model == "llama") {
    v.kind = VocabKind::kSpm;
    v.bos = 1;
    v.eos = 2;
    v.add_bos = true;
    v.add_space_prefix = true;
  } else {
    throw Error("TOKENIZER_UNSUPPORTED",
                "tokenizer model \"" + std::string(*model) + "\" (tokenizer.ggml.model) is not supported");
  }
  v.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(v.add_space_prefix);

  const auto tokens = f.get_strings("tokenizer.ggml.tokens");
  if (!tokens) throw bad_vocab("tokenizer.ggml.tokens is missing");
  const size_t n = tokens->size();
  const std::optional<std::vector<double>> scores = f.get_float_array("tokenizer.ggml.scores");
  const std::optional<std::vector<int64_t>> types = f.get_int_array("tokenizer.ggml.token_type");
  if (scores && scores->size() < n) throw bad_vocab("tokenizer.ggml.scores has fewer entries than tokens");
  if (types && types->size() < n) throw bad_vocab("tokenizer.ggml.token_type has fewer entries than tokens");

  v.text.resize(n);
  v.type.resize(n, TokenType::kNormal);
  v.score.resize(n, 0.0f);
  v.id_of.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    v.text[i] = (*tokens)[i].empty() ? "[EMPTY_" + std::to_string(i) + "]" : std::string((*tokens)[i]);
    v.id_of[v.text[i]] = uint32_t(i);
    if (scores) {
      v.score[i] = float((*scores)[i]);
      // SPM ranks merges by score: a NaN would break the ordering of its queue.
      if (!std::isfinite(v.score[i])) throw bad_vocab("tokenizer.ggml.scores[" + std::to_string(i) + "] is not finite");
    }
    if (types) {
      const int64_t t = (*types)[i];
      if (t < 0 || t > 6) {
        throw bad_vocab("tokenizer.ggml.token_type[" + std::to_string(i) + "] = " + std::to_string(t) +
                        " is not a token type (0 to 6)");
      }
      v.type[i] = TokenType(t);
    }
  }

  read_id(f, "tokenizer.ggml.bos_token_id", n, v.bos);
  read_id(f, "tokenizer.ggml.eos_token_id", n, v.eos);
  read_id(f, "tokenizer.ggml.eot_token_id", n, v.eot);
  apply_text_roles(v);
  v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(v.add_bos);
  v.add_eos = f.get_bool("tokenizer.ggml.add_eos_token").value_or(v.add_eos);
  if (v.add_bos && v.bos == kNoToken) throw bad_vocab("tokenizer.ggml.add_bos_token is set but there is no BOS token");
  if (v.add_eos && v.eos == kNoToken) throw bad_vocab("tokenizer.ggml.add_eos_token is set but there is no EOS token");
  return v;
}

}  // namespace bloomery::tokenizer
