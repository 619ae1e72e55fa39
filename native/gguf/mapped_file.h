// A whole file mapped read-only (MAP_SHARED): model files are read in place, so their
// pages are shared with the page cache and cost no private memory.
#pragma once

#include <cstdint>
#include <string>

namespace bloomery::gguf {

class MappedFile {
 public:
  // Throws FILE_NOT_FOUND when the path does not exist, FILE_READ when it cannot be mapped.
  explicit MappedFile(const std::string& path);
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
};

}  // namespace bloomery::gguf
