// A session's state outside the session: the tokens that produced its KV cache and the keys
// and values of those positions, as the prompt-state cache keeps it in RAM and as
// Session::save writes it to a file. A saved state belongs to one model: its fingerprint
// (model_fingerprint below) must match the session that restores it.
#pragma once

#include <cstdint>
#include <limits>
#include <memory_resource>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "model/model.h"

namespace bloomery::engine {

// A polymorphic allocator whose elements start unset where no value is given: a state's buffers
// are filled by copies right after they are sized, and zeroing them first would write each of
// their bytes once more (63 MiB a checkpoint of Qwen3.6-35B-A3B's recurrent states).
template <typename T>
class FillLaterAllocator : public std::pmr::polymorphic_allocator<T> {
 public:
  using std::pmr::polymorphic_allocator<T>::polymorphic_allocator;
  template <typename U>
  struct rebind {
    using other = FillLaterAllocator<U>;
  };
  // As polymorphic_allocator: a copy of a container takes the default resource.
  FillLaterAllocator select_on_container_copy_construction() const { return {}; }
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    std::pmr::polymorphic_allocator<T>::construct(p, std::forward<Args>(args)...);
  }
};
// A state's rows or recurrent states, in a memory resource (page-locked, kept blocks or the heap).
template <typename T>
using StateBuffer = std::vector<T, FillLaterAllocator<T>>;

struct SessionState {
  SessionState() = default;
  // Its rows and states in `memory` (the prompt-state cache keeps a GPU model's states page-locked).
  explicit SessionState(std::pmr::memory_resource* memory)
      : keys(memory), values(memory), recurrent(memory), compressed(memory) {}

  uint64_t model_fingerprint = 0;  // set by Session::save; the prompt-state cache's states never leave their model
  int64_t layers = 0;
  int64_t windowed_layers = 0;  // of them, the layers of sliding-window attention
  model::CacheRow row;          // a position's keys and values in one layer (model::cache_row)
  std::vector<int32_t> tokens;
  // A windowed layer's rows are those of positions [window_first, tokens.size()) (what its
  // cache still held); a full layer's [0, tokens.size()). 0 without windowed layers.
  int64_t window_first = 0;
  // The first position whose rows came through a context shift (engine/context_shift.h): they
  // attended tokens the shift dropped, so they are not what evaluating the tokens afresh gives,
  // and a prompt reuses the state only up to here. kNoShift: every row is fresh.
  static constexpr int64_t kNoShift = std::numeric_limits<int64_t>::max();
  int64_t shifted_from = kNoShift;
  // f16, layer after layer in the model's order, each layer's rows of row.keys (row.values).
  StateBuffer<uint16_t> keys, values;
  // Layers of linear attention (no rows), and the recurrent states after the last token of every
  // layer that keeps one (linear attention's, compressors'), layer after layer.
  int64_t linear_layers = 0;
  StateBuffer<float> recurrent;
  // Compressed attention's compressed rows (f16, layer after layer): of each such layer, the rows
  // of the blocks its tokens completed (model::compressed_row_width each).
  StateBuffer<uint16_t> compressed;

  // Host memory the state holds.
  uint64_t bytes() const;
};

// A layer of compressed attention's rows in a state: one of `width` f16 elements per block of
// `ratio` positions.
struct CompressedRows {
  int64_t ratio = 0;
  int64_t width = 0;
};

// The shape of a state's payload: how many layers it has, how many of them are windowed, a
// position's widths, how many layers are of linear attention, how large all recurrent states are
// together, and the layers with compressed rows.
struct StateShape {
  int64_t layers = 0;
  int64_t windowed_layers = 0;
  model::CacheRow row;
  int64_t linear_layers = 0;
  int64_t recurrent_floats = 0;
  std::vector<CompressedRows> compressed;
};
StateShape state_shape(const model::Model& model);

// f16 elements of the compressed rows of a state of `tokens` tokens over all its layers.
int64_t compressed_elements(const StateShape& shape, int64_t tokens);

// Rows of keys (values) of a state of `tokens` tokens over all its layers.
int64_t state_rows(const StateShape& shape, int64_t tokens, int64_t window_first);

// Host memory a state holds (SessionState::bytes before making it).
uint64_t session_state_bytes(const StateShape& shape, int64_t tokens, int64_t window_first);

// The identity a saved state is checked against: a hash of every file's header (all metadata
// and the tensor table), the whole data of each tensor up to 64 KiB, and 16 evenly spaced
// 64-byte samples (the first and last included) of each larger tensor. Two files share it only
// when they agree on all of that: a fine-tune, another quantization or another vocabulary
// differs; an edit confined to bytes between the samples of a large tensor does not. It reads
// about 16 pages per large tensor (with pread, so a cold file is not faulted in by whole
// read-around windows): tens of milliseconds, once per loaded model. MODEL_FILE_CHANGED when
// the file changed on disk since it was loaded.
uint64_t model_fingerprint(const model::Model& model);

// Writes `state` to `path`: a versioned header with a checksum of the whole file, then the
// tokens, keys and values. The bytes go to a new file in the same folder that then replaces
// `path` by rename, so a symbolic link at `path` is replaced, never followed. Throws
// INVALID_ARGUMENT for a path with a NUL byte, FILE_WRITE naming the path and the reason (among
// them: something other than a regular file is at `path`).
void write_state_file(const std::string& path, const SessionState& state);

// What a state file must match to restore into a session.
struct StateExpectation {
  uint64_t model_fingerprint = 0;
  StateShape shape;
  int64_t max_tokens = 0;  // the session's context
  int64_t vocab = 0;       // every token id is below it
};

// Reads a file write_state_file wrote, never following a symbolic link and never waiting on a
// FIFO or device (FILE_READ: not a regular file). Checks every field before it allocates
// anything: STATE_BAD_FILE (not a state file, a size that does not match the header,
// truncated, a checksum that does not match, a token outside the vocabulary),
// STATE_UNSUPPORTED_VERSION, STATE_MODEL_MISMATCH (another model's fingerprint or shape; a
// window_first that is not a multiple of model::kWindowAlign or past the tokens, or a shifted_from past the
// tokens, is STATE_BAD_FILE),
// CONTEXT_TOO_LONG (more tokens than max_tokens); FILE_NOT_FOUND / FILE_READ.
SessionState read_state_file(const std::string& path, const StateExpectation& expected);

}  // namespace bloomery::engine
