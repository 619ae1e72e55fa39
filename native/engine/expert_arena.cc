#include "engine/expert_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "base/error.h"
#include "model/binder.h"

namespace bloomery::engine {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kA = ExpertArena::kAlignment;
uint64_t align_down(uint64_t x) { return x / kA * kA; }
uint64_t align_up(uint64_t x) { return (x + kA - 1) / kA * kA; }

const cpu::ExpertMatrices& stack(const model::LayerWeights& w, int part) {
  return part == 0 ? w.ffn.routed.gate : part == 1 ? w.ffn.routed.up : w.ffn.routed.down;
}

uint64_t slice_bytes(const cpu::ExpertMatrices& m) { return static_cast<uint64_t>(m.first.rows) * m.first.row_bytes; }

// Room for one slice of `bytes` read as whole aligned blocks from any offset.
uint64_t part_room(uint64_t bytes) { return align_up(bytes) + kA; }

std::string mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

constexpr const char* kStackNames[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};

}  // namespace

uint64_t routed_expert_bytes(const model::LayerWeights& w) {
  if (w.ffn.routed.gate.count == 0) return 0;
  return slice_bytes(w.ffn.routed.gate) + slice_bytes(w.ffn.routed.up) + slice_bytes(w.ffn.routed.down);
}

uint64_t arena_slot_bytes(const model::Model& model) {
  uint64_t bytes = 0;
  for (int part = 0; part < 3; ++part) {
    uint64_t room = 0;
    for (const model::LayerWeights& w : model.layers) {
      if (w.ffn.routed.gate.count > 0) room = std::max(room, part_room(slice_bytes(stack(w, part))));
    }
    bytes += room;
  }
  return bytes;
}

ExpertArena::ExpertArena(const model::Model& model, std::vector<std::vector<uint8_t>> paged, uint64_t bytes,
                         int io_threads)
    : model_(model), paged_(std::move(paged)) {
  const model::HyperParams& p = model.params;
  if (static_cast<int64_t>(paged_.size()) != p.layers) {
    throw Error("INVALID_ARGUMENT", "the disk tier names " + std::to_string(paged_.size()) + " layers; the model has " +
                                        std::to_string(p.layers));
  }
  int64_t widest = 0, widest_layer = 0;
  stacks_.resize(paged_.size());
  slot_of_.resize(paged_.size());
  for (size_t l = 0; l < paged_.size(); ++l) {
    if (static_cast<int64_t>(paged_[l].size()) != p.experts) {
      throw Error("INVALID_ARGUMENT", "the disk tier's layer " + std::to_string(l) + " flags " +
                                          std::to_string(paged_[l].size()) + " experts; the model has " +
                                          std::to_string(p.experts));
    }
    const auto count =
        static_cast<int64_t>(std::count_if(paged_[l].begin(), paged_[l].end(), [](uint8_t f) { return f != 0; }));
    layer_paged_.push_back(count > 0);
    if (count > widest) widest = count, widest_layer = static_cast<int64_t>(l);
    slot_of_[l].assign(static_cast<size_t>(p.experts), -1);
    if (count == 0) continue;
    for (int part = 0; part < 3; ++part) {
      const std::string name = model::layer_tensor(static_cast<int64_t>(l), kStackNames[part]);
      const gguf::Tensor* t = model.file.find_tensor(name);
      if (!t) throw Error("MODEL_MISSING_TENSOR", name + " is missing");
      stacks_[l][part] = {static_cast<int>(t->file), t->offset, slice_bytes(stack(model.layers[l], part))};
    }
  }
  for (int part = 0; part < 3; ++part) {
    for (const model::LayerWeights& w : model.layers) {
      if (w.ffn.routed.gate.count > 0) {
        part_capacity_[part] = std::max(part_capacity_[part], part_room(slice_bytes(stack(w, part))));
      }
    }
  }
  slot_bytes_ = arena_slot_bytes(model);
  const int64_t slots = slot_bytes_ > 0 ? static_cast<int64_t>(bytes / slot_bytes_) : 0;
  if (slots < widest) {
    throw Error("INSUFFICIENT_MEMORY", "the disk tier's arena of " + mib(bytes) + " holds " + std::to_string(slots) +
                                           " experts of " + mib(slot_bytes_) + "; layer " +
                                           std::to_string(widest_layer) + " pages " + std::to_string(widest) +
                                           ", which one prompt pass may need at once: the arena needs at least " +
                                           mib(static_cast<uint64_t>(widest) * slot_bytes_));
  }
  memory_bytes_ = static_cast<uint64_t>(slots) * slot_bytes_;
  if (memory_bytes_ > 0) {
    void* memory = ::mmap(nullptr, memory_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) {
      throw Error("INSUFFICIENT_MEMORY",
                  "the disk tier's arena of " + mib(memory_bytes_) + " was refused by the system");
    }
    memory_ = static_cast<uint8_t*>(memory);
  }
  slots_.resize(static_cast<size_t>(slots));
  counts_.assign(static_cast<size_t>(p.layers * p.experts), 0.0);
  recent_.assign(counts_.size(), 0.0);
  stats_.slots = slots;
  stats_.slot_bytes = slot_bytes_;

  // O_DIRECT where the file system takes it: open refuses it on some, the first aligned read on others.
  const auto open_all = [&](bool direct) {
    for (const int fd : fds_) ::close(fd);
    fds_.clear();
    for (const gguf::FileInfo& file : model.file.files()) {
      int fd = ::open(file.path.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
      if (fd < 0 && direct && errno == EINVAL) return false;
      if (fd < 0) {
        const int err = errno;
        for (const int open_fd : fds_) ::close(open_fd);
        fds_.clear();
        throw Error("FILE_READ", file.path + ": cannot open it for the disk tier (" + std::strerror(err) + ")");
      }
      fds_.push_back(fd);
    }
    if (!direct || !memory_) return true;
    for (const int fd : fds_) {
      ssize_t n;
      do n = ::pread(fd, memory_, kA, 0);
      while (n < 0 && errno == EINTR);
      if (n < 0 && errno == EINVAL) return false;
    }
    return true;
  };
  direct_io_ = open_all(true);
  if (!direct_io_) open_all(false);
  stats_.direct_io = direct_io_;
  for (int i = 0; i < std::max(1, io_threads); ++i) io_threads_.emplace_back([this] { io_loop(); });
}

ExpertArena::~ExpertArena() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  io_wake_.notify_all();
  for (std::thread& t : io_threads_) t.join();
  for (const int fd : fds_) ::close(fd);
  if (memory_) ::munmap(memory_, memory_bytes_);
}

