#include "gguf/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "base/error.h"

namespace bloomery::gguf {

namespace {

[[noreturn]] void fail(const std::string& path, const char* what, int err) {
  const std::string message = path + ": " + what + " (" + std::strerror(err) + ")";
  throw Error(err == ENOENT || err == ENOTDIR ? "FILE_NOT_FOUND" : "FILE_READ", message);
}

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(path, "cannot stat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("FILE_READ", path + ": not a regular file");
  }
  size_ = uint64_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      fail(path, "cannot map", err);
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  // The mapping keeps the file's pages; the descriptor is no longer needed.
  ::close(fd);
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::release() noexcept {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace bloomery::gguf
