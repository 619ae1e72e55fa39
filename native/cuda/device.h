// The CUDA devices this process can use, or why it can use none. Plain C++ interface:
// callers need no CUDA headers, and a CPU-only build answers through cuda_unavailable().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bloomery::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  uint64_t total_memory = 0;  // bytes
  uint64_t free_memory = 0;   // bytes, when queried
  int multiprocessors = 0;
  std::string pci_bus_id;
};

struct CudaStatus {
  bool available = false;
  std::string reason;       // why not, when !available
  int driver_version = 0;   // e.g. 13000 for 13.0; 0 when no driver
  int runtime_version = 0;  // the runtime linked into the addon
  std::vector<DeviceInfo> devices;
};

// Whether the addon was compiled with CUDA at all.
bool compiled_with_cuda();

// Queries the driver and every device (creates a context on each to read free memory).
CudaStatus query_cuda();

}  // namespace bloomery::cuda
