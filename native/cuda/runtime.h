// Device memory, streams and graphs behind a plain C++ interface, so the engine (compiled
// by the host compiler) needs no CUDA headers. Every failure throws bloomery::Error with a
// code: INSUFFICIENT_MEMORY for an allocation the card cannot serve, CUDA_ERROR otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <span>
#include <string>

#include "base/kept_blocks.h"

namespace bloomery::cuda {

// Makes `device` current on the calling thread (the addon runs passes on pool threads).
void use_device(int device);

// Whether the driver loads every kernel with its module (CUDA_MODULE_LOADING=EAGER), which
// bloomery asks for when it loads, unless the environment already says otherwise. Hybrid passes
// need it: the GPU waits for the host between layers (HostExperts), and a kernel loaded lazily,
// on its first launch, makes that launch wait for the device, so the pass never ends.
bool modules_load_eagerly();

// With BLOOMERY_PROFILE_FROM_POSITION=N in the environment, starts Nsight Compute's collection
// (ncu --profile-from-start off) before the first pass holding position N or later (`positions`:
// the pass's, read only while the collection waits for one), so that bench/gpu-kernels.mjs
// profiles the passes after a long context and not the context's own. INVALID_ARGUMENT names the
// variable when it is not a whole number.
void profile_from_position(std::span<const int32_t> positions);

// Free and total bytes of the current device.
struct MemoryInfo {
  uint64_t free = 0;
  uint64_t total = 0;
};
MemoryInfo memory_info();

// One allocation of device memory, zeroed when made (counters such as route_decode's ticket and
// the decode attention's barriers start from it), freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // `what` names the allocation in the INSUFFICIENT_MEMORY error.
  DeviceBuffer(size_t bytes, const std::string& what);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory mapped into the device's address space: the host and the GPU's
// kernels read and write it directly (a hybrid pass's handoff), freed on destruction.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(size_t bytes, const std::string& what);
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();

  template <typename T>
  T* host() const {
    return static_cast<T*>(host_);
  }
  template <typename T>
  T* device() const {
    return static_cast<T*>(device_);
  }

 private:
  void* host_ = nullptr;
  void* device_ = nullptr;
};

// Existing host memory (e.g. a read-only file mapping) page-locked for DMA while this lives,
// so copies from it run at the link's speed rather than through a pageable bounce buffer.
class HostRegistration {
 public:
  HostRegistration() = default;
  // Registers the pages covering [data, data + bytes) read-only; `what` names it in errors.
  HostRegistration(const void* data, size_t bytes, const std::string& what);
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;
  ~HostRegistration();

 private:
  void* base_ = nullptr;
};

// Page-locked host memory as a std::pmr::memory_resource, for buffers that copies to and from the
// device fill and drain (the prompt-state cache's states of a model on the GPU): a copy from it
// runs at the link's speed and leaves the host free, where one from pageable memory goes through
// the driver's bounce buffer at a fraction of it with the host waiting. Page-locking fresh memory
// costs more than copying it does, so freed blocks are kept for reuse as KeptBlocks keeps them, at
// most `keep` bytes, and replenish() can make them ahead. A fresh block is ordinary memory on huge
// pages, touched, then registered with the driver for `device`: on an H100's host 145 MB took
// 22-28 ms so against 47-53 ms through cudaHostAlloc, and it goes back without cudaFreeHost's wait
// for the device. Memory the host cannot page-lock, or an alignment past 2 MiB, throws
// std::bad_alloc.
class PinnedPool final : public KeptBlocks {
 public:
  PinnedPool(size_t keep, int device) : KeptBlocks(keep), device_(device) {}
  ~PinnedPool() override { release_kept(); }

 private:
  void* fresh(size_t bytes, size_t alignment) override;
  void release(void* block) noexcept override;

  const int device_;  // the replenishing thread registers memory with this device current
};

// An opaque cudaStream_t.
using StreamHandle = void*;

class Stream {
 public:
  Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();
  StreamHandle handle() const { return stream_; }
  void synchronize() const;
  // True when all queued work is done, false while some runs; throws CUDA_ERROR if it failed.
  bool idle() const;

 private:
  StreamHandle stream_ = nullptr;
};

// A point in a stream's queued work: recorded on one stream, waited for by another without
// the host waiting, queried, or timed against another event.
class Event {
 public:
  // `timed`: elapsed_ms can read it (recording costs a little more).
  explicit Event(bool timed = false);
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();
  void record(StreamHandle stream);
  // `stream`'s later work waits until the work before this event's record is done.
  void wait_in(StreamHandle stream) const;
  // True once the work before the record is done (or nothing was recorded).
  bool done() const;
  // The host waits until the work before the record is done.
  void synchronize() const;
  // Milliseconds from `start` to this event, both timed and done.
  float elapsed_ms(const Event& start) const;

 private:
  void* event_ = nullptr;  // cudaEvent_t
};

void copy_to_device(void* dst, const void* src, size_t bytes, StreamHandle stream);
void copy_to_host(void* dst, const void* src, size_t bytes, StreamHandle stream);
// Either direction, or device to device (unified addressing tells which).
void copy_async(void* dst, const void* src, size_t bytes, StreamHandle stream);
// Sets `bytes` of device memory to zero (a sequence's recurrent states before its first token).
void zero_async(void* dst, size_t bytes, StreamHandle stream);
// Synchronous upload of a large host range (weights at load).
void upload(void* dst, const void* src, size_t bytes);
// Synchronous read of a small device range (counters).
void download(void* dst, const void* src, size_t bytes);

// Throws CUDA_ERROR naming `what` if a launch on the calling thread failed.
void check_launch(const char* what);

// Lets `kernel` (a __global__ function) take `bytes` of dynamic shared memory on the current
// device, beyond the default 48 KiB. Not during a graph capture: call it when the model loads.
void allow_shared_memory(const void* kernel, size_t bytes, const char* what);

// A captured sequence of launches replayed as one graph (a decode step).
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph();

  bool ready() const { return exec_ != nullptr; }
  // Records the launches `queue` makes on `stream` as this graph, replacing what it held: a
  // graph already instantiated is updated in place when only the launches' parameters changed
  // (cudaGraphExecUpdate, cheaper than a new instantiation), else instantiated anew. If
  // `queue` throws, the capture is dropped and the graph left empty (not ready).
  template <typename Queue>
  void capture(StreamHandle stream, Queue&& queue) {
    begin_capture(stream);
    try {
      queue();
    } catch (...) {
      abandon_capture(stream);
      throw;
    }
    end_capture(stream);
  }
  void launch(StreamHandle stream) const;

 private:
  void begin_capture(StreamHandle stream);
  void end_capture(StreamHandle stream);
  void abandon_capture(StreamHandle stream);
  void clear();

  void* exec_ = nullptr;  // cudaGraphExec_t
};

}  // namespace bloomery::cuda