ExpertArena::Extent ExpertArena::extent(int64_t layer, int32_t expert, int part) const {
  const StackPlace& s = stacks_[layer][part];
  return {s.file, s.offset + static_cast<uint64_t>(expert) * s.expert_bytes, s.expert_bytes};
}

uint8_t* ExpertArena::part_buffer(int32_t slot, int part) const {
  uint8_t* p = memory_ + static_cast<uint64_t>(slot) * slot_bytes_;
  for (int i = 0; i < part; ++i) p += part_capacity_[i];
  return p;
}

const uint8_t* ExpertArena::part_data(int32_t slot, int part) const {
  const Slot& s = slots_[slot];
  const Extent e = extent(s.layer, s.expert, part);
  return part_buffer(slot, part) + (e.offset - align_down(e.offset));
}

double ExpertArena::heat(int64_t layer, int32_t expert) const {
  const auto i = static_cast<size_t>(layer * model_.params.experts + expert);
  return counts_[i] + recent_[i];
}

// An empty slot, else the coldest unpinned one not loading (the least recently used among
// equals); -1 when there is none.
int32_t ExpertArena::victim() const {
  int32_t best = -1;
  double best_heat = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (s.pinned || s.parts_left > 0) continue;
    if (s.state == SlotState::kEmpty) return static_cast<int32_t>(i);
    const double h = heat(s.layer, s.expert);
    if (best < 0 || h < best_heat || (h == best_heat && s.last_use < slots_[best].last_use)) {
      best = static_cast<int32_t>(i);
      best_heat = h;
    }
  }
  return best;
}

void ExpertArena::load(int32_t slot, int64_t layer, int32_t expert, bool read_ahead) {
  Slot& s = slots_[slot];
  if (s.layer >= 0) slot_of_[s.layer][s.expert] = -1;
  s = Slot{};
  s.layer = layer;
  s.expert = expert;
  s.state = SlotState::kLoading;
  s.parts_left = 3;
  s.pinned = !read_ahead;
  s.read_ahead = read_ahead;
  s.last_use = ++clock_;
  slot_of_[layer][expert] = slot;
  for (int part = 0; part < 3; ++part) (read_ahead ? ahead_queue_ : queue_).push_back({slot, part});
}

