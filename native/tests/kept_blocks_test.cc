// HostBlocks (base/kept_blocks.h): a freed block serves the next allocation it fits (at most half
// as large again), the kept blocks stay under their cap (the largest going first), large blocks
// are aligned to 2 MiB, and a pmr vector's storage comes back for the next one.
#include "base/kept_blocks.h"

#include <cstdint>
#include <memory_resource>
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
