// A whole file in memory, read-only. By default mapped (MAP_SHARED): model files are read in
// place, so their pages are shared with the page cache and cost no private memory. Without
// mmap (for file systems where mapping is slow or unsafe) the file is read into private memory;
// with mlock its pages are locked in RAM, so the kernel never drops or swaps them.
//
// A mapped file that another process truncates raises SIGBUS on the next read of a page past
// its new end, which no C++ code can turn into an error. check_unchanged() lets the engine
// refuse before each pass instead; a truncation during a pass remains fatal (read the file
// into private memory, mmap = false, where the file may change while loaded).
#pragma once

#include <cstdint>
#include <string>

namespace bloomery::gguf {

struct MapOptions {
  bool mmap = true;
  bool mlock = false;
};

class MappedFile {
 public:
  // Throws INVALID_ARGUMENT for a path with a NUL byte, FILE_NOT_FOUND when the path does not
  // exist, FILE_READ when it is not a regular file (a FIFO is refused without waiting for a
  // writer) or cannot be mapped or read, INSUFFICIENT_MEMORY when private memory or locked pages
  // are refused (naming why).
  explicit MappedFile(const std::string& path, const MapOptions& options = {});
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

  // Copies `bytes` at `offset` into `out`: from the descriptor (pread) when mapped, so a read of
  // a cold file brings in only the pages read, not a fault's read-around window.
  // MODEL_FILE_CHANGED when the file ends before them (it shrank since it was mapped).
  void read_at(uint64_t offset, void* out, uint64_t bytes) const;

  // MODEL_FILE_CHANGED when a mapped file's size or modification time is no longer what it was
  // when it was mapped (a copy read into private memory cannot change).
  void check_unchanged() const;

 private:
  void release() noexcept;

  std::string path_;
  const uint8_t* data_ = nullptr;  // null for an empty file (mmap refuses length 0)
  uint64_t size_ = 0;
  bool locked_ = false;
  int fd_ = -1;  // kept open while mapped, for check_unchanged
  int64_t mtime_ns_ = 0;
};

}  // namespace bloomery::gguf
