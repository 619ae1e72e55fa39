#include "cpu/thread_pool.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>

#include "base/arch.h"
#include "cpu/host_info.h"

namespace bloomery::cpu {

namespace {

// How long an idle worker spins for the next loop before it sleeps. A decode step runs many
// short loops back to back, and waking a sleeping worker costs more than the serial work between
// two of them; in a hybrid step the gap between two layers' loops is the GPU's part of a layer
// (~0.1-0.2 ms on the H200 host). A longer spin burns a core that other programs could use.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(500);
// Spins between two reads of the clock.
constexpr int kSpinsPerClockRead = 256;

// ThreadPool::loop_: the loop's number above bit 32, the closed bit, the count of joined workers.
constexpr uint64_t kClosed = uint64_t{1} << 31;
constexpr uint64_t kJoinedMask = kClosed - 1;
uint64_t loop_word(uint32_t generation) { return uint64_t{generation} << 32; }

// Spins until done() holds or kSpinBeforeSleep has passed (the caller then checks and sleeps): idle
// workers so for the next loop, a caller (set_caller_spins) for its loop's last workers.
template <typename Done>
void spin_before_sleep(Done done) {
  const auto sleep_at = std::chrono::steady_clock::now() + kSpinBeforeSleep;
  for (int spin = 1; !done(); ++spin) {
    cpu_relax();
    if (spin % kSpinsPerClockRead == 0 && std::chrono::steady_clock::now() >= sleep_at) return;
  }
}

// Adds a thread's time on a CPU and time runnable but waiting for one (ns), from the
// schedstat file open at `fd`; false when it cannot be read (a kernel without schedstats).
bool add_schedstat(int fd, uint64_t& run, uint64_t& wait) {
  char text[128];
  const ssize_t n = fd >= 0 ? ::pread(fd, text, sizeof text - 1, 0) : -1;
  if (n <= 0) return false;
  text[n] = '\0';
  uint64_t r = 0, w = 0;
  if (std::sscanf(text, "%" SCNu64 " %" SCNu64, &r, &w) != 2) return false;
  run += r;
  wait += w;
  return true;
}

int open_own_schedstat() { return ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC); }

}  // namespace

uint32_t default_thread_count() {
  const HostInfo host = detect_host();
  return std::max<uint32_t>(1, std::min(host.physical_cores, usable_cpus()));
}

CoreShare::CoreShare(uint32_t size, uint32_t cpus) : size_(size), cpus_(std::max<uint32_t>(1, cpus)), active_(size) {}

void CoreShare::observe(double wait_fraction) {
  contended_ = wait_fraction >= kFreeWait;
  if (!contended_) {
    // A probe that found the cores free stands, and the next one may come at once.
    if (probing_from_ != 0) free_periods_needed_ = 1;
    probing_from_ = 0;
    if (active_ < size_ && ++free_periods_ >= free_periods_needed_) {
      probing_from_ = active_;
      ++active_;
      free_periods_ = 0;
    }
    return;
  }
  free_periods_ = 0;
  if (probing_from_ != 0) {
    active_ = probing_from_;
    probing_from_ = 0;
    free_periods_needed_ = std::min<uint32_t>(free_periods_needed_ * 2, 64);
    return;
  }
  // Runnable threads share the CPUs fairly, so with `active` of ours runnable and each waiting
  // `wait_fraction` of the time, cpus / (1 - wait_fraction) threads are runnable: the others are
  // the rest. Ours fit in the CPUs they leave.
  const double others = std::max(0.0, cpus_ / std::max(1.0 - wait_fraction, 0.05) - active_);
  const double left = std::round(cpus_ - others);
  const uint32_t fit = left >= 1 ? static_cast<uint32_t>(left) : 1;
  active_ = std::clamp<uint32_t>(std::min(fit, active_), 1, size_);
}

struct ThreadPool::Worker {
  std::atomic<int> schedstat{-1};  // the worker's own schedstat file, opened by the worker
};

ThreadPool::ThreadPool(uint32_t threads)
    : threads_(threads == 0 ? default_thread_count() : threads),
      workers_state_(threads_ - 1),
      active_(threads_),
      share_(threads_, usable_cpus()),
      next_sample_(std::chrono::steady_clock::now()) {
  workers_.reserve(threads_ - 1);
  for (uint32_t i = 0; i + 1 < threads_; ++i) {
    workers_.emplace_back([this, i] { worker_loop(workers_state_[i], i); });
  }
}

ThreadPool::~ThreadPool() {
  stopping_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  active_.store(threads_ + 1);
  active_.notify_all();
  for (std::thread& t : workers_) t.join();
  for (Worker& w : workers_state_) {
    if (w.schedstat >= 0) ::close(w.schedstat);
  }
}

void ThreadPool::run_chunks() {
  for (;;) {
    const size_t begin = next_task_.fetch_add(grain_, std::memory_order_relaxed);
    if (begin >= tasks_) return;
    (*body_)(begin, std::min(tasks_, begin + grain_));
  }
}

