#include "engine/prompt_cache.h"

#include <algorithm>

namespace bloomery::engine {

int64_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const auto [end_a, end_b] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return end_a - a.begin();
}

PromptCache::Stored PromptCache::store(std::shared_ptr<const SessionState> state) {
  const uint64_t bytes = state->bytes();
  if (bytes > capacity_ || state->tokens.empty()) return Stored::kRefused;
  const std::span<const int32_t> tokens = state->tokens;
  std::lock_guard lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    const std::span<const int32_t> held = (*it)->tokens;
    const int64_t shared = common_prefix(held, tokens);
    const bool same = held.size() == tokens.size() && shared == static_cast<int64_t>(tokens.size());
    if (same || (!whole_states_ && shared == static_cast<int64_t>(tokens.size()))) {
      entries_.splice(entries_.begin(), entries_, it);
      return Stored::kRefreshed;
    }
    if (!whole_states_ && shared == static_cast<int64_t>(held.size())) {
      bytes_ -= (*it)->bytes();
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  while (bytes_ + bytes > capacity_) {
    bytes_ -= entries_.back()->bytes();
    entries_.pop_back();
  }
  entries_.push_front(std::move(state));
  bytes_ += bytes;
  return Stored::kTaken;
}

bool PromptCache::holds(std::span<const int32_t> tokens) {
  std::lock_guard lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (common_prefix((*it)->tokens, tokens) == static_cast<int64_t>(tokens.size())) {
      entries_.splice(entries_.begin(), entries_, it);
      return true;
    }
  }
  return false;
}

PromptCache::Match PromptCache::find(std::span<const int32_t> tokens, int64_t longest) {
  std::lock_guard lock(mutex_);
  auto best = entries_.end();
  int64_t best_length = 0;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const int64_t shared = common_prefix((*it)->tokens, tokens);
    const auto held = static_cast<int64_t>((*it)->tokens.size());
    if (whole_states_ && (shared != held || held > longest)) continue;
    if (shared > best_length) {
      best = it;
      best_length = shared;
    }
  }
  if (best == entries_.end()) return {};
  entries_.splice(entries_.begin(), entries_, best);
  return {*best, best_length};
}

uint64_t PromptCache::bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

size_t PromptCache::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

}  // namespace bloomery::engine
