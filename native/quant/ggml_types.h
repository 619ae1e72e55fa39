// The table of ggml tensor types: id, name, block size (elements) and bytes per block.
// The one owner of these facts; TypeScript reads it through the addon (ggmlTypes()).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace bloomery::quant {

struct GgmlTypeInfo {
  uint32_t id;
  std::string_view name;
  uint32_t block_elements;  // elements per block (1 for plain types)
  uint32_t block_bytes;     // bytes per block
};

// Every type a GGUF file may name, in id order (removed ids are absent).
std::span<const GgmlTypeInfo> ggml_types();

// The type with this id, or nothing when the id is not a known ggml type.
std::optional<GgmlTypeInfo> ggml_type(uint32_t id);

// Bytes that `elements` values of the type occupy, or nothing when `elements` is not a
// whole number of blocks (or the count overflows 64 bits).
std::optional<uint64_t> ggml_row_bytes(const GgmlTypeInfo& type, uint64_t elements);

}  // namespace bloomery::quant
