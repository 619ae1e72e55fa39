#include "gguf/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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

// Reads the whole of `fd` into `out` (size bytes), resuming after short reads and signals, in
// pieces of about 1/128 of it (1 to 64 MiB), each told to `on_read`.
void read_all(int fd, uint8_t* out, uint64_t size, const std::string& path,
              const std::function<void(uint64_t, uint64_t)>& on_read) {
  const uint64_t piece = std::clamp<uint64_t>(size / 128, uint64_t{1} << 20, uint64_t{64} << 20);
  uint64_t done = 0;
  if (on_read) on_read(0, size);
  while (done < size) {
    const ssize_t n = ::pread(fd, out + done, std::min(piece, size - done), static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, "cannot read", errno);
    if (n == 0) throw Error("FILE_READ", path + ": the file ended while it was read (truncated meanwhile?)");
    done += static_cast<uint64_t>(n);
    if (on_read) on_read(done, size);
  }
}

std::string mib(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

MappedFile::MappedFile(const std::string& path, const MapOptions& options) : path_(path) {
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
  if (size_ > 0 && options.mmap) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      fail(path, "cannot map", err);
    }
    data_ = static_cast<const uint8_t*>(p);
  } else if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      throw Error("INSUFFICIENT_MEMORY", path + ": reading it without mmap needs " + mib(size_) +
                                             " of private memory, which the system refused");
    }
    data_ = static_cast<const uint8_t*>(p);
    try {
      read_all(fd, static_cast<uint8_t*>(p), size_, path, options.on_read);
    } catch (...) {
      ::close(fd);
      release();
      throw;
    }
    ::mprotect(p, size_, PROT_READ);
  }
  // The mapping (or the copy) keeps the file's bytes; the descriptor is no longer needed.
  ::close(fd);
  if (size_ > 0 && options.mlock) {
    if (::mlock(data_, size_) != 0) {
      const int err = errno;
      release();
      throw Error("INSUFFICIENT_MEMORY", path + ": cannot lock its " + mib(size_) + " in RAM (" + std::strerror(err) +
                                             "); raise the locked-memory limit (ulimit -l) or load without mlock");
    }
    locked_ = true;
  }
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      locked_(std::exchange(other.locked_, false)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    locked_ = std::exchange(other.locked_, false);
  }
  return *this;
}

void MappedFile::release() noexcept {
  if (data_ && locked_) ::munlock(data_, size_);
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
  locked_ = false;
}

}  // namespace bloomery::gguf
