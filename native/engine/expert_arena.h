// The disk tier: routed experts that host RAM cannot hold stay in the model file and are read
// on demand into an arena of fixed slots in RAM, one expert (its gate, up and down slices) per
// slot. Reads bypass the page cache (O_DIRECT, aligned), so the arena is the only RAM these
// experts take; where the file system refuses O_DIRECT (tmpfs) they are plain preads, and
// stats().direct_io says so. The mapping of the file is never read for a paged expert.
//
// A layer's pass leases the experts it needs: lease() pins them and queues the reads of those
// not resident on a small set of I/O threads (several in flight); next_ready() hands them out
// as they arrive, so the CPU runs the resident ones while the others load; the lease's end
// unpins them. One lease at a time (a model's passes run one after another).
//
// What stays: a read takes an empty slot, else the unpinned slot whose expert is coldest by
// the routing counts (engine/residency.h, handed over between steps by rank_by) plus the calls
// leases gave it since, the least recently used first among equals. So the experts the router
// favours survive a prompt's sweep over every layer, which plain LRU would flush, and a cold
// start (all counts 0) is plain LRU. Deterministic for a given request history.
//
// Read-ahead: a prompt-sized pass may ask for the next paged layer's experts the counts rank
// hottest (read_ahead), read after every lease's own reads, each only into a slot colder than
// itself; so the disk keeps reading while the layer computes, and never for less than it evicts.
//
// Each routed call (a row routed to a paged expert) counts as a RAM hit when its lease found the
// expert resident, else as a disk call (take_disk_calls: stats().residency's tiers).
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cpu/moe.h"
#include "model/model.h"

namespace bloomery::engine {

// Bytes of one routed expert of a layer: its gate, up and down slices (0 for a dense layer).
uint64_t routed_expert_bytes(const model::LayerWeights& w);
// Bytes of one arena slot: the largest expert's three slices, each with room to read it as
// whole aligned blocks. The one owner of the slot size (the planner divides hostRam by it).
uint64_t arena_slot_bytes(const model::Model& model);

struct ArenaStats {
  int64_t slots = 0;
  uint64_t slot_bytes = 0;
  uint64_t hits = 0;        // leased experts found resident
  uint64_t misses = 0;      // leased experts read from the file (for the lease, or ahead of it)
  uint64_t read_ahead = 0;  // experts read ahead of a lease (read_ahead())
  uint64_t bytes_read = 0;  // what the reads transferred (whole aligned blocks)
  double read_seconds = 0;  // the I/O threads' time in reads, summed over threads
  double wait_seconds = 0;  // passes waiting for reads, with nothing resident left to run
  bool direct_io = false;   // reads bypass the page cache (false: the file system refused O_DIRECT)
};

class ExpertArena {
 public:
  // Alignment of O_DIRECT reads (offsets, lengths and buffers): the largest logical block size in use.
  static constexpr uint64_t kAlignment = 4096;

  // paged[l][e] != 0: expert e of layer l is served from the arena, which has `bytes` / the slot
  // size slots. INSUFFICIENT_MEMORY (naming both) when the slots cannot hold the paged experts of
  // the layer with the most, which a prompt's pass may need at once, or the RAM is refused;
  // FILE_READ when the model file cannot be opened.
  ExpertArena(const model::Model& model, std::vector<std::vector<uint8_t>> paged, uint64_t bytes, int io_threads = 8);
  ~ExpertArena();
  ExpertArena(const ExpertArena&) = delete;
  ExpertArena& operator=(const ExpertArena&) = delete;

  bool pages_layer(int64_t layer) const { return layer_paged_[layer]; }
  bool is_paged(int64_t layer, int32_t expert) const { return paged_[layer][expert] != 0; }

  class Lease {
   public:
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&&) = delete;
    // Waits for the lease's reads still in flight, then unpins its experts.
    ~Lease();
    // The leased experts that became resident since the last call (the hits at once); with
    // `wait`, waits for at least one unless every one was handed out. FILE_READ when a read failed.
    std::vector<int32_t> next_ready(bool wait);
    // Where a handed-out expert's slices are, for as long as the lease lives.
    cpu::ExpertSlices slices(int32_t expert) const;

