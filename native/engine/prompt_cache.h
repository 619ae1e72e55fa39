// The prompt-state cache (llama-server's --cache-ram): saved session states in host RAM,
// keyed by their token history, at most `capacity` bytes, least recently used out first.
// One per model; every session of the model stores into it and restores from it.
// Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>

#include "engine/state.h"

namespace bloomery::engine {

class PromptCache {
 public:
  // `whole_states`: the states cannot be cut back (a model with recurrent layers): an entry
  // serves a prompt only if the prompt begins with all of its tokens, and shorter entries are
  // kept beside longer ones (they are the checkpoints of prefixes).
  explicit PromptCache(uint64_t capacity, bool whole_states = false)
      : capacity_(capacity), whole_states_(whole_states) {}

  struct Match {
    std::shared_ptr<const SessionState> state;  // null when nothing shares a token with the prompt
    int64_t length = 0;                         // tokens the state shares with the prompt, from the start
  };

  // What store did with a state: took it as an entry, refreshed an entry that holds its tokens
  // already (the state itself is not kept), or refused it.
  enum class Stored { kTaken, kRefreshed, kRefused };

  // Takes `state` as the most recently used entry, unless it is larger than the whole cache or
  // has no tokens (refused). An entry whose tokens begin the new state's is dropped (the new one
  // holds it too); a state whose tokens begin an entry's only refreshes that entry (with
  // whole_states, both only for the same tokens). Then the least recently used entries go until
  // the rest fits.
  Stored store(std::shared_ptr<const SessionState> state);

  // Whether an entry's tokens begin with `tokens` (then it counts as used): such a state
  // needs no storing.
  bool holds(std::span<const int32_t> tokens);

  // The entry sharing the longest prefix with `tokens` (with whole_states: the longest entry whose
  // tokens all begin `tokens`), marked as used, or an empty match.
  // With whole_states, only entries of at most `longest` tokens count: a prompt that a cached
  // state covers whole still evaluates its last token, so a shorter entry serves it.
  Match find(std::span<const int32_t> tokens, int64_t longest = INT64_MAX);

  uint64_t capacity() const { return capacity_; }
  uint64_t bytes() const;
  size_t size() const;

 private:
  const uint64_t capacity_;
  const bool whole_states_;
  mutable std::mutex mutex_;
  std::list<std::shared_ptr<const SessionState>> entries_;  // most recently used first
  uint64_t bytes_ = 0;
};

// Tokens `a` and `b` share from the start.
int64_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b);

}  // namespace bloomery::engine
