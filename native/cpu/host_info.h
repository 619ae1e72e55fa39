// What the host offers the CPU backend: instruction-set features (as the OS enables
// them), cores, and memory (the smaller of the machine's and the cgroup's limits).
#pragma once

#include <cstdint>
#include <string>

namespace bloomery::cpu {

struct CpuFeatures {
  bool avx = false;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx_vnni = false;
  bool bmi2 = false;  // pdep, which the AVX-512 tier's i-quant dots use
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool avx512fp16 = false;
  bool amx_tile = false;
  bool amx_int8 = false;
  bool amx_bf16 = false;
};

struct HostInfo {
  std::string cpu_model;
  CpuFeatures features;
  uint32_t logical_cores = 0;
  uint32_t physical_cores = 0;
  uint64_t total_ram = 0;      // bytes: MemTotal, or the cgroup limit when lower
  uint64_t available_ram = 0;  // bytes: MemAvailable, or what the cgroup limit leaves
};

CpuFeatures detect_cpu_features();
HostInfo detect_host();
// The CPUs this process may run on: its affinity mask, capped by its cgroup's CPU quota (cpu.max,
// rounded up), at least one.
uint32_t usable_cpus();

}  // namespace bloomery::cpu
