#include "cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "cpu/host_info.h"

namespace bloomery::cpu {

namespace {

// How long an idle worker spins before sleeping. A decode step launches many short loops,
// and a futex wake of every worker costs more than the loop between two of them; in a hybrid
// step the gap between two layers' loops is the GPU's part of a layer (~0.1-0.2 ms on the
// H200 host), which a spin counted in iterations (~20 us) did not cover, so every layer
// began by waking the pool.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(2000);
// Spins between two reads of the clock.
constexpr int kSpinsPerClockRead = 256;

uint32_t default_threads() { return std::max<uint32_t>(1, detect_host().physical_cores); }

}  // namespace

ThreadPool::ThreadPool(uint32_t threads) : threads_(threads == 0 ? default_threads() : threads) {
  workers_.reserve(threads_ - 1);
  for (uint32_t i = 1; i < threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stopping_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::run_chunks() {
  for (;;) {
    const size_t begin = next_task_.fetch_add(grain_, std::memory_order_relaxed);
    if (begin >= tasks_) return;
    (*body_)(begin, std::min(tasks_, begin + grain_));
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    uint64_t now = generation_.load(std::memory_order_acquire);
    const auto sleep_at = std::chrono::steady_clock::now() + kSpinBeforeSleep;
    for (int spin = 1; now == seen; ++spin) {
      if (spin % kSpinsPerClockRead == 0 && std::chrono::steady_clock::now() >= sleep_at) break;
      now = generation_.load(std::memory_order_acquire);
    }
    if (now == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = now;
    if (stopping_.load()) return;
    run_chunks();
    if (busy_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) busy_workers_.notify_one();
  }
}

void ThreadPool::parallel_for(size_t tasks, size_t grain, const std::function<void(size_t, size_t)>& body) {
  if (tasks == 0) return;
  grain_ = std::max<size_t>(1, grain);
  if (workers_.empty() || tasks <= grain_) {
    body(0, tasks);
    return;
  }
  body_ = &body;
  tasks_ = tasks;
  next_task_.store(0, std::memory_order_relaxed);
  busy_workers_.store(static_cast<uint32_t>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  run_chunks();
  for (uint32_t busy = busy_workers_.load(std::memory_order_acquire); busy != 0;
       busy = busy_workers_.load(std::memory_order_acquire)) {
    busy_workers_.wait(busy, std::memory_order_acquire);
  }
  body_ = nullptr;
}

}  // namespace bloomery::cpu
