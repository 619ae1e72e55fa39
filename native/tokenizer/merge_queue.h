// The candidate merges of one word, popped best priority first and leftmost first among equals:
// the order of llama.cpp's single heap, so the merges and the ids are the same.
//
// One heap of every pair was cache-bound on long words: a run of a million spaces is one word,
// and each pop walked twenty levels of a heap of a million entries. Here the entries wait by
// priority, and a priority's entries mostly arrive left to right (the first pairs in text
// order, the pairs a sweep of merges creates in the order it moves), so they queue in a plain
// array read from the front; only an entry left of the array's last one goes to a small heap.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
#include <unordered_map>
#include <vector>

namespace bloomery::tokenizer {

// `Before(a, b)`: priority a merges before priority b (a lower BPE rank, a higher SPM score).
template <typename Priority, typename Before>
class MergeQueue {
 public:
  struct Entry {
    Priority priority;
    int left;      // the left symbol of the pair
    int right;     // the right symbol, when queued
    uint32_t len;  // the bytes the pair spelled when queued: a pair that changed since is stale
  };

  void push(const Entry& e) {
    Bucket& b = buckets_[e.priority];
    if (b.empty()) priorities_.push(e.priority);
    if (b.head == b.sorted.size() || e.left >= b.sorted.back().left) {
      b.sorted.push_back(e);
    } else {
      b.stragglers.push_back(e);
      std::push_heap(b.stragglers.begin(), b.stragglers.end(), RightOf{});
    }
  }

  // The next entry, false when none is left. Entries may be stale: the caller checks them.
  bool pop(Entry& out) {
    if (priorities_.empty()) return false;
    Bucket& b = buckets_[priorities_.top()];
    const bool take_sorted =
        b.head < b.sorted.size() && (b.stragglers.empty() || b.sorted[b.head].left <= b.stragglers.front().left);
    if (take_sorted) {
      out = b.sorted[b.head++];
      if (b.head == b.sorted.size()) {
        b.sorted.clear();
        b.head = 0;
      }
    } else {
      std::pop_heap(b.stragglers.begin(), b.stragglers.end(), RightOf{});
      out = b.stragglers.back();
      b.stragglers.pop_back();
    }
    if (b.empty()) priorities_.pop();
    return true;
  }

 private:
  struct RightOf {
    bool operator()(const Entry& a, const Entry& b) const { return a.left > b.left; }
  };

  struct Bucket {
    std::vector<Entry> sorted;  // by left, read from `head` on
    size_t head = 0;
    std::vector<Entry> stragglers;  // a min-heap by left
    bool empty() const { return head == sorted.size() && stragglers.empty(); }
  };

  // The priorities whose buckets have entries, each once; the best on top.
  struct After {
    bool operator()(const Priority& a, const Priority& b) const { return Before{}(b, a); }
  };
  std::priority_queue<Priority, std::vector<Priority>, After> priorities_;
  std::unordered_map<Priority, Bucket> buckets_;
};

}  // namespace bloomery::tokenizer
