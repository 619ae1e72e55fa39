#include "base/kept_blocks.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <new>
#include <system_error>

namespace bloomery {

namespace {
// Kept blocks are handed out with at least this alignment (what replenish()'s blocks have).
constexpr size_t kKeptAlignment = alignof(std::max_align_t);
}  // namespace

std::pair<KeptBlocks::Kept::iterator, KeptBlocks::Kept::iterator> KeptBlocks::sized_for(size_t bytes) {
  return {kept_.lower_bound(bytes), kept_.upper_bound(bytes + bytes / 2)};
}

bool KeptBlocks::aligned(const void* block, size_t alignment) {
  return reinterpret_cast<uintptr_t>(block) % alignment == 0;
}

void* KeptBlocks::do_allocate(size_t bytes, size_t alignment) {
  bytes = std::max<size_t>(bytes, 1);
  {
    const std::lock_guard lock(mutex_);
    for (auto [fit, end] = sized_for(bytes); fit != end; ++fit) {
      if (!aligned(fit->second, alignment)) continue;
      const auto [size, block] = *fit;
      kept_.erase(fit);
      kept_bytes_ -= size;
      in_use_.emplace(block, size);
      return block;
    }
  }
  void* block = fresh(bytes, alignment);
  const std::lock_guard lock(mutex_);
  in_use_.emplace(block, bytes);
  return block;
}

void KeptBlocks::do_deallocate(void* block, size_t, size_t) {
  const std::lock_guard lock(mutex_);
  const auto held = in_use_.find(block);
  const size_t size = held->second;
  in_use_.erase(held);
  kept_.emplace(size, block);
  kept_bytes_ += size;
  release_beyond(keep_);
}

size_t KeptBlocks::kept_bytes() {
  const std::lock_guard lock(mutex_);
  return kept_bytes_;
}

void KeptBlocks::release_beyond(size_t keep) noexcept {
  while (kept_bytes_ > keep) {
    const auto largest = std::prev(kept_.end());
    kept_bytes_ -= largest->first;
    release(largest->second);
    kept_.erase(largest);
  }
}

size_t KeptBlocks::serving(size_t bytes, size_t alignment) {
  const auto [first, end] = sized_for(bytes);
  return static_cast<size_t>(
      std::count_if(first, end, [alignment](const auto& kept) { return aligned(kept.second, alignment); }));
}

void KeptBlocks::replenish(size_t bytes, size_t count) {
  bytes = std::max<size_t>(bytes, 1);
  std::lock_guard lock(mutex_);
  if (stopping_) return;
  wish_ = Wish{bytes, count};
  if (!replenisher_.joinable()) {
    try {
      replenisher_ = std::thread([this] { replenishing(); });
    } catch (const std::system_error&) {
      wish_.reset();  // no thread: allocations make their own blocks
      return;
    }
  }
  wake_.notify_one();
}

void KeptBlocks::replenishing() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || wish_; });
    if (stopping_) return;
    const Wish wish = *wish_;
    if (serving(wish.bytes, kKeptAlignment) >= wish.count || kept_bytes_ + wish.bytes > keep_) {
      wish_.reset();
      continue;
    }
    lock.unlock();
    void* block = nullptr;
    try {
      block = fresh(wish.bytes, kKeptAlignment);
    } catch (const std::bad_alloc&) {
    }
    lock.lock();
    if (!block) {
      wish_.reset();
      continue;
    }
    kept_.emplace(wish.bytes, block);
    kept_bytes_ += wish.bytes;
    release_beyond(keep_);
  }
}

void KeptBlocks::release_kept() noexcept {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (replenisher_.joinable()) replenisher_.join();
  const std::lock_guard lock(mutex_);
  release_beyond(0);
}

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}

void* allocate_host_block(size_t bytes, size_t alignment) {
  const bool huge = bytes >= kHugePage;
  const size_t align = std::max(alignment, huge ? kHugePage : alignof(std::max_align_t));
  // aligned_alloc takes a size that is a multiple of the alignment.
  void* block = std::aligned_alloc(align, (bytes + align - 1) / align * align);
  if (!block) throw std::bad_alloc();
  if (huge)
    madvise(block, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);  // advice only: its failure leaves small pages
  return block;
}

void* HostBlocks::fresh(size_t bytes, size_t alignment) { return allocate_host_block(bytes, alignment); }

void HostBlocks::release(void* block) noexcept { std::free(block); }

}  // namespace bloomery
