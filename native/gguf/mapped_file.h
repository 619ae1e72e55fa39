// A whole file in memory, read-only. By default mapped (MAP_SHARED): model files are read in
// place, so their pages are shared with the page cache and cost no private memory. Without
// mmap (for file systems where mapping is slow or unsafe) the file is read into private memory;
// with mlock its pages are locked in RAM, so the kernel never drops or swaps them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace bloomery::gguf {

struct MapOptions {
  bool mmap = true;
  bool mlock = false;
  // Without mmap: told of the bytes read so far and the file's size as the read goes on.
  std::function<void(uint64_t done, uint64_t total)> on_read;
};

class MappedFile {
 public:
  // Throws FILE_NOT_FOUND when the path does not exist, FILE_READ when it cannot be mapped or
  // read, INSUFFICIENT_MEMORY when private memory or locked pages are refused (naming why).
  explicit MappedFile(const std::string& path, const MapOptions& options = {});
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  void release() noexcept;

  std::string path_;
  const uint8_t* data_ = nullptr;  // null for an empty file (mmap refuses length 0)
  uint64_t size_ = 0;
  bool locked_ = false;
};

}  // namespace bloomery::gguf