ExpertArena::Lease ExpertArena::lease(int64_t layer, std::span<const int32_t> experts,
                                      std::span<const uint32_t> calls) {
  std::unique_lock lock(mutex_);
  if (leased_) throw Error("INVALID_ARGUMENT", "the disk tier's arena is leased already");
  if (calls.size() != experts.size()) {
    throw Error("INVALID_ARGUMENT", "a lease of " + std::to_string(experts.size()) + " experts counts " +
                                        std::to_string(calls.size()) + " experts' calls");
  }
  if (experts.size() > slots_.size()) {
    throw Error("INVALID_ARGUMENT", "a lease of " + std::to_string(experts.size()) + " experts exceeds the arena's " +
                                        std::to_string(slots_.size()) + " slots");
  }
  for (const int32_t e : experts) {
    if (!paged_[layer][e]) {
      throw Error("INVALID_ARGUMENT",
                  "expert " + std::to_string(e) + " of layer " + std::to_string(layer) + " is not on the disk tier");
    }
  }
  leased_ = true;
  // Hits first, so that a miss of this lease never evicts one of them.
  std::vector<int32_t> missing;
  for (size_t i = 0; i < experts.size(); ++i) {
    const int32_t e = experts[i];
    recent_[static_cast<size_t>(layer * model_.params.experts + e)] += calls[i];
    const int32_t slot = slot_of_[layer][e];
    if (slot < 0) {
      missing.push_back(e);
      disk_calls_ += calls[i];
      continue;
    }
    Slot& s = slots_[slot];
    s.pinned = true;
    s.last_use = ++clock_;
    if (!s.read_ahead) {
      ++stats_.hits;
      continue;
    }
    // Read ahead for this lease: a miss, whose reads still queued now go before any read-ahead.
    s.read_ahead = false;
    ++stats_.misses;
    disk_calls_ += calls[i];
    for (auto it = ahead_queue_.begin(); it != ahead_queue_.end();) {
      if (it->slot != slot) {
        ++it;
        continue;
      }
      queue_.push_back(*it);
      it = ahead_queue_.erase(it);
    }
  }
  for (const int32_t e : missing) {
    // Every unpinned slot may be taking a read-ahead: the lease's experts fit, so one lands soon
    // (the I/O threads take this lease's reads queued so far first).
    int32_t slot;
    while ((slot = victim()) < 0) {
      io_wake_.notify_all();
      ready_.wait(lock);
    }
    load(slot, layer, e, false);
    ++stats_.misses;
  }
  lock.unlock();
  io_wake_.notify_all();
  return Lease(this, layer, {experts.begin(), experts.end()});
}

void ExpertArena::read_ahead(int64_t layer, int64_t limit) {
  std::unique_lock lock(mutex_);
  if (!layer_paged_[layer]) return;
  std::vector<int32_t> wanted;
  for (int32_t e = 0; e < model_.params.experts; ++e) {
    if (paged_[layer][e] && slot_of_[layer][e] < 0 && heat(layer, e) > 0) wanted.push_back(e);
  }
  std::sort(wanted.begin(), wanted.end(), [&](int32_t a, int32_t b) {
    const double ha = heat(layer, a), hb = heat(layer, b);
    return ha > hb || (ha == hb && a < b);
  });
  int64_t queued = 0;
  for (const int32_t e : wanted) {
    if (queued == limit) break;
    const int32_t slot = victim();
    if (slot < 0) break;
    const Slot& s = slots_[slot];
    if (s.state != SlotState::kEmpty && !(heat(s.layer, s.expert) < heat(layer, e))) break;
    load(slot, layer, e, true);
    ++stats_.read_ahead;
    ++queued;
  }
  lock.unlock();
  if (queued > 0) io_wake_.notify_all();
}

void ExpertArena::rank_by(std::span<const double> counts) {
  std::lock_guard lock(mutex_);
  if (counts.size() != counts_.size()) {
    throw Error("INVALID_ARGUMENT", "the disk tier ranks experts by " + std::to_string(counts_.size()) +
                                        " routing counts, not " + std::to_string(counts.size()));
  }
  counts_.assign(counts.begin(), counts.end());
  std::fill(recent_.begin(), recent_.end(), 0.0);
}

uint64_t ExpertArena::take_disk_calls() {
  std::lock_guard lock(mutex_);
  return std::exchange(disk_calls_, 0);
}

