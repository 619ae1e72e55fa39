// The selection step of libstdc++'s std::partial_sort(first, first + k, last, comp) over the
// positions [0, seen) with comp(a, b) = scores[a] > scores[b] (__heap_select: __make_heap over
// the first k, then __pop_heap for each later position that compares before the heap's top),
// move for move. Which of the positions tied at the k-th largest score it keeps depends on those
// moves, not on position order; llama.cpp's ggml_top_k and the CPU path's lightning indexer
// (cpu/lightning_indexer.cc) choose by std::partial_sort, so a selection that must keep the same
// ties (the GPU's, cuda/lightning_indexer.cu) replays it. Host and device code alike.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define BLOOMERY_HOST_DEVICE __host__ __device__
#else
#define BLOOMERY_HOST_DEVICE
#endif

namespace bloomery {

namespace heap_select_detail {

// __adjust_heap, then __push_heap, over heap[0, len) of positions: `value` into the hole at `hole`.
BLOOMERY_HOST_DEVICE inline void adjust_heap(int32_t* heap, int64_t hole, int64_t len, int32_t value,
                                             const float* scores) {
  const int64_t top = hole;
  int64_t second = hole;
  while (second < (len - 1) / 2) {
    second = 2 * (second + 1);
    if (scores[heap[second]] > scores[heap[second - 1]]) second--;
    heap[hole] = heap[second];
    hole = second;
  }
  if ((len & 1) == 0 && second == (len - 2) / 2) {
    second = 2 * (second + 1);
    heap[hole] = heap[second - 1];
    hole = second - 1;
  }
  int64_t parent = (hole - 1) / 2;
  while (hole > top && scores[heap[parent]] > scores[value]) {
    heap[hole] = heap[parent];
    hole = parent;
    parent = (hole - 1) / 2;
  }
  heap[hole] = value;
}

}  // namespace heap_select_detail

// The k positions of [0, seen) (k <= seen) that std::partial_sort of the positions 0, 1, ... by
// descending score leaves first, into heap[0, k), in heap order (not sorted).
BLOOMERY_HOST_DEVICE inline void partial_sort_selection(const float* scores, int64_t seen, int64_t k, int32_t* heap) {
  using heap_select_detail::adjust_heap;
  for (int64_t i = 0; i < k; ++i) heap[i] = static_cast<int32_t>(i);
  if (k >= 2) {
    for (int64_t parent = (k - 2) / 2;; --parent) {
      adjust_heap(heap, parent, k, heap[parent], scores);
      if (parent == 0) break;
    }
  }
  for (int64_t i = k; i < seen; ++i) {
    if (scores[i] > scores[heap[0]]) adjust_heap(heap, 0, k, static_cast<int32_t>(i), scores);
  }
}

}  // namespace bloomery
