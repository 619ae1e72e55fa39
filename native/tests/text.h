// Builds test texts (grammars, inputs) from pieces. GCC 12 misreads `"literal" + std::string`
// as an overlapping copy (-Wrestrict, a false positive), so pieces are appended one by one.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace bloomery::tests {

inline void append_piece(std::string& out, std::string_view piece) { out += piece; }
inline void append_piece(std::string& out, size_t number) { out += std::to_string(number); }

template <typename... Pieces>
std::string cat(const Pieces&... pieces) {
  std::string out;
  (append_piece(out, pieces), ...);
  return out;
}

}  // namespace bloomery::tests
