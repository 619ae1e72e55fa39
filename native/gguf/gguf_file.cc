#include "gguf/gguf_file.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_set>
#include <utility>

#include "base/error.h"

namespace bloomery::gguf {

namespace {

// The fewest bytes a metadata pair and a tensor info can occupy: used to refuse counts
// that the rest of the file cannot hold before anything is allocated for them.
constexpr uint64_t kMinKeyValueBytes = 8 + 4 + 1;            // key length, type, smallest value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // name length, n_dims, one dim, type, offset

// Bounds on what one file's header may hold, far above any real model's (a few dozen keys, a few
// thousand tensors, vocabularies and merges of a few hundred thousand strings, rarely a nested
// array): each parsed entry takes several times the bytes it had in the file, and readGgufInfo makes
// a JavaScript value of each, so a file made of nothing else must not grow the process without bound.
constexpr uint64_t kMaxKeyValues = 1 << 16;
constexpr uint64_t kMaxTensors = 1 << 20;
constexpr uint64_t kMaxStringElements = 1 << 22;
constexpr uint64_t kMaxNestedArrays = 1 << 20;

constexpr std::string_view kSplitSuffix = "-00000-of-00000.gguf";

bool is_valid_type(uint32_t t) { return t <= uint32_t(ValueType::F64); }

uint64_t min_value_bytes(ValueType t) {
  if (t == ValueType::String) return 8;
  if (t == ValueType::Array) return 4 + 8;
  return value_type_size(t);
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Strict UTF-8: no overlong forms, surrogates, or code points above U+10FFFF.
bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    const unsigned c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    size_t n;
    uint32_t cp, min;
    if ((c & 0xe0) == 0xc0) {
      n = 1, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2, cp = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3, cp = c & 0x07, min = 0x10000;
    } else {
      return false;
    }
    if (size_t(end - p) <= n) return false;
    for (size_t i = 1; i <= n; ++i) {
      if ((p[i] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    p += n + 1;
  }
  return true;
}

// A name for an error message, cut short: a hostile file's key may be megabytes long.
std::string quoted(std::string_view s) {
  constexpr size_t kMax = 96;
  std::string out = "\"";
  out += s.substr(0, kMax);
  out += s.size() > kMax ? "...\"" : "\"";
  return out;
}

// Bounds-checked reads over one mapped file.
class Cursor {
 public:
  explicit Cursor(const MappedFile& file) : file_(file) {}

  uint64_t position() const { return pos_; }
  uint64_t remaining() const { return file_.size() - pos_; }

  const uint8_t* take(uint64_t n, std::string_view what) {
    if (n > remaining()) {
      throw Error("GGUF_TRUNCATED", file_.path() + ": the file ends inside " + std::string(what) + " (byte " +
                                        std::to_string(pos_) + " of " + std::to_string(file_.size()) + ")");
    }
    const uint8_t* p = file_.data() + pos_;
    pos_ += n;
    return p;
  }

  template <typename T>
  T read(std::string_view what) {
    return load<T>(take(sizeof(T), what));
  }

  std::string_view string(std::string_view what) {
    const uint64_t n = read<uint64_t>(what);
    if (n > remaining()) {
      throw Error("GGUF_BAD_STRING", file_.path() + ": " + std::string(what) + " claims " + std::to_string(n) +
                                         " bytes, past the end of the file");
    }
    return {reinterpret_cast<const char*>(take(n, what)), size_t(n)};
  }

  // Refuses a count of items, each at least `min_bytes` long, that the rest of the file cannot hold.
  void check_count(uint64_t count, uint64_t min_bytes, std::string_view what) const {
    if (count > remaining() / min_bytes) {
      throw Error("GGUF_TRUNCATED", file_.path() + ": " + std::string(what) + " claims " + std::to_string(count) +
                                        " entries, more than the remaining " + std::to_string(remaining()) +
                                        " bytes can hold");
    }
  }

  const std::string& path() const { return file_.path(); }

 private:
  const MappedFile& file_;
  uint64_t pos_ = 0;
};

ValueType read_value_type(Cursor& c, std::string_view key) {
  const uint32_t t = c.read<uint32_t>("a value type");
  if (!is_valid_type(t)) {
    throw Error("GGUF_BAD_VALUE_TYPE",
                c.path() + ": metadata " + quoted(key) + " has unknown value type " + std::to_string(t));
  }
  return ValueType(t);
}

// Strings and nested arrays read so far in one file's metadata, against kMaxStringElements and kMaxNestedArrays.
struct ElementCounts {
  uint64_t strings = 0;
  uint64_t arrays = 0;
};

void count_elements(uint64_t& total, uint64_t more, uint64_t limit, const char* what, Cursor& c, std::string_view key) {
  total += more;
  if (total > limit) {
    throw Error("GGUF_TOO_LARGE", c.path() + ": metadata " + quoted(key) + " brings its " + what + " to more than " +
                                      std::to_string(limit));
  }
}

Value read_value(Cursor& c, ValueType type, uint32_t depth, std::string_view key, ElementCounts& counts) {
  Value v;
  v.type = type;
  if (type == ValueType::String) {
    v.string = c.string("a string value");
    return v;
  }
  if (type != ValueType::Array) {
    v.bytes = c.take(value_type_size(type), "a metadata value");
    return v;
  }
  if (depth >= kMaxArrayDepth) {
    throw Error("GGUF_TOO_LARGE",
                c.path() + ": metadata " + quoted(key) + " nests arrays deeper than " + std::to_string(kMaxArrayDepth));
  }
  v.element_type = read_value_type(c, key);
  v.count = c.read<uint64_t>("an array length");
  c.check_count(v.count, min_value_bytes(v.element_type), "array " + quoted(key));
  if (v.element_type == ValueType::String) {
    count_elements(counts.strings, v.count, kMaxStringElements, "strings", c, key);
    v.strings.reserve(v.count);
    for (uint64_t i = 0; i < v.count; ++i) v.strings.push_back(c.string("a string array element"));
  } else if (v.element_type == ValueType::Array) {
    count_elements(counts.arrays, v.count, kMaxNestedArrays, "nested arrays", c, key);
    v.arrays.reserve(v.count);
    for (uint64_t i = 0; i < v.count; ++i) v.arrays.push_back(read_value(c, ValueType::Array, depth + 1, key, counts));
  } else {
    v.bytes = c.take(v.count * value_type_size(v.element_type), "an array");
  }
  return v;
}

const Value* find_in(const std::vector<KeyValue>& metadata, std::string_view key) {
  for (const KeyValue& kv : metadata)
    if (kv.key == key) return &kv.value;
  return nullptr;
}

[[noreturn]] void wrong_type(std::string_view key, const Value& v, std::string_view expected) {
  throw Error("GGUF_BAD_VALUE_TYPE",
              "metadata " + quoted(key) + " is " + v.type_name() + ", expected " + std::string(expected));
}

std::optional<uint64_t> uint_of(const Value* v, std::string_view key) {
  if (!v) return std::nullopt;
  const std::optional<uint64_t> n = v->to_uint();
  if (!n) wrong_type(key, *v, "a non-negative integer");
  return n;
}

bool is_integer_type(ValueType t) {
  switch (t) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::U16:
    case ValueType::I16:
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::U64:
    case ValueType::I64:
      return true;
    default:
      return false;
  }
}

// One array element (or scalar) of a fixed-size type, as a Value for the converters.
Value element_at(const Value& array, uint64_t i) {
  Value e;
  e.type = array.element_type;
  e.bytes = array.bytes + i * value_type_size(array.element_type);
  return e;
}

struct ParsedFile {
  FileInfo info;
  std::vector<KeyValue> metadata;
  std::vector<Tensor> tensors;
  std::vector<FileWarning> warnings;
};

uint32_t read_alignment(const std::vector<KeyValue>& metadata, const std::string& path) {
  const Value* v = find_in(metadata, "general.alignment");
  if (!v) return kDefaultAlignment;
  if (v->type != ValueType::U32) {
    throw Error("GGUF_BAD_ALIGNMENT", path + ": general.alignment is " + v->type_name() + ", not u32");
  }
  const uint32_t a = load<uint32_t>(v->bytes);
  if (a == 0 || (a & (a - 1)) != 0) {
    throw Error("GGUF_BAD_ALIGNMENT", path + ": general.alignment " + std::to_string(a) + " is not a power of two");
  }
  return a;
}

Tensor read_tensor_info(Cursor& c) {
  Tensor t;
  t.name = c.string("a tensor name");
  if (!is_valid_utf8(t.name)) throw Error("GGUF_BAD_STRING", c.path() + ": a tensor name is not valid UTF-8");
  const std::string name = quoted(t.name);
  t.n_dims = c.read<uint32_t>("a tensor's dimension count");
  if (t.n_dims == 0 || t.n_dims > kMaxDims) {
    throw Error("GGUF_BAD_TENSOR", c.path() + ": tensor " + name + " has " + std::to_string(t.n_dims) +
                                       " dimensions (1 to " + std::to_string(kMaxDims) + " allowed)");
  }
  t.elements = 1;
  for (uint32_t d = 0; d < t.n_dims; ++d) {
    const uint64_t n = c.read<uint64_t>("a tensor's shape");
    if (n == 0 || n > uint64_t(std::numeric_limits<int64_t>::max()) / t.elements) {
      throw Error("GGUF_BAD_TENSOR", c.path() + ": tensor " + name + " has dimension " + std::to_string(d) + " = " +
                                         std::to_string(n) + " (zero, or too many elements)");
    }
    t.shape[d] = n;
    t.elements *= n;
  }
  const uint32_t type_id = c.read<uint32_t>("a tensor's type");
  const std::optional<quant::GgmlTypeInfo> type = quant::ggml_type(type_id);
  if (!type) {
    throw Error("UNSUPPORTED_QUANT",
                c.path() + ": tensor " + name + " has unknown ggml type " + std::to_string(type_id));
  }
  t.type = *type;
  if (t.shape[0] % type->block_elements != 0) {
    throw Error("GGUF_BAD_TENSOR", c.path() + ": tensor " + name + " has rows of " + std::to_string(t.shape[0]) +
                                       ", not a multiple of " + std::string(type->name) + "'s block of " +
                                       std::to_string(type->block_elements));
  }
  const std::optional<uint64_t> bytes = quant::ggml_row_bytes(*type, t.elements);
  if (!bytes) throw Error("GGUF_BAD_TENSOR", c.path() + ": tensor " + name + " is too large");
  t.bytes = *bytes;
  t.offset = c.read<uint64_t>("a tensor's offset");
  return t;
}

// Tensors lie in the data section one after another, each at the previous one's end rounded up
// to the alignment: llama.cpp loads no other layout, and bytes that do not match it are what a
// tensor whose type or shape was changed leaves. Overlapping data (GGUF_TENSOR_OVERLAP) and unused
// bytes between tensors (GGUF_TENSOR_LAYOUT) are refused, naming the tensor; unused bytes after
// the last tensor, which llama.cpp accepts, are a warning.
void check_layout(ParsedFile& out, uint64_t file_size) {
  std::vector<const Tensor*> by_offset;
  by_offset.reserve(out.tensors.size());
  for (const Tensor& t : out.tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const Tensor* a, const Tensor* b) { return a->offset < b->offset; });
  const uint64_t alignment = out.info.alignment;
  for (size_t i = 0; i < by_offset.size(); ++i) {
    const Tensor& t = *by_offset[i];
    const uint64_t end = t.offset + t.bytes;
    const Tensor* next = i + 1 < by_offset.size() ? by_offset[i + 1] : nullptr;
    const std::string what = out.info.path + ": tensor " + quoted(t.name) + " (" + std::string(t.type.name) + ", " +
                             std::to_string(t.bytes) + " bytes at " + std::to_string(t.offset) + ")";
    if (next && end > next->offset) {
      throw Error("GGUF_TENSOR_OVERLAP", what + " overlaps tensor " + quoted(next->name) + " at " +
                                             std::to_string(next->offset) +
                                             ": a type or shape does not match the data written");
    }
    const uint64_t unused = (next ? next->offset : file_size) - end;
    if (unused < alignment) continue;
    const std::string message = what + " is followed by " + std::to_string(unused) + " unused bytes" +
                                (next ? "" : " at the end of the file") +
                                ": its type or shape may not be the one its data was written with";
    if (next) throw Error("GGUF_TENSOR_LAYOUT", message);
    out.warnings.push_back({"GGUF_TENSOR_LAYOUT", std::string(t.name), message});
  }
}

ParsedFile parse_file(const MappedFile& file) {
  const std::string& path = file.path();
  Cursor c(file);
  ParsedFile out;
  out.info.path = path;
  out.info.size = file.size();

  if (std::memcmp(c.take(4, "the magic number"), "GGUF", 4) != 0) {
    throw Error("GGUF_BAD_MAGIC", path + ": not a GGUF file (bad magic number)");
  }
  out.info.version = c.read<uint32_t>("the version");
  if (out.info.version != 2 && out.info.version != 3) {
    throw Error("GGUF_UNSUPPORTED_VERSION",
                path + ": GGUF version " + std::to_string(out.info.version) + " is not supported (2 or 3)");
  }
  const uint64_t tensor_count = c.read<uint64_t>("the tensor count");
  const uint64_t kv_count = c.read<uint64_t>("the metadata count");
  c.check_count(kv_count, kMinKeyValueBytes, "the metadata count");
  c.check_count(tensor_count, kMinTensorInfoBytes, "the tensor count");
  if (kv_count > kMaxKeyValues || tensor_count > kMaxTensors) {
    throw Error("GGUF_TOO_LARGE", path + ": " + std::to_string(kv_count) + " metadata keys and " +
                                      std::to_string(tensor_count) + " tensors: more than a model holds (" +
                                      std::to_string(kMaxKeyValues) + " keys, " + std::to_string(kMaxTensors) +
                                      " tensors at most)");
  }

  out.metadata.reserve(kv_count);
  std::unordered_set<std::string_view> keys;
  keys.reserve(kv_count);
  ElementCounts counts;
  for (uint64_t i = 0; i < kv_count; ++i) {
    const std::string_view key = c.string("a metadata key");
    if (!is_valid_utf8(key)) throw Error("GGUF_BAD_STRING", path + ": a metadata key is not valid UTF-8");
    if (!keys.insert(key).second) throw Error("GGUF_DUPLICATE", path + ": metadata " + quoted(key) + " appears twice");
    const ValueType type = read_value_type(c, key);
    out.metadata.push_back({key, read_value(c, type, 0, key, counts)});
  }
  out.info.alignment = read_alignment(out.metadata, path);

  out.tensors.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) out.tensors.push_back(read_tensor_info(c));
  out.info.tensor_count = tensor_count;

