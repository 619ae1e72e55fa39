#include "engine/state.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

#include "base/error.h"

namespace bloomery::engine {

namespace {

// The file: this header (little-endian, as the engine's hosts are), then tokens (int32),
// keys and values (f16, layer after layer), then the recurrent states (f32), then the compressed
// rows (f16; none but for compressed attention, so files of other models are as version 4 wrote them).
constexpr char kMagic[8] = {'B', 'L', 'M', 'Y', 'K', 'V', 'S', 'T'};
constexpr uint32_t kVersion = 4;

struct FileHeader {
  char magic[8];
  uint32_t version;
  // Layers of linear attention, whose recurrent states follow the values (0 for other models,
  // which is what version 3 files before them held here).
  uint32_t linear_layers;
  uint64_t model_fingerprint;
  uint64_t layers;
  uint64_t key_width;    // f16 keys of a position in one layer
  uint64_t value_width;  // its values (0 where they are the keys' first elements: latent attention)
  uint64_t tokens;
  uint64_t windowed_layers;  // of `layers`, the sliding-window ones (rows from window_first on)
  uint64_t window_first;
  uint64_t shifted_from;  // SessionState::shifted_from, at most `tokens` (which stands for kNoShift)
  uint64_t checksum;      // of this header (with checksum 0), then the tokens, keys and values
};

// Tensors up to this size enter the fingerprint whole; larger ones by kSamples samples of kSampleBytes.
constexpr uint64_t kWholeTensorBytes = 64 << 10;
constexpr uint64_t kSamples = 16;
constexpr uint64_t kSampleBytes = 64;

// A 64-bit hash fed in pieces, eight bytes at a time: a checksum against corruption and the
// model's identity, not a defence against a forger (every field of a state is checked anyway).
class Hash {
 public:
  void add(const void* data, size_t bytes) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (; bytes >= 8; p += 8, bytes -= 8) {
      uint64_t word;
      std::memcpy(&word, p, 8);
      mix(word);
    }
    if (bytes > 0) {
      uint64_t tail = 0;
      std::memcpy(&tail, p, bytes);
      mix(tail ^ (uint64_t(bytes) << 56));
    }
  }
  template <typename T>
  void add_value(const T& value) {
    add(&value, sizeof value);
  }
  void add_text(std::string_view text) {
    add_value(text.size());
    add(text.data(), text.size());
  }
  uint64_t value() const {
    uint64_t h = state_ ^ (state_ >> 33);
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 33);
  }

 private:
  void mix(uint64_t word) {
    state_ ^= word * 0x9e3779b97f4a7c15ull;
    state_ = ((state_ << 31) | (state_ >> 33)) * 0xbf58476d1ce4e5b9ull;
  }
  uint64_t state_ = 0x2545f4914f6cdd1dull;
};

uint64_t state_checksum(FileHeader header, const SessionState& state) {
  header.checksum = 0;
  Hash h;
  h.add_value(header);
  h.add(state.tokens.data(), state.tokens.size() * sizeof(int32_t));
  h.add(state.keys.data(), state.keys.size() * sizeof(uint16_t));
  h.add(state.values.data(), state.values.size() * sizeof(uint16_t));
  h.add(state.recurrent.data(), state.recurrent.size() * sizeof(float));
  h.add(state.compressed.data(), state.compressed.size() * sizeof(uint16_t));
  return h.value();
}

// Owns a file descriptor.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

void refuse_nul(const std::string& path) {
  if (path.find('\0') != std::string::npos) throw Error("INVALID_ARGUMENT", "a file path contains a NUL byte");
}

std::string kind_of(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

}  // namespace

StateShape state_shape(const model::Model& model) {
  const model::HyperParams& p = model.params;
  StateShape shape{p.layers, 0, model::cache_row(p)};
  for (int64_t l = 0; l < p.layers; ++l) {
    const model::AttentionWeights& a = model.layers[l].attention;
    shape.windowed_layers += a.windowed ? 1 : 0;
    if (a.kind == model::AttentionKind::kDeltaNet) {
      ++shape.linear_layers;
      shape.recurrent_floats += p.delta_net.state_floats();
    }
    const int64_t width = model::compressed_row_width(p, l);
    if (width > 0) {
      const int64_t ratio = p.compressed.ratios[static_cast<size_t>(l)];
      shape.recurrent_floats += p.compressed.state_floats(ratio, p.head_dim, p.indexer.head_dim);
      shape.compressed.push_back({ratio, width});
    }
  }
  return shape;
}

int64_t compressed_elements(const StateShape& shape, int64_t tokens) {
  int64_t n = 0;
  for (const CompressedRows& c : shape.compressed) n += tokens / c.ratio * c.width;
  return n;
}

int64_t state_rows(const StateShape& shape, int64_t tokens, int64_t window_first) {
  return (shape.layers - shape.windowed_layers - shape.linear_layers) * tokens +
         shape.windowed_layers * (tokens - window_first);
}

