// A session's state outside the session: the tokens that produced its KV cache and the keys
// and values of those positions, as the prompt-state cache keeps it in RAM and as
// Session::save writes it to a file. A state belongs to one model: its fingerprint (a hash
// of the file's tensor layout, hyper-parameters and the first bytes of every tensor) must
// match the session that restores it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model.h"

namespace bloomery::engine {

struct SessionState {
  uint64_t model_fingerprint = 0;
  int64_t layers = 0;
  int64_t row_width = 0;  // kv_heads * head_dim
  std::vector<int32_t> tokens;
  // f16, layer after layer, tokens.size() rows of row_width each per layer.
  std::vector<uint16_t> keys, values;

  // Host memory the state holds.
  uint64_t bytes() const;
};

// Host memory a state of `tokens` tokens holds (SessionState::bytes before making it).
uint64_t session_state_bytes(int64_t layers, int64_t row_width, int64_t tokens);

// The identity a state is checked against (see above). Reads a few bytes of every tensor.
uint64_t model_fingerprint(const model::Model& model);

// Writes `state` to `path` (a versioned header, then the tokens, keys and values). Throws
// FILE_WRITE naming the path and the system's reason.
void write_state_file(const std::string& path, const SessionState& state);

// Reads a file write_state_file wrote. Throws FILE_NOT_FOUND / FILE_READ, STATE_BAD_FILE (not
// a state file, or truncated), STATE_UNSUPPORTED_VERSION, or STATE_MODEL_MISMATCH when the
// file's fingerprint is not `expected_fingerprint` (checked before the bulk is read).
SessionState read_state_file(const std::string& path, uint64_t expected_fingerprint);

}  // namespace bloomery::engine