  const uint64_t alignment = out.info.alignment;
  out.info.data_offset = (c.position() + alignment - 1) / alignment * alignment;
  for (Tensor& t : out.tensors) {
    const std::string where = path + ": tensor " + quoted(t.name);
    if (t.offset % alignment != 0) {
      throw Error("GGUF_TENSOR_OUT_OF_BOUNDS", where + " starts at " + std::to_string(t.offset) +
                                                   ", not a multiple of " + std::to_string(alignment));
    }
    // Both terms are checked against the size first, so the sums cannot overflow.
    const uint64_t size = file.size();
    if (out.info.data_offset > size || t.offset > size - out.info.data_offset ||
        t.bytes > size - out.info.data_offset - t.offset) {
      throw Error("GGUF_TENSOR_OUT_OF_BOUNDS", where + " (" + std::to_string(t.bytes) + " bytes at data offset " +
                                                   std::to_string(t.offset) + ") lies outside the file of " +
                                                   std::to_string(size) + " bytes");
    }
    t.offset += out.info.data_offset;
    t.data = file.data() + t.offset;
  }
  check_layout(out, file.size());
  return out;
}

struct SplitName {
  std::string prefix;
  uint32_t no = 0;
  uint32_t count = 0;
};

// "<prefix>-00001-of-00003.gguf", the names llama.cpp's gguf-split writes.
std::optional<SplitName> parse_split_name(const std::string& path) {
  if (path.size() < kSplitSuffix.size()) return std::nullopt;
  const std::string_view tail = std::string_view(path).substr(path.size() - kSplitSuffix.size());
  if (tail[0] != '-' || tail.substr(6, 4) != "-of-" || tail.substr(15) != ".gguf") return std::nullopt;
  SplitName name;
  name.prefix = path.substr(0, path.size() - kSplitSuffix.size());
  const auto parse5 = [](std::string_view digits, uint32_t& out) {
    for (char ch : digits)
      if (ch < '0' || ch > '9') return false;
    return std::from_chars(digits.data(), digits.data() + digits.size(), out).ec == std::errc();
  };
  if (!parse5(tail.substr(1, 5), name.no) || !parse5(tail.substr(10, 5), name.count)) return std::nullopt;
  return name;
}

std::string split_path(const std::string& prefix, uint64_t no, uint64_t count) {
  char suffix[48];
  std::snprintf(suffix, sizeof(suffix), "-%05llu-of-%05llu.gguf", static_cast<unsigned long long>(no),
                static_cast<unsigned long long>(count));
  return prefix + suffix;
}

[[noreturn]] void split_error(const std::string& message) { throw Error("GGUF_SPLIT", message); }

}  // namespace

