// A fixed set of worker threads that run one parallel loop at a time. The calling thread
// takes part, so a pool of N threads starts N - 1 workers. Tasks are handed out in chunks
// through an atomic counter, so uneven work (experts with more rows) balances itself.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace bloomery::cpu {

class ThreadPool {
 public:
  // `threads` counts the caller; 0 means one per physical core.
  explicit ThreadPool(uint32_t threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  uint32_t size() const { return threads_; }

  // Calls body(begin, end) over disjoint ranges covering [0, tasks), `grain` tasks at a
  // time, on every thread of the pool; returns when all tasks are done. Not reentrant.
  void parallel_for(size_t tasks, size_t grain, const std::function<void(size_t begin, size_t end)>& body);

 private:
  void worker_loop();
  void run_chunks();

  uint32_t threads_;
  std::vector<std::thread> workers_;
  const std::function<void(size_t, size_t)>* body_ = nullptr;
  size_t tasks_ = 0;
  size_t grain_ = 1;
  std::atomic<size_t> next_task_{0};
  std::atomic<uint32_t> busy_workers_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stopping_{false};
};

}  // namespace bloomery::cpu
