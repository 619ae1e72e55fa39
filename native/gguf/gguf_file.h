// The GGUF reader: maps a model file (or every shard of a split model), checks every
// byte it reads against the file's size, and exposes the metadata and a tensor table
// whose data pointers point into the mapping. Hostile files fail with a GGUF_* error.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gguf/mapped_file.h"
#include "quant/ggml_types.h"

namespace bloomery::gguf {

// Value types as GGUF numbers them.
enum class ValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

// "u8", "string", ... ("array" for Array).
std::string_view value_type_name(ValueType type);

// Bytes of one value of a fixed-size type; 0 for String and Array.
uint32_t value_type_size(ValueType type);

inline constexpr uint32_t kMaxDims = 4;
inline constexpr uint32_t kMaxArrayDepth = 8;
inline constexpr uint32_t kDefaultAlignment = 32;

// A metadata value. Strings and array elements are views into the mapping.
struct Value {
  ValueType type = ValueType::U8;
  // Fixed-size scalars: the value's little-endian bytes. Arrays of fixed-size elements: the first element.
  const uint8_t* bytes = nullptr;
  std::string_view string;  // String
  // Array only:
  ValueType element_type = ValueType::U8;
  uint64_t count = 0;
  std::vector<std::string_view> strings;  // elements of an array of strings
  std::vector<Value> arrays;              // elements of an array of arrays

  // "u32", "array<string>", "array<array<f32>>".
  std::string type_name() const;

  // The value as a number when it is an integer (or bool) that the result type holds.
  std::optional<uint64_t> to_uint() const;
  std::optional<int64_t> to_int() const;
  // Any numeric scalar as a double.
  std::optional<double> to_double() const;
};

struct KeyValue {
  std::string_view key;
  Value value;
};

struct Tensor {
  std::string_view name;
  quant::GgmlTypeInfo type;
  uint32_t n_dims = 0;
  std::array<uint64_t, kMaxDims> shape{1, 1, 1, 1};  // fastest-varying first; unused dims are 1
  uint64_t elements = 0;
  uint64_t bytes = 0;
  uint64_t offset = 0;  // absolute, in its file
  uint32_t file = 0;    // index into GgufFile::files()
  const uint8_t* data = nullptr;
};

// Something in a file that is not an error but may not be what its writer meant.
struct FileWarning {
  std::string code;    // GGUF_TENSOR_LAYOUT
  std::string tensor;  // the tensor it is about
  std::string message;
};

struct FileInfo {
  std::string path;
  uint64_t size = 0;
  uint32_t version = 0;
  uint64_t data_offset = 0;
  uint32_t alignment = kDefaultAlignment;
  uint64_t tensor_count = 0;
};

class GgufFile {
 public:
  // Opens a GGUF file. A split model (a path ending in -00001-of-0000N.gguf, or a first
  // file whose split.count is above 1) opens all of its shards as one model.
  // `options` says how its bytes are held (mapped or read; locked in RAM or not).
  static GgufFile open(const std::string& path, const MapOptions& options = {});

  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::vector<FileInfo>& files() const { return files_; }
  // The first file's metadata, in file order.
  const std::vector<KeyValue>& metadata() const { return metadata_; }
  // Every tensor, in file order over all shards.
  const std::vector<Tensor>& tensors() const { return tensors_; }

  // What the reader found odd but not wrong (see gguf_file.cc: check_layout).
  const std::vector<FileWarning>& warnings() const { return warnings_; }

  // MODEL_FILE_CHANGED when a mapped shard changed on disk since it was opened (MappedFile).
  void check_unchanged() const;
  // Copies bytes of shard `file` without touching its mapping (MappedFile::read_at).
  void read(uint32_t file, uint64_t offset, void* out, uint64_t bytes) const {
    maps_[file].read_at(offset, out, bytes);
  }

  const Value* find(std::string_view key) const;
  const Tensor* find_tensor(std::string_view name) const;

  // Typed lookups: nothing when the key is absent; GGUF_BAD_VALUE_TYPE naming the key
  // when it holds a value of another type (or an integer out of the result's range).
  std::optional<uint64_t> get_uint(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string_view> get_string(std::string_view key) const;
  std::optional<std::span<const std::string_view>> get_strings(std::string_view key) const;
  // Arrays of any integer type, converted (GGUF_BAD_VALUE_TYPE when an element does not fit).
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;
  // Arrays of any numeric type, converted.
  std::optional<std::vector<double>> get_float_array(std::string_view key) const;

 private:
  GgufFile() = default;

  std::vector<MappedFile> maps_;
  std::vector<FileInfo> files_;
  std::vector<KeyValue> metadata_;
  std::vector<Tensor> tensors_;
  std::vector<FileWarning> warnings_;
  std::unordered_map<std::string_view, size_t> metadata_index_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

}  // namespace bloomery::gguf