uint64_t session_state_bytes(const StateShape& shape, int64_t tokens, int64_t window_first) {
  return sizeof(SessionState) + static_cast<uint64_t>(tokens) * sizeof(int32_t) +
         static_cast<uint64_t>(state_rows(shape, tokens, window_first) * (shape.row.keys + shape.row.values)) *
             sizeof(uint16_t) +
         static_cast<uint64_t>(shape.recurrent_floats) * sizeof(float) +
         static_cast<uint64_t>(compressed_elements(shape, tokens)) * sizeof(uint16_t);
}

uint64_t SessionState::bytes() const {
  return sizeof(SessionState) + tokens.size() * sizeof(int32_t) +
         (keys.size() + values.size() + compressed.size()) * sizeof(uint16_t) + recurrent.size() * sizeof(float);
}

uint64_t model_fingerprint(const model::Model& model) {
  const gguf::GgufFile& file = model.file;
  file.check_unchanged();
  Hash h;
  h.add_text(model.params.architecture);
  std::vector<uint8_t> bytes;
  for (uint32_t f = 0; f < file.files().size(); ++f) {
    bytes.resize(file.files()[f].data_offset);
    file.read(f, 0, bytes.data(), bytes.size());
    h.add(bytes.data(), bytes.size());
  }
  for (const gguf::Tensor& t : file.tensors()) {
    if (t.bytes <= kWholeTensorBytes) {
      bytes.resize(t.bytes);
      file.read(t.file, t.offset, bytes.data(), t.bytes);
      h.add(bytes.data(), bytes.size());
      continue;
    }
    bytes.resize(kSampleBytes);
    for (uint64_t i = 0; i < kSamples; ++i) {
      file.read(t.file, t.offset + i * (t.bytes - kSampleBytes) / (kSamples - 1), bytes.data(), kSampleBytes);
      h.add(bytes.data(), kSampleBytes);
    }
  }
  return h.value();
}

void write_state_file(const std::string& path, const SessionState& state) {
  refuse_nul(path);
  const auto fail = [&](const std::string& why) {
    throw Error("FILE_WRITE", "cannot write the session state to " + path + ": " + why);
  };
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) fail("it is " + kind_of(st.st_mode));

  std::string temp = path + ".tmp-XXXXXX";
  Fd fd(::mkostemp(temp.data(), O_CLOEXEC));
  if (fd.get() < 0) fail(std::strerror(errno));
  const auto fail_removing = [&](const std::string& why) {
    ::unlink(temp.c_str());
    fail(why);
  };
  FileHeader header{};
  std::memcpy(header.magic, kMagic, sizeof kMagic);
  header.version = kVersion;
  header.model_fingerprint = state.model_fingerprint;
  header.layers = static_cast<uint64_t>(state.layers);
  header.linear_layers = static_cast<uint32_t>(state.linear_layers);
  header.key_width = static_cast<uint64_t>(state.row.keys);
  header.value_width = static_cast<uint64_t>(state.row.values);
  header.tokens = state.tokens.size();
  header.windowed_layers = static_cast<uint64_t>(state.windowed_layers);
  header.window_first = static_cast<uint64_t>(state.window_first);
  header.shifted_from = static_cast<uint64_t>(std::min<int64_t>(state.shifted_from, state.tokens.size()));
  header.checksum = state_checksum(header, state);
  const auto write = [&](const void* data, size_t bytes) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (bytes > 0) {
      const ssize_t n = ::write(fd.get(), p, bytes);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail_removing(std::strerror(errno));
      p += n;
      bytes -= static_cast<size_t>(n);
    }
  };
  write(&header, sizeof header);
  write(state.tokens.data(), state.tokens.size() * sizeof(int32_t));
  write(state.keys.data(), state.keys.size() * sizeof(uint16_t));
  write(state.values.data(), state.values.size() * sizeof(uint16_t));
  write(state.recurrent.data(), state.recurrent.size() * sizeof(float));
  write(state.compressed.data(), state.compressed.size() * sizeof(uint16_t));
  if (::close(fd.release()) != 0) fail_removing(std::strerror(errno));
  // rename replaces the directory entry, whatever it is now: a link there is not followed.
  if (::rename(temp.c_str(), path.c_str()) != 0) fail_removing(std::strerror(errno));
}

