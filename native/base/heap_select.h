// The selection step of libstdc++'s std::partial_sort(first, first + k, last, comp) over the
// positions [0, seen) with comp(a, b) = scores[a] > scores[b] (__heap_select: __make_heap over
// the first k, then __pop_heap for each later position that compares before the heap's top), to
// the same choice. Which of the positions tied at the k-th largest score it keeps depends on those
// moves, not on position order; llama.cpp's ggml_top_k and the CPU path's lightning indexer
// (cpu/lightning_indexer.cc) choose by std::partial_sort, so a selection that must keep the same
// ties (the GPU's, cuda/lightning_indexer.cu) follows it. Its steps are host and device code alike;
// partial_sort_selection, the whole choice on one thread, is the host's (the tests').
//
// The heap keeps its lowest score at the top. Once that score is the k-th largest, t (it never
// falls, and it ends there), only a later position scoring above t enters, and it never rises into
// a slot holding t: the slots holding t (the tied region) form a subtree at the top whose moves do
// not depend on the scores above t. Each entry takes the top's position out and moves up the tied
// positions along the path __adjust_heap's hole takes: into a child holding t, the right one where
// both do. So the tied positions leave in the preorder of the region that visits a slot, then its
// right subtree, then its left one, and the first E of them leave, E the count of later positions
// scoring above t: no entry has to be replayed. Only the entries before the top reaches t are.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#ifdef __CUDACC__
#define BLOOMERY_HOST_DEVICE __host__ __device__
#else
#define BLOOMERY_HOST_DEVICE
#endif

