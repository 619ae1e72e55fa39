// Pre-tokenization: the split of text into words before BPE merges, chosen by the GGUF key
// tokenizer.ggml.pre. Each pre-tokenizer is a sequence of regex splits (as in the model's
// tokenizer.json); each split runs inside the pieces of the one before and keeps the text
// between its matches as pieces of their own.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bloomery::tokenizer {

enum class PreTokenizer {
  kDefault,     // "default" and unknown names llama.cpp also maps to its default
  kGpt2,        // "gpt-2" and its aliases
  kLlama3,      // "llama-bpe", "llama3", "llama-v3", ...
  kQwen2,       // "qwen2", "deepseek-r1-qwen", ...
  kQwen35,      // "qwen35": qwen2's with combining marks in letter runs
  kDeepseekV3,  // "deepseek-v3"
  kGpt4o,       // "gpt-4o" (also gpt-oss), "llama4", "minimax-m2"
  kChatGlm4,    // "glm4", "chatglm-bpe": llama3's split, merges always applied
  kKimiK2,      // "kimi-k2"
  // "deepseek-llm" (DeepSeek-LLM, DeepSeek-V2) and "deepseek-coder"
  kDeepseekLlm,
  kDeepseekCoder,
};

// The pre-tokenizer a tokenizer.ggml.pre name selects; nothing for names we do not implement.
std::optional<PreTokenizer> pre_tokenizer_from_name(std::string_view name);

// Whether BPE first looks the whole word up in the vocabulary before merging (llama3 does:
// its merges cannot rebuild every token).
bool pre_tokenizer_ignores_merges(PreTokenizer pre);

// The words of `text` (UTF-8; invalid bytes read as U+FFFD), each re-encoded as UTF-8.
std::vector<std::string> pre_tokenize(PreTokenizer pre, std::string_view text);

}  // namespace bloomery::tokenizer