std::string_view value_type_name(ValueType type) {
  switch (type) {
    case ValueType::U8:
      return "u8";
    case ValueType::I8:
      return "i8";
    case ValueType::U16:
      return "u16";
    case ValueType::I16:
      return "i16";
    case ValueType::U32:
      return "u32";
    case ValueType::I32:
      return "i32";
    case ValueType::F32:
      return "f32";
    case ValueType::Bool:
      return "bool";
    case ValueType::String:
      return "string";
    case ValueType::Array:
      return "array";
    case ValueType::U64:
      return "u64";
    case ValueType::I64:
      return "i64";
    case ValueType::F64:
      return "f64";
  }
  return "unknown";
}

uint32_t value_type_size(ValueType type) {
  switch (type) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::Bool:
      return 1;
    case ValueType::U16:
    case ValueType::I16:
      return 2;
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::F32:
      return 4;
    case ValueType::U64:
    case ValueType::I64:
    case ValueType::F64:
      return 8;
    case ValueType::String:
    case ValueType::Array:
      return 0;
  }
  return 0;
}

std::string Value::type_name() const {
  if (type != ValueType::Array) return std::string(value_type_name(type));
  if (element_type != ValueType::Array) return "array<" + std::string(value_type_name(element_type)) + ">";
  // An empty array of arrays does not say what its elements hold; GGUF gives no deeper type.
  const std::string inner = arrays.empty() ? "array<u8>" : arrays.front().type_name();
  return "array<" + inner + ">";
}