SessionState read_state_file(const std::string& path, const StateExpectation& expected) {
  refuse_nul(path);
  // O_NOFOLLOW: a link is refused, not followed; O_NONBLOCK: a FIFO does not wait for a writer.
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (fd.get() < 0) {
    const int error = errno;
    if (error == ELOOP) throw Error("FILE_READ", "cannot open the session state " + path + ": it is a symbolic link");
    throw Error(error == ENOENT ? "FILE_NOT_FOUND" : "FILE_READ",
                "cannot open the session state " + path + ": " + std::strerror(error));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw Error("FILE_READ", "cannot stat " + path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw Error("FILE_READ", "the session state " + path + " is " + kind_of(st.st_mode));
  const auto bad = [&](const std::string& why) {
    throw Error("STATE_BAD_FILE", path + " is not a bloomery session state: " + why);
  };
  uint64_t at = 0;
  const auto read = [&](void* data, size_t bytes) {
    auto* p = static_cast<uint8_t*>(data);
    while (bytes > 0) {
      const ssize_t n = ::pread(fd.get(), p, bytes, static_cast<off_t>(at));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw Error("FILE_READ", "cannot read " + path + ": " + std::strerror(errno));
      if (n == 0) bad("it is truncated");
      p += n;
      at += static_cast<uint64_t>(n);
      bytes -= static_cast<size_t>(n);
    }
  };
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  FileHeader header{};
  if (size < sizeof header) bad("it is shorter than a header");
  read(&header, sizeof header);
  if (std::memcmp(header.magic, kMagic, sizeof kMagic) != 0) bad("its magic is wrong");
  if (header.version != kVersion) {
    throw Error("STATE_UNSUPPORTED_VERSION", path + " is a session state of version " + std::to_string(header.version) +
                                                 "; this bloomery reads version " + std::to_string(kVersion));
  }
  const StateShape& shape = expected.shape;
  if (header.model_fingerprint != expected.model_fingerprint || header.layers != static_cast<uint64_t>(shape.layers) ||
      header.linear_layers != static_cast<uint64_t>(shape.linear_layers) ||
      header.windowed_layers != static_cast<uint64_t>(shape.windowed_layers) ||
      header.key_width != static_cast<uint64_t>(shape.row.keys) ||
      header.value_width != static_cast<uint64_t>(shape.row.values)) {
    throw Error("STATE_MODEL_MISMATCH", path + " was saved from another model (or another file of it)");
  }
  if (header.tokens > static_cast<uint64_t>(expected.max_tokens)) {
    throw Error("CONTEXT_TOO_LONG", path + " holds " + std::to_string(header.tokens) +
                                        " tokens, more than the context of " + std::to_string(expected.max_tokens));
  }
  if (header.window_first > header.tokens || header.window_first % model::kWindowAlign != 0 ||
      (shape.windowed_layers == 0 && header.window_first != 0)) {
    bad("its window_first " + std::to_string(header.window_first) + " does not fit its " +
        std::to_string(header.tokens) + " tokens");
  }
  if (header.shifted_from > header.tokens) {
    bad("its shifted_from " + std::to_string(header.shifted_from) + " is past its " + std::to_string(header.tokens) +
        " tokens");
  }
  // The widths matched the session's: their products with the layers and tokens stay far from overflow.
  const auto rows = static_cast<uint64_t>(
      state_rows(shape, static_cast<int64_t>(header.tokens), static_cast<int64_t>(header.window_first)));
  const uint64_t keys = rows * header.key_width;
  const uint64_t values = rows * header.value_width;
  const auto recurrent = static_cast<uint64_t>(shape.recurrent_floats);
  const auto compressed = static_cast<uint64_t>(compressed_elements(shape, static_cast<int64_t>(header.tokens)));
  const uint64_t payload =
      (keys + values + compressed) * sizeof(uint16_t) + header.tokens * sizeof(int32_t) + recurrent * sizeof(float);
  if (size - sizeof header != payload) bad("its size does not match its header");
  SessionState state;
  state.model_fingerprint = header.model_fingerprint;
  state.layers = shape.layers;
  state.windowed_layers = shape.windowed_layers;
  state.row = shape.row;
  state.linear_layers = shape.linear_layers;
  state.window_first = static_cast<int64_t>(header.window_first);
  state.shifted_from =
      header.shifted_from < header.tokens ? static_cast<int64_t>(header.shifted_from) : SessionState::kNoShift;
  state.tokens.resize(header.tokens);
  state.keys.resize(keys);
  state.values.resize(values);
  read(state.tokens.data(), state.tokens.size() * sizeof(int32_t));
  read(state.keys.data(), keys * sizeof(uint16_t));
  read(state.values.data(), values * sizeof(uint16_t));
  state.recurrent.resize(recurrent);
  read(state.recurrent.data(), recurrent * sizeof(float));
  state.compressed.resize(compressed);
  read(state.compressed.data(), compressed * sizeof(uint16_t));
  if (state_checksum(header, state) != header.checksum) bad("its checksum does not match its contents");
  for (size_t i = 0; i < state.tokens.size(); ++i) {
    if (state.tokens[i] < 0 || state.tokens[i] >= expected.vocab) {
      bad("token " + std::to_string(i) + " is " + std::to_string(state.tokens[i]) + ", outside the vocabulary of " +
          std::to_string(expected.vocab));
    }
  }
  return state;
}

}  // namespace bloomery::engine
