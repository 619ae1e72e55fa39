// A fixed set of worker threads that run one parallel loop at a time. The calling thread
// takes part, so a pool of N threads starts N - 1 workers. Tasks are handed out in chunks
// through an atomic counter, so uneven work (experts with more rows) balances itself.
//
// The pool shares the machine (a desktop app's CPU is never its own):
// - an idle worker spins briefly for the next loop, then sleeps (and does not spin at all
//   while the cores are contended);
// - a loop waits only for the workers that joined it: one the kernel has not run yet when the
//   tasks are all handed out is not waited for;
// - every kSamplePeriod the pool reads how long its threads waited for a core (the kernel's
//   run delay, /proc/thread-self/schedstat). When other programs keep the cores busy, fewer
//   of its threads take part in loops (down to the caller alone), since a loop whose thread
//   waits for a core waits a whole scheduler time slice; as the cores free up it takes them back.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace bloomery::cpu {

// The threads a pool gets by default: one per physical core this process may run on (its
// CPU affinity and its cgroup's CPU quota counted), at least one.
uint32_t default_thread_count();

// How many of a pool's threads take part in loops, from how long they waited for a core.
// Pure, so its rule is tested on its own: `observe` takes one sample period's share of the
// threads' runnable time spent waiting (0: always running when runnable; 0.5: half of it
// queued behind other threads).
class CoreShare {
 public:
  CoreShare(uint32_t size, uint32_t cpus);

  uint32_t active() const { return active_; }
  // Whether the cores were contended in the last period: idle workers then sleep at once.
  bool contended() const { return contended_; }
  // Adjusts active() after a period whose threads waited `wait_fraction` of their runnable time.
  void observe(double wait_fraction);

  // Below this share of waiting the cores count as free.
  static constexpr double kFreeWait = 0.05;

 private:
  uint32_t size_;
  uint32_t cpus_;
  uint32_t active_;
  bool contended_ = false;
  // Free periods to see before taking one more thread; doubles each time taking one
  // proved contended, so a machine that stays busy is probed ever more rarely.
  uint32_t free_periods_needed_ = 1;
  uint32_t free_periods_ = 0;
  uint32_t probing_from_ = 0;  // the active count before a probe, 0 when not probing
};

class ThreadPool {
 public:
  // `threads` counts the caller; 0 means default_thread_count().
  explicit ThreadPool(uint32_t threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads the pool has, the caller counted: the most a loop uses.
  uint32_t size() const { return threads_; }
  // Threads the next loop uses (see CoreShare).
  uint32_t active() const { return active_.load(std::memory_order_relaxed); }

  // The grain for parallel_for over `tasks` tasks that each stream about `task_bytes`
  // (weights times the rows they are dotted with). A loop of less than kMinParallelBytes in all
  // is one hand-out: the caller runs it alone, since waking workers costs more than such work. A
  // larger one is handed out kMinHandoutBytes at a time, but in at least two hand-outs per active
  // thread, so that the threads still balance. (A small model's decode step ran at 1,200 tok/s
  // on two threads with a task per hand-out, and at 1,900 so.)
  size_t grain(size_t tasks, size_t task_bytes) const;
  static constexpr size_t kMinParallelBytes = size_t{256} << 10;
  static constexpr size_t kMinHandoutBytes = size_t{256} << 10;

  // Whether the caller of a loop spins for its last workers (as idle workers spin for the next
  // loop, and not while the cores are contended) before it sleeps. For a pool a GPU waits on (a
  // hybrid model's host experts): a caller asleep in the kernel wakes tens of microseconds after
  // them, and the GPU with it. Off by default: with as many pool threads as cores, a spinning
  // caller also keeps the core that the program's other threads (an event loop queuing the next
  // request) need; two sessions on two cores then shared fewer passes.
  void set_caller_spins(bool spins) { caller_spins_.store(spins, std::memory_order_relaxed); }

  // Calls body(begin, end) over disjoint ranges covering [0, tasks), `grain` tasks at a
  // time, on the active threads of the pool; returns when all tasks are done. Not reentrant.
  void parallel_for(size_t tasks, size_t grain, const std::function<void(size_t begin, size_t end)>& body);

  static constexpr auto kSamplePeriod = std::chrono::milliseconds(100);

 private:
  struct Worker;
  void worker_loop(Worker& self, uint32_t index);
  void run_chunks();
  void sample_core_share();

  uint32_t threads_;
  std::vector<Worker> workers_state_;
  std::vector<std::thread> workers_;
  const std::function<void(size_t, size_t)>* body_ = nullptr;
  size_t tasks_ = 0;
  size_t grain_ = 1;
  std::atomic<size_t> next_task_{0};
  // The loop workers may join: its number in the high 32 bits, then a closed bit (set once its
  // tasks are all handed out: no worker joins after), then how many workers joined and run.
  std::atomic<uint64_t> loop_{0};
  // Bumped for each loop; idle workers wait on it.
  std::atomic<uint32_t> generation_{0};
  std::atomic<uint32_t> active_;  // threads taking part, the caller counted
  std::atomic<bool> spin_{true};  // whether idle workers spin before sleeping
  std::atomic<bool> caller_spins_{false};
  std::atomic<bool> stopping_{false};

  CoreShare share_;
  std::chrono::steady_clock::time_point next_sample_;
  std::thread::id sampled_caller_;
  uint64_t run_ns_ = 0, wait_ns_ = 0;  // the threads' totals at the last sample
};

}  // namespace bloomery::cpu