   private:
    friend class ExpertArena;
    Lease(ExpertArena* arena, int64_t layer, std::vector<int32_t> experts);
    ExpertArena* arena_;
    int64_t layer_;
    std::vector<int32_t> experts_;
    std::vector<bool> handed_;
  };

  // Pins `experts` (paged experts of `layer`, each once) and queues the reads of those not
  // resident; `calls[i]`: the routed calls (rows) experts[i] serves in this pass. INVALID_ARGUMENT
  // while another lease lives, for more experts than slots or calls not matching experts.
  Lease lease(int64_t layer, std::span<const int32_t> experts, std::span<const uint32_t> calls);

  // Queues reads of up to `limit` paged experts of `layer` that are not resident and have been
  // routed (heat above 0), hottest first (ties to the lower id), each into a slot whose expert is
  // strictly colder (pinned and loading slots are never taken), behind every lease's reads.
  // Stops at the first that finds none.
  void read_ahead(int64_t layer, int64_t limit);

  // Between steps: the routing counts (layers * experts, layer after layer) that rank experts for
  // eviction from now on; the calls leases counted since then start from 0.
  void rank_by(std::span<const double> counts);
  // The routed calls since the last call whose expert had to be read from the file.
  uint64_t take_disk_calls();

  ArenaStats stats() const;

 private:
  enum class SlotState : uint8_t { kEmpty, kLoading, kReady, kFailed };
  struct Slot {
    int64_t layer = -1;
    int32_t expert = -1;
    SlotState state = SlotState::kEmpty;
    int parts_left = 0;  // reads in flight
    bool pinned = false;
    bool read_ahead = false;  // read by read_ahead(), not leased since
    uint64_t last_use = 0;    // 0: never used
    std::string error;
  };
  struct Read {
    int32_t slot;
    int part;  // 0 gate, 1 up, 2 down
  };
  // Where one slice of one expert is in the model's files.
  struct Extent {
    int file = 0;
    uint64_t offset = 0;
    uint64_t bytes = 0;
  };

  // The routing count of (layer, expert) plus its calls in leases since rank_by.
  double heat(int64_t layer, int32_t expert) const;
  int32_t victim() const;
  void load(int32_t slot, int64_t layer, int32_t expert, bool read_ahead);
  Extent extent(int64_t layer, int32_t expert, int part) const;
  uint8_t* part_buffer(int32_t slot, int part) const;
  const uint8_t* part_data(int32_t slot, int part) const;
  void io_loop();
  void read_part(const Read& read);
  void end_lease(const Lease& lease);

  const model::Model& model_;
  std::vector<std::vector<uint8_t>> paged_;
  std::vector<bool> layer_paged_;
  // Per layer, the file and offset of each stack (gate, up, down) and one expert's bytes in it.
  struct StackPlace {
    int file = 0;
    uint64_t offset = 0;
    uint64_t expert_bytes = 0;
  };
  std::vector<std::array<StackPlace, 3>> stacks_;
  std::vector<int> fds_;
  bool direct_io_ = false;
  uint64_t part_capacity_[3] = {0, 0, 0};
  uint64_t slot_bytes_ = 0;
  uint8_t* memory_ = nullptr;
  uint64_t memory_bytes_ = 0;
  std::vector<Slot> slots_;
  std::vector<std::vector<int32_t>> slot_of_;  // per layer, expert -> slot, -1 when not in the arena

  mutable std::mutex mutex_;
  std::condition_variable io_wake_, ready_;
  std::deque<Read> queue_;        // leases' reads, first
  std::deque<Read> ahead_queue_;  // read-ahead, when no lease's read waits
  std::vector<double> counts_;    // rank_by's counts, layer after layer
  std::vector<double> recent_;    // calls leased since rank_by, likewise
  uint64_t disk_calls_ = 0;
  bool stopping_ = false;
  bool leased_ = false;
  uint64_t clock_ = 0;
  ArenaStats stats_;
  std::vector<std::thread> io_threads_;
};

}  // namespace bloomery::engine
