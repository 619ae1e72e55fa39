#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <new>
#include <string_view>
#include <utility>

#include "base/error.h"
#include "cuda/runtime.h"

namespace bloomery::cuda {

namespace {

void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();
  if (err == cudaErrorMemoryAllocation) {
    throw Error("INSUFFICIENT_MEMORY", std::string(what) + ": the GPU is out of memory");
  }
  throw Error("CUDA_ERROR", std::string(what) + ": " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

cudaStream_t raw(StreamHandle s) { return static_cast<cudaStream_t>(s); }

constexpr const char* kModuleLoading = "CUDA_MODULE_LOADING";
constexpr const char* kProfileFromPosition = "BLOOMERY_PROFILE_FROM_POSITION";

// At library load, before anything initializes the driver (which reads the variable once).
[[maybe_unused]] const bool kEagerLoadingAsked = setenv(kModuleLoading, "EAGER", 0) == 0;

}  // namespace

void use_device(int device) { check(cudaSetDevice(device), "cudaSetDevice"); }

bool modules_load_eagerly() {
  const char* mode = std::getenv(kModuleLoading);
  return mode != nullptr && std::string_view(mode) == "EAGER";
}

void allow_shared_memory(const void* kernel, size_t bytes, const char* what) {
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), what);
}

void profile_from_position(std::span<const int32_t> positions) {
  static const int64_t from = [] {
    const char* text = std::getenv(kProfileFromPosition);
    if (text == nullptr) return int64_t{-1};
    char* end = nullptr;
    const long long value = std::strtoll(text, &end, 10);
    if (end == text || *end != '\0' || value < 0) {
      throw Error("INVALID_ARGUMENT", std::string(kProfileFromPosition) + " must be a position, not \"" + text + "\"");
    }
    return static_cast<int64_t>(value);
  }();
  static std::atomic<bool> started{false};
  if (from < 0 || started.load() ||
      std::none_of(positions.begin(), positions.end(), [](int32_t position) { return position >= from; }) ||
      started.exchange(true)) {
    return;
  }
  check(cudaProfilerStart(), "cudaProfilerStart");
}

MemoryInfo memory_info() {
  size_t free_bytes = 0, total_bytes = 0;
  check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  return {free_bytes, total_bytes};
}

DeviceBuffer::DeviceBuffer(size_t bytes, const std::string& what) : bytes_(bytes) {
  const cudaError_t err = cudaMalloc(&data_, bytes == 0 ? 1 : bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    data_ = nullptr;
    throw Error("INSUFFICIENT_MEMORY", what + ": " + std::to_string(bytes) + " bytes do not fit the GPU's free memory");
  }
  check(err, "cudaMalloc");
  // Zeroed, and done before the constructor returns: the kernels that use it run on non-blocking
  // streams, which do not wait for the default stream's memset (as upload).
  check(cudaMemset(data_, 0, bytes == 0 ? 1 : bytes), "cudaMemset");
  check(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize (zeroing)");
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);
}

PinnedBuffer::PinnedBuffer(size_t bytes, const std::string& what) {
  const cudaError_t err = cudaHostAlloc(&host_, bytes == 0 ? 1 : bytes, cudaHostAllocMapped);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    host_ = nullptr;
    throw Error("INSUFFICIENT_MEMORY", what + ": " + std::to_string(bytes) + " bytes of pinned host memory");
  }
  check(err, "cudaHostAlloc");
  const cudaError_t mapped = cudaHostGetDevicePointer(&device_, host_, 0);
  if (mapped != cudaSuccess) {
    cudaFreeHost(host_);
    host_ = nullptr;
    check(mapped, "cudaHostGetDevicePointer");
  }
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : host_(std::exchange(other.host_, nullptr)), device_(std::exchange(other.device_, nullptr)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (host_) cudaFreeHost(host_);
    host_ = std::exchange(other.host_, nullptr);
    device_ = std::exchange(other.device_, nullptr);
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() {
  if (host_) cudaFreeHost(host_);
}

HostRegistration::HostRegistration(const void* data, size_t bytes, const std::string& what) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = reinterpret_cast<uintptr_t>(data) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes + page - 1) / page * page;
  void* base = reinterpret_cast<void*>(first);
  const cudaError_t err = cudaHostRegister(base, end - first, cudaHostRegisterReadOnly);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw Error("INSUFFICIENT_MEMORY",
                what + ": " + std::to_string(end - first) + " bytes of host memory could not be page-locked");
  }
  check(err, ("cudaHostRegister (" + what + ")").c_str());
  base_ = base;
}

HostRegistration::~HostRegistration() {
  if (base_) cudaHostUnregister(base_);
}

