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

// Reads the whole of `fd` into `out` (size bytes), resuming after short reads and signals.
void read_all(int fd, uint8_t* out, uint64_t size, const std::string& path) {
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, out + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, "cannot read", errno);
    if (n == 0) throw Error("FILE_READ", path + ": the file ended while it was read (truncated meanwhile?)");
    done += static_cast<uint64_t>(n);
  }
}

std::string mib(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

MappedFile::MappedFile(const std::string& path, const MapOptions& options) : path_(path) {
  // The C string would end at the NUL and name another file.
  if (path.find('\0') != std::string::npos) throw Error("INVALID_ARGUMENT", "a file path contains a NUL byte");
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer, beyond any signal or exit.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
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
    fd_ = fd;
    mtime_ns_ = int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  } else {
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        throw Error("INSUFFICIENT_MEMORY", path + ": reading it without mmap needs " + mib(size_) +
                                               " of private memory, which the system refused");
      }
      data_ = static_cast<const uint8_t*>(p);
      try {
        read_all(fd, static_cast<uint8_t*>(p), size_, path);
      } catch (...) {
        ::close(fd);
        release();
        throw;
      }
      ::mprotect(p, size_, PROT_READ);
    }
    // The copy holds the file's bytes; the descriptor is no longer needed.
    ::close(fd);
  }
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

void MappedFile::read_at(uint64_t offset, void* out, uint64_t bytes) const {
  const auto shrank = [&] {
    return Error("MODEL_FILE_CHANGED", path_ + ": the file ends before byte " + std::to_string(offset + bytes) +
                                           "; it changed on disk while it was loaded");
  };
  if (offset > size_ || bytes > size_ - offset) throw shrank();
  if (fd_ < 0) {
    std::memcpy(out, data_ + offset, bytes);
    return;
  }
  uint64_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd_, static_cast<uint8_t*>(out) + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path_, "cannot read", errno);
    if (n == 0) throw shrank();
    done += static_cast<uint64_t>(n);
  }
}

void MappedFile::check_unchanged() const {
  if (fd_ < 0) return;
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail(path_, "cannot stat", errno);
  const int64_t mtime_ns = int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  if (uint64_t(st.st_size) != size_ || mtime_ns != mtime_ns_) {
    throw Error("MODEL_FILE_CHANGED", path_ + ": the file changed on disk while it was loaded (" +
                                          std::to_string(size_) + " bytes when loaded, " + std::to_string(st.st_size) +
                                          " now); load the model again (or load with mmap: false)");
  }
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      locked_(std::exchange(other.locked_, false)),
      fd_(std::exchange(other.fd_, -1)),
      mtime_ns_(other.mtime_ns_) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    locked_ = std::exchange(other.locked_, false);
    fd_ = std::exchange(other.fd_, -1);
    mtime_ns_ = other.mtime_ns_;
  }
  return *this;
}

void MappedFile::release() noexcept {
  if (data_ && locked_) ::munlock(data_, size_);
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr;
  size_ = 0;
  locked_ = false;
  fd_ = -1;
}

}  // namespace bloomery::gguf
