#include <cuda_runtime.h>

#include "cuda/device.h"

namespace bloomery::cuda {

namespace {

std::string version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

}  // namespace

bool compiled_with_cuda() { return true; }

CudaStatus query_cuda() {
  CudaStatus s;
  cudaRuntimeGetVersion(&s.runtime_version);
  // cudart loads libcuda.so at run time; with no driver installed this reports 0.
  if (cudaDriverGetVersion(&s.driver_version) != cudaSuccess || s.driver_version == 0) {
    s.reason = "no NVIDIA driver found (libcuda.so.1 could not be loaded)";
    return s;
  }
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaErrorInsufficientDriver) {
    s.reason = "NVIDIA driver too old: it supports CUDA " + version_text(s.driver_version) +
               ", bloomery was built with CUDA " + version_text(s.runtime_version);
    return s;
  }
  if (err == cudaErrorNoDevice || (err == cudaSuccess && count == 0)) {
    s.reason = "no CUDA device visible (check CUDA_VISIBLE_DEVICES and the driver)";
    return s;
  }
  if (err != cudaSuccess) {
    s.reason = std::string("CUDA unavailable: ") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
    cudaGetLastError();
    return s;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    DeviceInfo d;
    d.index = i;
    d.name = p.name;
    d.compute_major = p.major;
    d.compute_minor = p.minor;
    d.total_memory = p.totalGlobalMem;
    d.multiprocessors = p.multiProcessorCount;
    char bus[32] = {0};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, i) == cudaSuccess) d.pci_bus_id = bus;
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess)
      d.free_memory = free_bytes;
    cudaGetLastError();
    s.devices.push_back(std::move(d));
  }
  s.available = !s.devices.empty();
  if (!s.available) s.reason = "CUDA devices found but none could be queried";
  return s;
}

}  // namespace bloomery::cuda
