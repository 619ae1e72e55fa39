#include <functional>
#include <queue>
#include <random>
#include <vector>

#include "tests/check.h"
#include "tokenizer/merge_queue.h"

using namespace bloomery::tokenizer;

namespace {

using Queue = MergeQueue<uint32_t, std::less<uint32_t>>;

// llama.cpp's order: one heap, lowest rank first, then leftmost.
struct LaterEntry {
  bool operator()(const Queue::Entry& a, const Queue::Entry& b) const {
    return a.priority > b.priority || (a.priority == b.priority && a.left > b.left);
  }
};

}  // namespace

TEST(tokenizer_merge_queue_pops_in_one_heaps_order) {
  // Pushes in text order (as the first pairs come) and out of it (as merges create pairs left
  // of waiting ones), interleaved with pops: every pop matches a single heap's.
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    Queue queue;
    std::priority_queue<Queue::Entry, std::vector<Queue::Entry>, LaterEntry> reference;
    const uint32_t ranks = 1 + rng() % 6;
    int next_left = 0;
    for (int step = 0; step < 300; ++step) {
      if (rng() % 3 != 0) {
        const int left = rng() % 4 == 0 ? int(rng() % 400) : next_left++;
        const Queue::Entry e{uint32_t(rng() % ranks), left, left + 1, uint32_t(rng() % 5)};
        queue.push(e);
        reference.push(e);
      } else {
        Queue::Entry got{};
        const bool popped = queue.pop(got);
        CHECK(popped == !reference.empty());
        if (!popped) continue;
        const Queue::Entry want = reference.top();
        reference.pop();
        if (got.priority != want.priority || got.left != want.left) {
          CHECK(false) << "round " << round << " step " << step << ": popped (" << got.priority << ", " << got.left
                       << "), a heap pops (" << want.priority << ", " << want.left << ")";
          return;
        }
      }
    }
    for (Queue::Entry got{}; queue.pop(got); reference.pop()) {
      if (reference.empty() || got.priority != reference.top().priority || got.left != reference.top().left) {
        CHECK(false) << "round " << round << ": the queue pops (" << got.priority << ", " << got.left
                     << ") where a heap pops otherwise, once both take no more";
        return;
      }
    }
    CHECK(reference.empty()) << "round " << round << ": the queue ran out first";
  }
}
