#include <string>
#include <vector>

#include "tests/check.h"
#include "tokenizer/byte_symbols.h"
#include "tokenizer/utf8.h"

using namespace bloomery::tokenizer;

TEST(tokenizer_utf8_round_trip) {
  const std::vector<uint32_t> cpts = {'a', 0xe9, 0x20ac, 0x1f600, 0x10ffff, 0};
  std::string s;
  for (uint32_t c : cpts) append_utf8(s, c);
  CHECK(s == std::string("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\0", 15));
  CHECK(decode_utf8(s) == cpts);
}

TEST(tokenizer_utf8_invalid_bytes_become_replacement_chars) {
  // A stray continuation byte, a cut-short sequence, a byte that cannot lead: one U+FFFD each.
  CHECK((decode_utf8("\x80z") == std::vector<uint32_t>{kReplacementChar, 'z'}));
  CHECK((decode_utf8("\xe2\x82z") == std::vector<uint32_t>{kReplacementChar, kReplacementChar, 'z'}));
  CHECK((decode_utf8("\xf8") == std::vector<uint32_t>{kReplacementChar}));
  CHECK((decode_utf8("\xf0\x9f\x98") == std::vector<uint32_t>{kReplacementChar, kReplacementChar, kReplacementChar}));
}

TEST(tokenizer_utf8_complete_prefix_holds_back_unfinished_chars) {
  const std::string euro = "\xe2\x82\xac";
  CHECK(complete_utf8_prefix("ab") == 2);
  CHECK(complete_utf8_prefix("ab" + euro) == 5);
  CHECK(complete_utf8_prefix("ab" + euro.substr(0, 1)) == 2);
  CHECK(complete_utf8_prefix("ab" + euro.substr(0, 2)) == 2);
  CHECK(complete_utf8_prefix("\xf0\x9f\x98") == 0);
  CHECK(complete_utf8_prefix("\xf0\x9f\x98\x80") == 4);
  // Bytes that can never complete are not held back.
  CHECK(complete_utf8_prefix("a\x80") == 2);
  CHECK(complete_utf8_prefix("a\xff") == 2);
  CHECK(complete_utf8_prefix("") == 0);
}

TEST(tokenizer_byte_symbols_are_gpt2s) {
  CHECK(byte_to_symbol('A') == 'A');
  CHECK(byte_to_symbol(' ') == 0x120) << "space is U+0120";
  CHECK(byte_to_symbol('\n') == 0x10a);
  CHECK(byte_to_symbol(0xad) == 0x143);
  CHECK(byte_to_symbol(0xff) == 0xff);
  for (int b = 0; b < 256; ++b) {
    const auto back = symbol_to_byte(byte_to_symbol(uint8_t(b)));
    CHECK(back && *back == b) << "byte " << b;
  }
  CHECK(!symbol_to_byte(0x20)) << "a raw space is not a symbol";
  CHECK(!symbol_to_byte(0x144));
  CHECK(encode_byte_symbols(" a\n") ==
        "\xc4\xa0"
        "a\xc4\x8a");
}