std::optional<int64_t> Value::to_int() const {
  switch (type) {
    case ValueType::U8:
      return load<uint8_t>(bytes);
    case ValueType::I8:
      return load<int8_t>(bytes);
    case ValueType::U16:
      return load<uint16_t>(bytes);
    case ValueType::I16:
      return load<int16_t>(bytes);
    case ValueType::U32:
      return load<uint32_t>(bytes);
    case ValueType::I32:
      return load<int32_t>(bytes);
    case ValueType::I64:
      return load<int64_t>(bytes);
    case ValueType::U64: {
      const uint64_t v = load<uint64_t>(bytes);
      if (v > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return int64_t(v);
    }
    default:
      return std::nullopt;
  }
}

std::optional<uint64_t> Value::to_uint() const {
  if (type == ValueType::U64) return load<uint64_t>(bytes);
  const std::optional<int64_t> v = to_int();
  if (!v || *v < 0) return std::nullopt;
  return uint64_t(*v);
}

std::optional<double> Value::to_double() const {
  if (type == ValueType::F32) return load<float>(bytes);
  if (type == ValueType::F64) return load<double>(bytes);
  if (type == ValueType::U64) return double(load<uint64_t>(bytes));
  const std::optional<int64_t> v = to_int();
  if (!v) return std::nullopt;
  return double(*v);
}

GgufFile GgufFile::open(const std::string& path, const MapOptions& options) {
  GgufFile g;
  g.maps_.emplace_back(path, options);
  ParsedFile first = parse_file(g.maps_.front());
  g.metadata_ = std::move(first.metadata);
  g.metadata_index_.reserve(g.metadata_.size());
  for (size_t i = 0; i < g.metadata_.size(); ++i) g.metadata_index_.emplace(g.metadata_[i].key, i);

  const std::optional<uint64_t> split_count = g.get_uint("split.count");
  const std::optional<uint64_t> split_no = g.get_uint("split.no");
  const std::optional<SplitName> name = parse_split_name(path);
  if (!split_count && name && name->count > 1) {
    split_error(path + ": named as shard " + std::to_string(name->no) + " of " + std::to_string(name->count) +
                " but has no split.count");
  }
  if (split_no.value_or(0) != 0) {
    split_error(path + ": is shard " + std::to_string(*split_no + 1) + " of a split model; open the first shard");
  }
  const uint64_t count = split_count.value_or(1);
  if (count == 0) split_error(path + ": split.count is 0");
  if (count > 1) {
    if (!name || name->no != 1 || name->count != count) {
      split_error(path + ": split.count is " + std::to_string(count) + " but the name does not end in " +
                  split_path("", 1, count));
    }
  }

  g.files_.push_back(std::move(first.info));
  g.warnings_ = std::move(first.warnings);
  std::vector<std::vector<Tensor>> per_file;
  per_file.push_back(std::move(first.tensors));
  for (uint64_t i = 1; i < count; ++i) {
    const std::string shard = split_path(name->prefix, i + 1, count);
    try {
      g.maps_.emplace_back(shard, options);
    } catch (const Error& e) {
      if (e.code() == "FILE_NOT_FOUND") split_error(path + ": shard " + shard + " is missing");
      throw;
    }
    ParsedFile part = parse_file(g.maps_.back());
    const std::optional<uint64_t> no = uint_of(find_in(part.metadata, "split.no"), "split.no");
    const std::optional<uint64_t> of = uint_of(find_in(part.metadata, "split.count"), "split.count");
    if (no != i || of != count) {
      split_error(shard + ": split.no/split.count say shard " + (no ? std::to_string(*no + 1) : "?") + " of " +
                  (of ? std::to_string(*of) : "?") + ", expected " + std::to_string(i + 1) + " of " +
                  std::to_string(count));
    }
    g.files_.push_back(std::move(part.info));
    per_file.push_back(std::move(part.tensors));
    for (FileWarning& w : part.warnings) g.warnings_.push_back(std::move(w));
  }

  size_t total = 0;
  for (const auto& ts : per_file) total += ts.size();
  const std::optional<uint64_t> expected = g.get_uint("split.tensors.count");
  if (count > 1 && !expected) split_error(path + ": a split model without split.tensors.count");
  if (expected && *expected != total) {
    split_error(path + ": split.tensors.count is " + std::to_string(*expected) + " but the shards hold " +
                std::to_string(total) + " tensors");
  }

  g.tensors_.reserve(total);
  g.tensor_index_.reserve(total);
  for (uint32_t f = 0; f < per_file.size(); ++f) {
    for (Tensor& t : per_file[f]) {
      t.file = f;
      if (!g.tensor_index_.emplace(t.name, g.tensors_.size()).second) {
        throw Error("GGUF_DUPLICATE", g.files_[f].path + ": tensor " + quoted(t.name) + " appears twice");
      }
      g.tensors_.push_back(t);
    }
  }
  return g;
}

void GgufFile::check_unchanged() const {
  for (const MappedFile& map : maps_) map.check_unchanged();
}

const Value* GgufFile::find(std::string_view key) const {
  const auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].value;
}

