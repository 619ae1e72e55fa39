#include "cpu/host_info.h"

#include <sched.h>
#include <unistd.h>

#include "base/arch.h"
#if BLOOMERY_X86_SIMD
#include <cpuid.h>
#endif

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

namespace bloomery::cpu {

namespace {

#if BLOOMERY_X86_SIMD
struct CpuidRegs {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
};

CpuidRegs cpuid(unsigned leaf, unsigned subleaf) {
  CpuidRegs r;
  if (!__get_cpuid_count(leaf, subleaf, &r.eax, &r.ebx, &r.ecx, &r.edx)) return {};
  return r;
}

bool bit(unsigned reg, int n) { return (reg >> n) & 1u; }

// The OS must save a register file for its instructions to be usable: XCR0 says which.
uint64_t xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}
#endif

std::string read_file(const char* path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A /proc/meminfo field in bytes (0 when absent).
uint64_t meminfo_bytes(const std::string& meminfo, const std::string& key) {
  auto pos = meminfo.find(key + ":");
  if (pos == std::string::npos) return 0;
  std::istringstream line(meminfo.substr(pos + key.size() + 1));
  uint64_t kib = 0;
  line >> kib;
  return kib * 1024;
}

// The process's cgroup v2 folder, empty when it runs under none.
std::string cgroup_dir() {
  std::string self = read_file("/proc/self/cgroup");
  auto pos = self.find("0::");
  if (pos == std::string::npos) return "";
  std::string rel = self.substr(pos + 3);
  return "/sys/fs/cgroup" + rel.substr(0, rel.find('\n'));
}

// The cgroup v2 memory limit and current use, when the process runs under one.
std::pair<uint64_t, uint64_t> cgroup_memory() {
  const std::string dir = cgroup_dir();
  if (dir.empty()) return {0, 0};
  std::string max = read_file((dir + "/memory.max").c_str());
  if (max.empty() || max.rfind("max", 0) == 0) return {0, 0};
  uint64_t limit = std::stoull(max);
  std::string cur = read_file((dir + "/memory.current").c_str());
  return {limit, cur.empty() ? 0 : std::stoull(cur)};
}

}  // namespace

uint32_t usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  uint32_t cpus =
      sched_getaffinity(0, sizeof set, &set) == 0 ? uint32_t(CPU_COUNT(&set)) : uint32_t(std::max(1L, online));
  const std::string dir = cgroup_dir();
  // cpu.max: "<quota> <period>" in microseconds, or "max <period>" for no quota.
  std::istringstream max(dir.empty() ? "" : read_file((dir + "/cpu.max").c_str()));
  std::string quota;
  uint64_t period = 0;
  if (max >> quota >> period && quota != "max" && period > 0) {
    const uint64_t q = std::stoull(quota);
    cpus = std::min<uint32_t>(cpus, uint32_t(std::max<uint64_t>(1, (q + period - 1) / period)));
  }
  return std::max<uint32_t>(1, cpus);
}

// The x86 features (CpuFeatures names no others: off x86 every field stays false).
CpuFeatures detect_cpu_features() {
  CpuFeatures f;
#if BLOOMERY_X86_SIMD
  const CpuidRegs l1 = cpuid(1, 0);
  const bool osxsave = bit(l1.ecx, 27);
  const uint64_t xcr = osxsave ? xcr0() : 0;
  const bool ymm = (xcr & 0x6) == 0x6;            // SSE and AVX state
  const bool zmm = ymm && (xcr & 0xe0) == 0xe0;   // opmask and ZMM state
  const bool tiles = (xcr & 0x60000) == 0x60000;  // AMX tile config and data

  const CpuidRegs l7 = cpuid(7, 0);
  const CpuidRegs l7s1 = cpuid(7, 1);
  f.avx = ymm && bit(l1.ecx, 28);
  f.fma = ymm && bit(l1.ecx, 12);
  f.f16c = ymm && bit(l1.ecx, 29);
  f.avx2 = ymm && bit(l7.ebx, 5);
  f.avx_vnni = ymm && bit(l7s1.eax, 4);
  f.bmi2 = bit(l7.ebx, 8);
  f.avx512f = zmm && bit(l7.ebx, 16);
  f.avx512bw = zmm && bit(l7.ebx, 30);
  f.avx512vl = zmm && bit(l7.ebx, 31);
  f.avx512vnni = zmm && bit(l7.ecx, 11);
  f.avx512bf16 = zmm && bit(l7s1.eax, 5);
  f.avx512fp16 = zmm && bit(l7.edx, 23);
  f.amx_tile = tiles && bit(l7.edx, 24);
  f.amx_int8 = tiles && bit(l7.edx, 25);
  f.amx_bf16 = tiles && bit(l7.edx, 22);
#endif
  return f;
}

HostInfo detect_host() {
  HostInfo h;
  h.features = detect_cpu_features();

  const std::string cpuinfo = read_file("/proc/cpuinfo");
  std::set<std::pair<std::string, std::string>> cores;  // (physical id, core id)
  std::istringstream lines(cpuinfo);
  std::string line, physical = "0";
  while (std::getline(lines, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && h.cpu_model.empty()) h.cpu_model = value;
    if (key == "physical id") physical = value;
    if (key == "core id") cores.emplace(physical, value);
  }
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  h.logical_cores = online > 0 ? uint32_t(online) : 1;
  h.physical_cores = cores.empty() ? h.logical_cores : uint32_t(cores.size());
  h.physical_cores = std::min(h.physical_cores, h.logical_cores);

  const std::string meminfo = read_file("/proc/meminfo");
  h.total_ram = meminfo_bytes(meminfo, "MemTotal");
  h.available_ram = meminfo_bytes(meminfo, "MemAvailable");
  auto [limit, used] = cgroup_memory();
  if (limit != 0 && limit < h.total_ram) {
    h.total_ram = limit;
    h.available_ram = std::min(h.available_ram, limit > used ? limit - used : 0);
  }
  return h;
}

}  // namespace bloomery::cpu
