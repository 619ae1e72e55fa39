// GPT-2's byte-level alphabet: every byte is one visible code point (printable Latin-1
// bytes stand for themselves, the rest take U+0100 onward in byte order), so that byte-level
// BPE vocabularies are plain text. Space is "Ġ" (U+0120), newline "Ċ" (U+010A).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace bloomery::tokenizer {

// The code point that stands for `byte`.
uint32_t byte_to_symbol(uint8_t byte);

// The byte a code point stands for, if it is one of the 256 symbols.
std::optional<uint8_t> symbol_to_byte(uint32_t cpt);

// Text as its byte symbols, UTF-8 encoded (the form BPE merges and vocabularies use).
std::string encode_byte_symbols(std::string_view bytes);

}  // namespace bloomery::tokenizer