void* PinnedPool::fresh(size_t bytes, size_t alignment) {
  if (alignment > (size_t{2} << 20)) throw std::bad_alloc();
  constexpr size_t kPage = 4096;  // registrations take whole pages
  const size_t pages = (bytes + kPage - 1) / kPage * kPage;
  void* block = allocate_host_block(pages, std::max(alignment, kPage));
  // Touched here, a fault per huge page where the host gives them, so the registration only pins
  // what is there.
  std::memset(block, 0, pages);
  int current = 0;
  const bool read = cudaGetDevice(&current) == cudaSuccess;
  const bool registered = read && cudaSetDevice(device_) == cudaSuccess &&
                          cudaHostRegister(block, pages, cudaHostRegisterPortable) == cudaSuccess;
  if (!registered) cudaGetLastError();
  if (read) cudaSetDevice(current);  // the calling thread's device as it was
  if (!registered) {
    std::free(block);
    throw std::bad_alloc();
  }
  return block;
}

void PinnedPool::release(void* block) noexcept {
  cudaHostUnregister(block);
  std::free(block);
}

Stream::Stream() {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  stream_ = s;
}

Stream::~Stream() {
  if (stream_) cudaStreamDestroy(raw(stream_));
}

void Stream::synchronize() const { check(cudaStreamSynchronize(raw(stream_)), "cudaStreamSynchronize"); }

bool Stream::idle() const {
  const cudaError_t err = cudaStreamQuery(raw(stream_));
  if (err == cudaErrorNotReady) return false;
  check(err, "cudaStreamQuery");
  return true;
}

Event::Event(bool timed) {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, timed ? cudaEventDefault : cudaEventDisableTiming), "cudaEventCreate");
  event_ = e;
}

Event::~Event() {
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

void Event::record(StreamHandle stream) {
  check(cudaEventRecord(static_cast<cudaEvent_t>(event_), raw(stream)), "cudaEventRecord");
}

void Event::wait_in(StreamHandle stream) const {
  check(cudaStreamWaitEvent(raw(stream), static_cast<cudaEvent_t>(event_), 0), "cudaStreamWaitEvent");
}

bool Event::done() const {
  const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event_));
  if (err == cudaErrorNotReady) return false;
  check(err, "cudaEventQuery");
  return true;
}

void Event::synchronize() const {
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)), "cudaEventSynchronize");
}

float Event::elapsed_ms(const Event& start) const {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.event_), static_cast<cudaEvent_t>(event_)),
        "cudaEventElapsedTime");
  return ms;
}

void copy_to_device(void* dst, const void* src, size_t bytes, StreamHandle stream) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, raw(stream)), "cudaMemcpyAsync (to device)");
}

void copy_to_host(void* dst, const void* src, size_t bytes, StreamHandle stream) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, raw(stream)), "cudaMemcpyAsync (to host)");
}

void copy_async(void* dst, const void* src, size_t bytes, StreamHandle stream) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, raw(stream)), "cudaMemcpyAsync");
}

void zero_async(void* dst, size_t bytes, StreamHandle stream) {
  check(cudaMemsetAsync(dst, 0, bytes, raw(stream)), "cudaMemsetAsync");
}

void upload(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (weights)");
  // From pageable memory cudaMemcpy may return once the bytes are staged, before their DMA ends;
  // the kernels that read them run on non-blocking streams, which do not wait for the default
  // stream's copy. (A test's uploads were read half-copied now and then on the H200.)
  check(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize (upload)");
}

void download(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (to host)");
}

void check_launch(const char* what) { check(cudaGetLastError(), what); }

Graph::~Graph() { clear(); }

void Graph::clear() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  exec_ = nullptr;
}

void Graph::begin_capture(StreamHandle stream) {
  // Thread-local: passes run on whichever pool thread the addon picks.
  check(cudaStreamBeginCapture(raw(stream), cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
}

void Graph::end_capture(StreamHandle stream) {
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(raw(stream), &graph);
  if (ended != cudaSuccess) clear();
  check(ended, "cudaStreamEndCapture");
  if (exec_) {
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(static_cast<cudaGraphExec_t>(exec_), graph, &info) == cudaSuccess) {
      cudaGraphDestroy(graph);
      return;
    }
    // Another shape of graph: not an error, but the runtime remembers it as the last one.
    cudaGetLastError();
    clear();
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  check(err, "cudaGraphInstantiate");
  exec_ = exec;
}

void Graph::abandon_capture(StreamHandle stream) {
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(raw(stream), &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
  cudaGetLastError();
  clear();
}

void Graph::launch(StreamHandle stream) const {
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), raw(stream)), "cudaGraphLaunch");
}

}  // namespace bloomery::cuda
