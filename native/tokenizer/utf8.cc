#include "tokenizer/utf8.h"

namespace bloomery::tokenizer {

namespace {

bool is_continuation(uint8_t b) { return (b & 0xc0) == 0x80; }

// Bytes of a multi-byte sequence by its lead byte; 0 when the byte cannot lead one.
size_t lead_length(uint8_t b) {
  if (b < 0xc0) return 0;
  if (b < 0xe0) return 2;
  if (b < 0xf0) return 3;
  return b < 0xf8 ? 4 : 0;
}

}  // namespace

std::vector<uint32_t> decode_utf8(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b = p[i];
    if (b < 0x80) {
      out.push_back(b);
      ++i;
      continue;
    }
    // A byte that cannot lead, or a sequence cut short, is one U+FFFD per byte.
    const size_t len = lead_length(b);
    if (len == 0 || i + len > n) {
      out.push_back(kReplacementChar);
      ++i;
      continue;
    }
    bool ok = true;
    for (size_t k = 1; k < len; ++k) ok = ok && is_continuation(p[i + k]);
    if (!ok) {
      out.push_back(kReplacementChar);
      ++i;
      continue;
    }
    uint32_t cpt = len == 2 ? b & 0x1f : len == 3 ? b & 0x0f : b & 0x07;
    for (size_t k = 1; k < len; ++k) cpt = (cpt << 6) | (p[i + k] & 0x3f);
    out.push_back(cpt);
    i += len;
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cpt) {
  if (cpt < 0x80) {
    out.push_back(char(cpt));
  } else if (cpt < 0x800) {
    out.push_back(char(0xc0 | (cpt >> 6)));
    out.push_back(char(0x80 | (cpt & 0x3f)));
  } else if (cpt < 0x10000) {
    out.push_back(char(0xe0 | (cpt >> 12)));
    out.push_back(char(0x80 | ((cpt >> 6) & 0x3f)));
    out.push_back(char(0x80 | (cpt & 0x3f)));
  } else if (cpt <= 0x10ffff) {
    out.push_back(char(0xf0 | (cpt >> 18)));
    out.push_back(char(0x80 | ((cpt >> 12) & 0x3f)));
    out.push_back(char(0x80 | ((cpt >> 6) & 0x3f)));
    out.push_back(char(0x80 | (cpt & 0x3f)));
  } else {
    append_utf8(out, kReplacementChar);
  }
}

size_t complete_utf8_prefix(std::string_view bytes) {
  const size_t n = bytes.size();
  // Only the last three bytes can belong to an unfinished sequence (at most 4 bytes long).
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = uint8_t(bytes[n - back]);
    if (is_continuation(b)) continue;
    const size_t need = b >= 0x80 ? lead_length(b) : 1;
    return need > back ? n - back : n;
  }
  return n;
}

}  // namespace bloomery::tokenizer
