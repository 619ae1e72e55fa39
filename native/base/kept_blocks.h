// Memory for large blocks that come and go (session states, their checkpoints): a freed block is
// kept for the next allocation it fits, since the first touch of fresh memory faults each of its
// pages in (a 63 MiB recurrent state took 190 ms that way on a 2-core VM, 22 ms into a block used
// before), and page-locking fresh memory costs more still.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <map>
#include <memory_resource>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

namespace bloomery {

// The keeping: an allocation takes the smallest kept block that holds it, if at most half as large
// again, else a fresh one (fresh(): the derived resource's memory); the kept blocks total at most
// `keep` bytes, the largest going back (release()) first beyond that. Thread-safe. A derived
// resource's destructor calls release_kept() (which first stops replenishing), and every block
// must have been returned by then.
class KeptBlocks : public std::pmr::memory_resource {
 public:
  explicit KeptBlocks(size_t keep) : keep_(keep) {}
  KeptBlocks(const KeptBlocks&) = delete;
  KeptBlocks& operator=(const KeptBlocks&) = delete;

  // The bytes of the blocks kept now.
  size_t kept_bytes();

  // Makes fresh blocks of `bytes` on a thread of its own until `count` kept blocks would serve an
  // allocation of `bytes` (or one more would pass `keep`), and returns at once: the next such
  // allocations then take a kept block instead of making one on their caller's thread (page-locking
  // 63 MiB took 20-40 ms on an H100's host, in the middle of a prompt). A later call replaces an
  // earlier one's wish; a fresh() that fails, or a thread that cannot start, leaves the allocations
  // to make their blocks themselves, as without this.
  void replenish(size_t bytes, size_t count);

 protected:
  // A new block of `bytes` aligned to `alignment`; throws std::bad_alloc. Called from the
  // allocating thread or the replenishing one.
  virtual void* fresh(size_t bytes, size_t alignment) = 0;
  virtual void release(void* block) noexcept = 0;
  void release_kept() noexcept;

 private:
  struct Wish {
    size_t bytes, count;
  };
  void* do_allocate(size_t bytes, size_t alignment) final;
  void do_deallocate(void* block, size_t bytes, size_t alignment) final;
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept final { return this == &other; }
  using Kept = std::multimap<size_t, void*>;  // free blocks by size
  void release_beyond(size_t keep) noexcept;
  // The kept blocks large enough for `bytes` and at most half as large again; of them, those
  // aligned to `alignment` serve an allocation.
  std::pair<Kept::iterator, Kept::iterator> sized_for(size_t bytes);
  static bool aligned(const void* block, size_t alignment);
  size_t serving(size_t bytes, size_t alignment);  // kept blocks that would serve an allocation
  void replenishing();                             // the replenishing thread's loop

  const size_t keep_;
  std::mutex mutex_;
  Kept kept_;
  std::unordered_map<void*, size_t> in_use_;  // each block handed out, by its size (at least what was asked)
  size_t kept_bytes_ = 0;
  std::optional<Wish> wish_;  // what replenish() asked for and the thread has not made yet
  bool stopping_ = false;
  std::condition_variable wake_;
  std::thread replenisher_;
};

// A block of `bytes` aligned to `alignment`, from 2 MiB on aligned to 2 MiB and offered to the
// kernel's transparent huge pages (MADV_HUGEPAGE); free() takes it back. Throws std::bad_alloc.
void* allocate_host_block(size_t bytes, size_t alignment);

// Ordinary host memory kept so. Blocks of 2 MiB and more are aligned to 2 MiB and offered to the
// kernel's transparent huge pages (MADV_HUGEPAGE), so a fresh one faults in one page per 2 MiB
// where the host allows it (its transparent_hugepage setting "madvise" or "always").
class HostBlocks final : public KeptBlocks {
 public:
  explicit HostBlocks(size_t keep) : KeptBlocks(keep) {}
  ~HostBlocks() override { release_kept(); }

 private:
  void* fresh(size_t bytes, size_t alignment) override;
  void release(void* block) noexcept override;
};

}  // namespace bloomery