void ExpertArena::io_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    io_wake_.wait(lock, [&] { return stopping_ || !queue_.empty() || !ahead_queue_.empty(); });
    if (stopping_) return;
    std::deque<Read>& from = queue_.empty() ? ahead_queue_ : queue_;
    const Read read = from.front();
    from.pop_front();
    lock.unlock();
    std::string error;
    const auto started = Clock::now();
    try {
      read_part(read);
    } catch (const Error& e) {
      error = e.what();
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    lock.lock();
    Slot& s = slots_[read.slot];
    stats_.read_seconds += seconds;
    if (!error.empty()) {
      s.state = SlotState::kFailed;
      s.error = error;
    }
    if (--s.parts_left == 0 && s.state == SlotState::kLoading) s.state = SlotState::kReady;
    if (s.parts_left == 0) ready_.notify_all();
  }
}

void ExpertArena::read_part(const Read& read) {
  Extent e;
  {
    std::lock_guard lock(mutex_);
    e = extent(slots_[read.slot].layer, slots_[read.slot].expert, read.part);
  }
  const uint64_t start = align_down(e.offset);
  const uint64_t needed = e.offset + e.bytes - start;
  const uint64_t length = align_up(needed);
  uint8_t* buffer = part_buffer(read.slot, read.part);
  const std::string& path = model_.file.files()[e.file].path;
  uint64_t done = 0;
  while (done < needed) {
    const ssize_t n = ::pread(fds_[e.file], buffer + done, length - done, static_cast<off_t>(start + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw Error("FILE_READ", path + ": cannot read an expert for the disk tier (" + std::strerror(errno) + ")");
    if (n == 0) throw Error("FILE_READ", path + ": the file ended while an expert was read (truncated meanwhile?)");
    done += static_cast<uint64_t>(n);
  }
  std::lock_guard lock(mutex_);
  stats_.bytes_read += done;
}

void ExpertArena::end_lease(const Lease& lease) {
  std::unique_lock lock(mutex_);
  const auto loading = [&] {
    for (const int32_t e : lease.experts_) {
      const int32_t slot = slot_of_[lease.layer_][e];
      if (slot >= 0 && slots_[slot].parts_left > 0) return true;
    }
    return false;
  };
  ready_.wait(lock, [&] { return !loading(); });
  for (const int32_t e : lease.experts_) {
    const int32_t slot = slot_of_[lease.layer_][e];
    if (slot < 0) continue;
    Slot& s = slots_[slot];
    s.pinned = false;
    if (s.state == SlotState::kFailed) {
      slot_of_[lease.layer_][e] = -1;
      s = Slot{};
    }
  }
  leased_ = false;
}

ArenaStats ExpertArena::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

ExpertArena::Lease::Lease(ExpertArena* arena, int64_t layer, std::vector<int32_t> experts)
    : arena_(arena), layer_(layer), experts_(std::move(experts)), handed_(experts_.size(), false) {}

ExpertArena::Lease::Lease(Lease&& other) noexcept
    : arena_(std::exchange(other.arena_, nullptr)),
      layer_(other.layer_),
      experts_(std::move(other.experts_)),
      handed_(std::move(other.handed_)) {}

ExpertArena::Lease::~Lease() {
  if (arena_) arena_->end_lease(*this);
}

std::vector<int32_t> ExpertArena::Lease::next_ready(bool wait) {
  ExpertArena& a = *arena_;
  std::unique_lock lock(a.mutex_);
  std::vector<int32_t> ready;
  const auto waiting = Clock::now();
  bool waited = false;
  for (;;) {
    bool left = false;
    for (size_t i = 0; i < experts_.size(); ++i) {
      if (handed_[i]) continue;
      const Slot& s = a.slots_[a.slot_of_[layer_][experts_[i]]];
      if (s.state == SlotState::kFailed) throw Error("FILE_READ", s.error);
      if (s.state == SlotState::kReady) {
        handed_[i] = true;
        ready.push_back(experts_[i]);
      } else {
        left = true;
      }
    }
    if (!ready.empty() || !left || !wait) break;
    waited = true;
    a.ready_.wait(lock);
  }
  if (waited) a.stats_.wait_seconds += std::chrono::duration<double>(Clock::now() - waiting).count();
  return ready;
}

cpu::ExpertSlices ExpertArena::Lease::slices(int32_t expert) const {
  std::lock_guard lock(arena_->mutex_);
  const int32_t slot = arena_->slot_of_[layer_][expert];
  return {arena_->part_data(slot, 0), arena_->part_data(slot, 1), arena_->part_data(slot, 2)};
}

}  // namespace bloomery::engine
