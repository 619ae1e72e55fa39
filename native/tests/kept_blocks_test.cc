// HostBlocks (base/kept_blocks.h): a freed block serves the next allocation it fits (at most half
// as large again), the kept blocks stay under their cap (the largest going first), large blocks
// are aligned to 2 MiB, a pmr vector's storage comes back for the next one, and replenish() makes
// blocks ahead on a thread of its own, within the cap.
#include "base/kept_blocks.h"

#include <chrono>
#include <cstdint>
#include <memory_resource>
#include <thread>
#include <vector>

#include "tests/check.h"

using bloomery::HostBlocks;

namespace {
constexpr size_t kMiB = size_t{1} << 20;
}

TEST(kept_blocks_serve_the_next_allocation_they_fit) {
  HostBlocks blocks(64 * kMiB);
  void* a = blocks.allocate(10 * kMiB);
  blocks.deallocate(a, 10 * kMiB);
  CHECK(blocks.kept_bytes() == 10 * kMiB) << blocks.kept_bytes();
  void* same = blocks.allocate(9 * kMiB);
  CHECK(same == a && blocks.kept_bytes() == 0) << "a freed block of 10 MiB serves 9 MiB";
  blocks.deallocate(same, 9 * kMiB);
  // 10 MiB is more than half as large again as 6 MiB: a fresh block, the kept one stays.
  void* small = blocks.allocate(6 * kMiB);
  CHECK(small != a && blocks.kept_bytes() == 10 * kMiB) << blocks.kept_bytes();
  void* again = blocks.allocate(10 * kMiB);
  CHECK(again == a);
  void* larger = blocks.allocate(11 * kMiB);
  CHECK(larger != a) << "a kept block never serves more than it holds";
  for (auto [block, bytes] : {std::pair{small, 6 * kMiB}, {again, 10 * kMiB}, {larger, 11 * kMiB}}) {
    blocks.deallocate(block, bytes);
  }
}

TEST(kept_blocks_stay_under_their_cap_the_largest_going_first) {
  HostBlocks blocks(12 * kMiB);
  void* big = blocks.allocate(8 * kMiB);
  void* mid = blocks.allocate(4 * kMiB);
  void* last = blocks.allocate(4 * kMiB);
  blocks.deallocate(big, 8 * kMiB);
  blocks.deallocate(mid, 4 * kMiB);
  CHECK(blocks.kept_bytes() == 12 * kMiB) << blocks.kept_bytes();
  blocks.deallocate(last, 4 * kMiB);  // 16 MiB kept: the 8 MiB block goes back
  CHECK(blocks.kept_bytes() == 8 * kMiB) << blocks.kept_bytes();
  void* a = blocks.allocate(4 * kMiB);
  void* b = blocks.allocate(4 * kMiB);
  CHECK((a == mid || a == last) && (b == mid || b == last) && a != b);
  CHECK(blocks.kept_bytes() == 0) << blocks.kept_bytes();
  blocks.deallocate(a, 4 * kMiB);
  blocks.deallocate(b, 4 * kMiB);
}

TEST(kept_blocks_align_large_blocks_to_huge_pages) {
  HostBlocks blocks(0);
  void* large = blocks.allocate(3 * kMiB);
  CHECK(reinterpret_cast<uintptr_t>(large) % (2 * kMiB) == 0) << large;
  void* small = blocks.allocate(100, 64);
  CHECK(reinterpret_cast<uintptr_t>(small) % 64 == 0) << small;
  blocks.deallocate(large, 3 * kMiB);
  blocks.deallocate(small, 100, 64);
}

TEST(kept_blocks_give_a_pmr_vector_its_predecessor_s_storage) {
  HostBlocks blocks(256 * kMiB);
  const float* first = nullptr;
  {
    std::pmr::vector<float> state(&blocks);
    state.resize(16 * kMiB / sizeof(float));
    first = state.data();
  }
  CHECK(blocks.kept_bytes() == 16 * kMiB) << blocks.kept_bytes();
  std::pmr::vector<float> next(&blocks);
  next.resize(16 * kMiB / sizeof(float), 1.0f);
  CHECK(next.data() == first && blocks.kept_bytes() == 0)
      << "a checkpoint's recurrent states reuse the last one's pages";
  CHECK(next.back() == 1.0f);
}

namespace {
// Waits up to 10 s for the replenishing thread to keep `bytes`; the bytes kept then.
size_t kept_within(HostBlocks& blocks, size_t bytes) {
  for (int i = 0; i < 1000 && blocks.kept_bytes() < bytes; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return blocks.kept_bytes();
}
}  // namespace

TEST(kept_blocks_replenish_ahead_within_their_cap) {
  HostBlocks blocks(64 * kMiB);
  blocks.replenish(10 * kMiB, 2);
  CHECK(kept_within(blocks, 20 * kMiB) == 20 * kMiB) << blocks.kept_bytes();
  // Allocations of that size take the blocks made ahead.
  void* a = blocks.allocate(10 * kMiB);
  void* b = blocks.allocate(9 * kMiB);
  CHECK(blocks.kept_bytes() == 0) << blocks.kept_bytes();
  // A wish the kept blocks already meet makes none: a and b back, two of 10 MiB kept.
  blocks.deallocate(a, 10 * kMiB);
  blocks.deallocate(b, 9 * kMiB);
  blocks.replenish(10 * kMiB, 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(blocks.kept_bytes() == 20 * kMiB) << blocks.kept_bytes();
  // One more block of 40 MiB fits the cap of 64 beside the 20 kept; a second would pass it.
  blocks.replenish(40 * kMiB, 2);
  CHECK(kept_within(blocks, 60 * kMiB) == 60 * kMiB) << blocks.kept_bytes();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(blocks.kept_bytes() == 60 * kMiB) << blocks.kept_bytes();
  // The destructor stops a thread that is still making blocks (a wish of many small ones).
  blocks.replenish(kMiB / 2, 40);
}
