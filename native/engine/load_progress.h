// What loading a model reports as it moves the weights, and the step that reads mapped weights
// into RAM before the first pass needs them.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/model.h"

namespace bloomery::engine {

// The steps that move a model's weights, in the order a load runs them: kRead (mmap off: the
// file read into memory), kUpload (onto the GPU), kMap (the mapped weights the CPU reads, faulted
// into RAM).
enum class LoadStep : uint8_t { kRead, kUpload, kMap };

// Told a step's bytes done of its total, in many calls from 0 up to the total (the last call has
// done == total, also for a step with nothing to move). Called on the loading thread.
using LoadProgress = std::function<void(LoadStep step, uint64_t done, uint64_t total)>;

// The bytes a step moves between two reports: about 1/128 of it, from 1 MiB to 64 MiB.
uint64_t progress_piece(uint64_t total);

struct ByteRange {
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;
};

// The mapped weights the CPU reads: on the CPU every tensor but the routed experts paged from disk
// (`disk`: per layer, their ids; empty: none); on the GPU (`on_gpu`) only the routed experts neither
// on the card (`gpu`: per layer, those resident there; empty: all) nor paged from disk.
std::vector<ByteRange> cpu_read_weights(const model::Model& model, bool on_gpu,
                                        const std::vector<std::vector<int32_t>>& gpu,
                                        const std::vector<std::vector<int32_t>>& disk);

// Reads `ranges` of a mapped file into RAM (MADV_POPULATE_READ, or a read of each page on kernels
// before 5.14), so that the first passes do not wait for the disk page by page, reporting kMap.
void fault_in(std::span<const ByteRange> ranges, const LoadProgress& progress);

}  // namespace bloomery::engine
