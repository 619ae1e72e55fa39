#include "engine/load_progress.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>

namespace bloomery::engine {

namespace {

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14; older headers lack the name
#endif

bool listed(const std::vector<std::vector<int32_t>>& lists, size_t layer, int32_t expert) {
  return layer < lists.size() && std::find(lists[layer].begin(), lists[layer].end(), expert) != lists[layer].end();
}

// Faults in [data, data + bytes) of a read-only mapping.
void fault_range(const uint8_t* data, uint64_t bytes) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(data) + bytes;
  if (::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_READ) == 0) return;
  // EINVAL: a kernel without MADV_POPULATE_READ reads each page instead. Other errors (an I/O
  // error reading the file) are left to the pass that reads the page, as without this step.
  if (errno != EINVAL) return;
  uint8_t sink = 0;
  for (uintptr_t p = begin; p < end; p += page) sink ^= *reinterpret_cast<const volatile uint8_t*>(p);
  (void)sink;
}

}  // namespace

uint64_t progress_piece(uint64_t total) {
  return std::clamp<uint64_t>(total / 128, uint64_t{1} << 20, uint64_t{64} << 20);
}

std::vector<ByteRange> cpu_read_weights(const model::Model& model, bool on_gpu,
                                        const std::vector<std::vector<int32_t>>& gpu,
                                        const std::vector<std::vector<int32_t>>& disk) {
  std::vector<ByteRange> ranges;
  // Expert stacks split between places: their experts one by one, and not the whole tensor.
  std::set<const uint8_t*> split;
  for (size_t l = 0; l < model.layers.size(); ++l) {
    const model::RoutedExperts& routed = model.layers[l].ffn.routed;
    if (routed.empty()) continue;
    const bool any_disk = l < disk.size() && !disk[l].empty();
    if (!on_gpu && !any_disk) continue;
    for (const cpu::ExpertMatrices* stack : {&routed.gate, &routed.up, &routed.down}) {
      split.insert(stack->first.data);
      const uint64_t bytes = static_cast<uint64_t>(stack->first.rows) * stack->first.row_bytes;
      for (int32_t e = 0; e < stack->count; ++e) {
        const bool on_card = on_gpu && (gpu.empty() || listed(gpu, l, e));
        if (!on_card && !listed(disk, l, e)) ranges.push_back({stack->expert(e).data, bytes});
      }
    }
  }
  if (!on_gpu) {
    for (const gguf::Tensor& t : model.file.tensors()) {
      if (t.bytes > 0 && !split.contains(t.data)) ranges.push_back({t.data, t.bytes});
    }
  }
  return ranges;
}

void fault_in(std::span<const ByteRange> ranges, const LoadProgress& progress) {
  uint64_t total = 0;
  for (const ByteRange& r : ranges) total += r.bytes;
  const uint64_t piece = progress_piece(total);
  uint64_t done = 0, reported = 0;
  if (progress) progress(LoadStep::kMap, 0, total);
  for (const ByteRange& r : ranges) {
    for (uint64_t at = 0; at < r.bytes; at += piece) {
      const uint64_t bytes = std::min(piece, r.bytes - at);
      fault_range(r.data + at, bytes);
      done += bytes;
      if (progress && (done - reported >= piece || done == total)) {
        progress(LoadStep::kMap, done, total);
        reported = done;
      }
    }
  }
  if (progress && reported != total) progress(LoadStep::kMap, total, total);
}

}  // namespace bloomery::engine
