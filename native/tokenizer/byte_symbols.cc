#include "tokenizer/byte_symbols.h"

#include <array>

#include "tokenizer/utf8.h"

namespace bloomery::tokenizer {

namespace {

bool stands_for_itself(uint32_t b) { return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae; }

struct Tables {
  std::array<uint32_t, 256> symbol{};
  std::array<std::string, 256> utf8;
  Tables() {
    uint32_t next = 0x100;
    for (uint32_t b = 0; b < 256; ++b) {
      symbol[b] = stands_for_itself(b) ? b : next++;
      append_utf8(utf8[b], symbol[b]);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

uint32_t byte_to_symbol(uint8_t byte) { return tables().symbol[byte]; }

std::optional<uint8_t> symbol_to_byte(uint32_t cpt) {
  if (cpt < 0x100) {
    if (stands_for_itself(cpt)) return uint8_t(cpt);
    return std::nullopt;
  }
  // The remapped bytes take U+0100.. in byte order: 0x00-0x20, 0x7f-0xa0, 0xad.
  const uint32_t k = cpt - 0x100;
  if (k <= 0x20) return uint8_t(k);
  if (k <= 0x20 + 34) return uint8_t(0x7f + (k - 0x21));
  if (k == 0x20 + 35) return uint8_t(0xad);
  return std::nullopt;
}

std::string encode_byte_symbols(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out += tables().utf8[uint8_t(c)];
  return out;
}

}  // namespace bloomery::tokenizer