const Tensor* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::optional<uint64_t> GgufFile::get_uint(std::string_view key) const { return uint_of(find(key), key); }

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  const std::optional<int64_t> n = v->to_int();
  if (!n) wrong_type(key, *v, "an integer");
  return n;
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  const std::optional<double> n = v->to_double();
  if (!n) wrong_type(key, *v, "a number");
  return n;
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::Bool) wrong_type(key, *v, "bool");
  return *v->bytes != 0;
}

std::optional<std::string_view> GgufFile::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::String) wrong_type(key, *v, "string");
  return v->string;
}

std::optional<std::span<const std::string_view>> GgufFile::get_strings(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::Array || v->element_type != ValueType::String) wrong_type(key, *v, "array<string>");
  return std::span<const std::string_view>(v->strings);
}

std::optional<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::Array || !is_integer_type(v->element_type)) wrong_type(key, *v, "an array of integers");
  std::vector<int64_t> out(v->count);
  for (uint64_t i = 0; i < v->count; ++i) {
    const std::optional<int64_t> n = element_at(*v, i).to_int();
    if (!n) wrong_type(key, *v, "integers that fit in i64");
    out[i] = *n;
  }
  return out;
}

std::optional<std::vector<double>> GgufFile::get_float_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  const bool numeric =
      v->type == ValueType::Array &&
      (is_integer_type(v->element_type) || v->element_type == ValueType::F32 || v->element_type == ValueType::F64);
  if (!numeric) wrong_type(key, *v, "an array of numbers");
  std::vector<double> out(v->count);
  for (uint64_t i = 0; i < v->count; ++i) out[i] = *element_at(*v, i).to_double();
  return out;
}

}  // namespace bloomery::gguf
