#include "engine/state.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>

#include "base/error.h"

namespace bloomery::engine {

namespace {

// The file: this header (little-endian, as the engine's hosts are), then tokens (int32),
// keys and values (f16, layer after layer).
constexpr char kMagic[8] = {'B', 'L', 'M', 'Y', 'K', 'V', 'S', 'T'};
constexpr uint32_t kVersion = 1;

struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t reserved;
  uint64_t model_fingerprint;
  uint64_t layers;
  uint64_t row_width;
  uint64_t tokens;
};

// Bytes of each tensor that enter the fingerprint: enough to tell two weight sets of one layout apart.
constexpr uint64_t kSampledBytes = 32;

class Fnv1a {
 public:
  void add(const void* data, size_t bytes) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < bytes; ++i) hash_ = (hash_ ^ p[i]) * 0x100000001b3ull;
  }
  template <typename T>
  void add_value(const T& value) {
    add(&value, sizeof value);
  }
  void add_text(std::string_view text) {
    add_value(text.size());
    add(text.data(), text.size());
  }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ull;
};

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

}  // namespace

uint64_t session_state_bytes(int64_t layers, int64_t row_width, int64_t tokens) {
  return sizeof(SessionState) + static_cast<uint64_t>(tokens) * sizeof(int32_t) +
         2 * static_cast<uint64_t>(layers * row_width * tokens) * sizeof(uint16_t);
}

uint64_t SessionState::bytes() const {
  return session_state_bytes(layers, row_width, static_cast<int64_t>(tokens.size()));
}

uint64_t model_fingerprint(const model::Model& model) {
  Fnv1a h;
  const model::HyperParams& p = model.params;
  h.add_text(p.architecture);
  for (const int64_t v : {p.layers, p.embedding, p.vocab, p.heads, p.kv_heads, p.head_dim, p.experts, p.experts_used}) {
    h.add_value(v);
  }
  for (const gguf::Tensor& t : model.file.tensors()) {
    h.add_text(t.name);
    h.add_value(t.type.id);
    h.add(t.shape.data(), sizeof t.shape);
    h.add(t.data, static_cast<size_t>(std::min(t.bytes, kSampledBytes)));
  }
  return h.value();
}

void write_state_file(const std::string& path, const SessionState& state) {
  const auto fail = [&](int error) {
    throw Error("FILE_WRITE", "cannot write the session state to " + path + ": " + std::strerror(error));
  };
  File file(std::fopen(path.c_str(), "wb"));
  if (!file) fail(errno);
  FileHeader header{};
  std::memcpy(header.magic, kMagic, sizeof kMagic);
  header.version = kVersion;
  header.model_fingerprint = state.model_fingerprint;
  header.layers = static_cast<uint64_t>(state.layers);
  header.row_width = static_cast<uint64_t>(state.row_width);
  header.tokens = state.tokens.size();
  const auto write = [&](const void* data, size_t bytes) {
    if (bytes != 0 && std::fwrite(data, 1, bytes, file.get()) != bytes) fail(errno);
  };
  write(&header, sizeof header);
  write(state.tokens.data(), state.tokens.size() * sizeof(int32_t));
  write(state.keys.data(), state.keys.size() * sizeof(uint16_t));
  write(state.values.data(), state.values.size() * sizeof(uint16_t));
  if (std::fclose(file.release()) != 0) fail(errno);
}

SessionState read_state_file(const std::string& path, uint64_t expected_fingerprint) {
  File file(std::fopen(path.c_str(), "rb"));
  if (!file) {
    const int error = errno;
    throw Error(error == ENOENT ? "FILE_NOT_FOUND" : "FILE_READ",
                "cannot open the session state " + path + ": " + std::strerror(error));
  }
  const auto bad = [&](const std::string& why) {
    throw Error("STATE_BAD_FILE", path + " is not a bloomery session state: " + why);
  };
  const auto read = [&](void* data, size_t bytes) {
    if (bytes == 0) return;
    if (std::fread(data, 1, bytes, file.get()) != bytes) {
      if (std::ferror(file.get())) throw Error("FILE_READ", "cannot read " + path + ": " + std::strerror(errno));
      bad("it is truncated");
    }
  };
  FileHeader header{};
  read(&header, sizeof header);
  if (std::memcmp(header.magic, kMagic, sizeof kMagic) != 0) bad("its magic is wrong");
  if (header.version != kVersion) {
    throw Error("STATE_UNSUPPORTED_VERSION", path + " is a session state of version " + std::to_string(header.version) +
                                                 "; this bloomery reads version " + std::to_string(kVersion));
  }
  if (header.model_fingerprint != expected_fingerprint) {
    throw Error("STATE_MODEL_MISMATCH", path + " was saved from another model (or another file of it)");
  }
  if (std::fseek(file.get(), 0, SEEK_END) != 0) throw Error("FILE_READ", "cannot seek in " + path);
  const long size = std::ftell(file.get());
  std::fseek(file.get(), sizeof header, SEEK_SET);
  const uint64_t payload = static_cast<uint64_t>(size) - sizeof header;
  uint64_t elements = 0, payload_bytes = 0;
  if (size < static_cast<long>(sizeof header) || header.layers == 0 || header.row_width == 0 ||
      header.tokens > payload || __builtin_mul_overflow(header.layers, header.row_width, &elements) ||
      __builtin_mul_overflow(elements, header.tokens, &elements) ||
      __builtin_mul_overflow(elements, 2 * sizeof(uint16_t), &payload_bytes) ||
      __builtin_add_overflow(payload_bytes, header.tokens * sizeof(int32_t), &payload_bytes) ||
      payload != payload_bytes) {
    bad("its size does not match its header");
  }
  SessionState state;
  state.model_fingerprint = header.model_fingerprint;
  state.layers = static_cast<int64_t>(header.layers);
  state.row_width = static_cast<int64_t>(header.row_width);
  state.tokens.resize(header.tokens);
  state.keys.resize(elements);
  state.values.resize(elements);
  read(state.tokens.data(), state.tokens.size() * sizeof(int32_t));
  read(state.keys.data(), elements * sizeof(uint16_t));
  read(state.values.data(), elements * sizeof(uint16_t));
  return state;
}

}  // namespace bloomery::engine