namespace bloomery {

// The heap: positions, and beside each its score (kept with it, so that a comparison reads one
// array, not the scores through the positions: the GPU holds both in shared memory).
struct PositionHeap {
  int32_t* positions;
  float* scores;
  int64_t k;
};

// __adjust_heap (a hole moved down the path of lesser children, the right one where they tie,
// to the bottom; then __push_heap of the entry back up past the scores above it) leaves the heap
// as this sift from the top does: at each level the lesser child (the right one on a tie) moves
// up while its score is at most the entry's. A level reads and writes only the hole and its
// children, so entries can follow one another down two levels apart (the GPU's pipeline).
// sift_level takes one level: the next hole, or -1 where the entry belongs at `hole`.
BLOOMERY_HOST_DEVICE inline int64_t sift_level(const PositionHeap& h, int64_t hole, float score) {
  const int64_t left = 2 * hole + 1, right = left + 1;
  if (left >= h.k) return -1;
  const int64_t child = right < h.k && !(h.scores[right] > h.scores[left]) ? right : left;
  if (h.scores[child] > score) return -1;
  h.positions[hole] = h.positions[child];
  h.scores[hole] = h.scores[child];
  return child;
}

// The whole sift of (position, score) into the hole at `hole`.
BLOOMERY_HOST_DEVICE inline void sift_down(const PositionHeap& h, int64_t hole, int32_t position, float score) {
  for (int64_t next = sift_level(h, hole, score); next >= 0; next = sift_level(h, hole, score)) hole = next;
  h.positions[hole] = position;
  h.scores[hole] = score;
}

// __make_heap's sift of `parent` (its entry into its subtree), which changes that subtree alone:
// __make_heap sifts the parents from the last to the root, so the parents of one level may be
// sifted in any order, or at once, once the levels below them are done.
BLOOMERY_HOST_DEVICE inline void sift_parent(const PositionHeap& h, int64_t parent) {
  sift_down(h, parent, h.positions[parent], h.scores[parent]);
}

// The slots of level `level` (the root's is 0) of a heap of k: [heap_level_first, heap_slot_last].
BLOOMERY_HOST_DEVICE inline int64_t heap_level_first(int level) { return (int64_t{1} << level) - 1; }
BLOOMERY_HOST_DEVICE inline int64_t heap_slot_last(int level, int64_t k) {
  const int64_t end = (int64_t{2} << level) - 2;
  return end < k - 1 ? end : k - 1;
}
// The parents of that level: [heap_level_first, heap_level_last], empty where last < first. The
// parents are the slots up to the last one's parent, (k - 2) / 2.
BLOOMERY_HOST_DEVICE inline int64_t heap_level_last(int level, int64_t k) {
  return heap_slot_last(level, (k - 2) / 2 + 1);
}
// The deepest level holding a slot.
BLOOMERY_HOST_DEVICE inline int heap_slot_levels(int64_t k) {
  int levels = 0;
  while (heap_level_first(levels + 1) < k) ++levels;
  return levels;
}
// The deepest level holding a parent, the one above the deepest slot's (-1 for k = 1).
BLOOMERY_HOST_DEVICE inline int heap_parent_levels(int64_t k) { return heap_slot_levels(k) - 1; }

// __heap_select's step for a later position: where it compares before the heap's top (a higher
// score than the lowest kept), it takes the top's place.
BLOOMERY_HOST_DEVICE inline void offer_position(const PositionHeap& h, int32_t position, float score) {
  if (score > h.scores[0]) sift_down(h, 0, position, score);
}

// The tied region's count of slots in a slot's subtree, from whether the slot holds t and its
// children's counts (0 for a child past the heap's end): counted from the deepest level up.
BLOOMERY_HOST_DEVICE inline int32_t tied_subtree_count(bool tied, int32_t left_count, int32_t right_count) {
  return tied ? 1 + left_count + right_count : 0;
}

// The preorder ranks (slot, right subtree, left subtree) of a tied slot's children from its own
// rank and the children's counts; -1 for a child outside the region. Ranked from the top down.
struct ChildRanks {
  int32_t left, right;
};
BLOOMERY_HOST_DEVICE inline ChildRanks tied_child_ranks(int32_t rank, int32_t left_count, int32_t right_count) {
  return {left_count > 0 ? rank + 1 + right_count : -1, right_count > 0 ? rank + 1 : -1};
}

// Where the top first holds t, found without the heap: the first later position not offered. Until
// then the top scores under t, so each later position scoring at or above t enters and takes out a
// position scoring under t, while one scoring under t can only replace another: the top holds t
// right after the later position that brings the count under t (the first k's, `below`) to 0, and
// no tied position has left the heap by then. So where no position from there on scores above t,
// the choice is every position before it scoring at or above t, which is every position above t
// and the first ties in position order (as where the ties fit): no heap needs building.
inline int64_t tie_reaches_top(const float* scores, int64_t seen, int64_t k, float tie) {
  int64_t below = 0;
  for (int64_t i = 0; i < k; ++i) below += scores[i] < tie;
  int64_t next = k;
  for (; below > 0 && next < seen; ++next) below -= scores[next] >= tie;
  return next;
}

// t, the k-th largest of the scores of [0, seen).
inline float kth_largest_score(const float* scores, int64_t seen, int64_t k) {
  std::vector<float> sorted(scores, scores + seen);
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
  return sorted[static_cast<size_t>(k - 1)];
}

// The k positions of [0, seen) (k < seen) that std::partial_sort of the positions 0, 1, ... by
// descending score leaves first, unordered. The parents are sifted level by level, each level's in
// increasing order (the GPU sifts them at once; the result is __make_heap's, which takes them in
// decreasing order); the later positions are offered until the top holds t, and the rest of the
// choice is the tied region's preorder (above); or, where no later position enters once the top
// holds t, no heap at all (tie_reaches_top).
inline std::vector<int32_t> partial_sort_selection(const float* scores, int64_t seen, int64_t k) {
  const float tie = kth_largest_score(scores, seen, k);
  const int64_t reached = tie_reaches_top(scores, seen, k, tie);
  int32_t entries = 0;  // the later positions above t from there: each takes out a tied one
  for (int64_t i = reached; i < seen; ++i) entries += scores[i] > tie;
  std::vector<int32_t> chosen;
  if (entries == 0) {
    for (int64_t i = 0; i < reached; ++i) {
      if (scores[i] >= tie) chosen.push_back(static_cast<int32_t>(i));
    }
    return chosen;
  }
  std::vector<int32_t> positions(static_cast<size_t>(k));
  std::vector<float> kept(static_cast<size_t>(k));
  const PositionHeap h{positions.data(), kept.data(), k};
  for (int64_t i = 0; i < k; ++i) {
    positions[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    kept[static_cast<size_t>(i)] = scores[i];
  }
  for (int level = heap_parent_levels(k); level >= 0; --level) {
    for (int64_t parent = heap_level_first(level); parent <= heap_level_last(level, k); ++parent)
      sift_parent(h, parent);
  }
  for (int64_t next = k; next < reached; ++next) offer_position(h, static_cast<int32_t>(next), scores[next]);
  std::vector<int32_t> count(static_cast<size_t>(k)), rank(static_cast<size_t>(k), -1);
  const auto count_of = [&](int64_t slot) { return slot < k ? count[static_cast<size_t>(slot)] : 0; };
  for (int level = heap_slot_levels(k); level >= 0; --level) {
    for (int64_t s = heap_level_first(level); s <= heap_slot_last(level, k); ++s)
      count[static_cast<size_t>(s)] =
          tied_subtree_count(kept[static_cast<size_t>(s)] == tie, count_of(2 * s + 1), count_of(2 * s + 2));
  }
  rank[0] = 0;
  for (int64_t s = 0; 2 * s + 1 < k; ++s) {
    if (rank[static_cast<size_t>(s)] < 0) continue;
    const ChildRanks r = tied_child_ranks(rank[static_cast<size_t>(s)], count_of(2 * s + 1), count_of(2 * s + 2));
    rank[static_cast<size_t>(2 * s + 1)] = r.left;
    if (2 * s + 2 < k) rank[static_cast<size_t>(2 * s + 2)] = r.right;
  }
  for (int64_t i = 0; i < seen; ++i) {
    if (scores[i] > tie) chosen.push_back(static_cast<int32_t>(i));
  }
  for (int64_t s = 0; s < k; ++s) {
    if (rank[static_cast<size_t>(s)] >= entries) chosen.push_back(positions[static_cast<size_t>(s)]);
  }
  return chosen;
}

}  // namespace bloomery