void ThreadPool::worker_loop(Worker& self, uint32_t index) {
  self.schedstat.store(open_own_schedstat());
  uint32_t seen = generation_.load(std::memory_order_acquire);
  while (!stopping_.load()) {
    // Worker `index` is the pool's thread index + 1 (the caller is thread 0); beyond the active
    // count it sleeps until the pool takes it back, skipping the loops that ran meanwhile.
    const uint32_t active = active_.load(std::memory_order_acquire);
    if (index + 1 >= active) {
      active_.wait(active, std::memory_order_acquire);
      seen = generation_.load(std::memory_order_acquire);
      continue;
    }
    uint32_t now = generation_.load(std::memory_order_acquire);
    if (now == seen && spin_.load(std::memory_order_relaxed)) {
      spin_before_sleep([&] { return (now = generation_.load(std::memory_order_acquire)) != seen; });
    }
    if (now == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = now;
    // Join loop `now` unless its tasks are all handed out already (or a later loop began).
    uint64_t state = loop_.load(std::memory_order_acquire);
    bool joined = false;
    while (!joined && (state >> 32) == now && !(state & kClosed)) {
      joined = loop_.compare_exchange_weak(state, state + 1, std::memory_order_acq_rel, std::memory_order_acquire);
    }
    if (!joined) continue;
    run_chunks();
    const uint64_t left = loop_.fetch_sub(1, std::memory_order_acq_rel) - 1;
    if ((left & kClosed) && (left & kJoinedMask) == 0) loop_.notify_all();
  }
}

void ThreadPool::sample_core_share() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_sample_) return;
  next_sample_ = now + kSamplePeriod;
  uint64_t run = 0, wait = 0;
  const int caller = open_own_schedstat();
  const bool read = add_schedstat(caller, run, wait);
  if (caller >= 0) ::close(caller);
  if (!read) return;  // no schedstats: the pool keeps every thread
  for (Worker& w : workers_state_) add_schedstat(w.schedstat.load(), run, wait);
  // The caller's totals are its own: a loop called from another thread starts a new baseline.
  const bool same_caller = sampled_caller_ == std::this_thread::get_id();
  sampled_caller_ = std::this_thread::get_id();
  const uint64_t ran = run - run_ns_, waited = wait - wait_ns_;
  run_ns_ = run;
  wait_ns_ = wait;
  // A period with under 1 ms runnable was idle: it tells nothing of the cores.
  if (!same_caller || run < ran || wait < waited || ran + waited < 1'000'000) return;
  const uint32_t before = active_.load(std::memory_order_relaxed);
  share_.observe(static_cast<double>(waited) / static_cast<double>(ran + waited));
  spin_.store(!share_.contended(), std::memory_order_relaxed);
  if (share_.active() != before) {
    active_.store(share_.active(), std::memory_order_release);
    if (share_.active() > before) active_.notify_all();
  }
}

size_t ThreadPool::grain(size_t tasks, size_t task_bytes) const {
  if (tasks * task_bytes < kMinParallelBytes) return std::max<size_t>(tasks, 1);
  const size_t by_bytes = kMinHandoutBytes / std::max<size_t>(task_bytes, 1);
  const size_t balanced = tasks / (2 * static_cast<size_t>(active()));
  return std::max<size_t>(1, std::min(by_bytes, balanced));
}

void ThreadPool::parallel_for(size_t tasks, size_t grain, const std::function<void(size_t, size_t)>& body) {
  if (tasks == 0) return;
  grain_ = std::max<size_t>(1, grain);
  if (!workers_.empty()) sample_core_share();
  if (active_.load(std::memory_order_relaxed) <= 1 || tasks <= grain_) {
    body(0, tasks);
    return;
  }
  body_ = &body;
  tasks_ = tasks;
  next_task_.store(0, std::memory_order_relaxed);
  const uint32_t generation = generation_.load(std::memory_order_relaxed) + 1;
  loop_.store(loop_word(generation), std::memory_order_release);
  generation_.store(generation, std::memory_order_release);
  generation_.notify_all();
  run_chunks();
  // Every task is handed out: close the loop to workers not in it yet, and wait for those in it.
  // Where set_caller_spins says so, the caller spins first: those still in the loop finish their
  // last hand-out within microseconds.
  uint64_t state = loop_.fetch_or(kClosed, std::memory_order_acq_rel) | kClosed;
  if ((state & kJoinedMask) != 0 && caller_spins_.load(std::memory_order_relaxed) &&
      spin_.load(std::memory_order_relaxed)) {
    spin_before_sleep([&] { return ((state = loop_.load(std::memory_order_acquire)) & kJoinedMask) == 0; });
  }
  for (; (state & kJoinedMask) != 0; state = loop_.load(std::memory_order_acquire)) {
    loop_.wait(state, std::memory_order_acquire);
  }
  body_ = nullptr;
}

}  // namespace bloomery::cpu
