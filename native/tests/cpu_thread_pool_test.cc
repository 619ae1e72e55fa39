// The thread pool sharing the machine: CoreShare's rule on its own, then a pool facing as many
// busy threads as the process has CPUs, and many short loops (each task run exactly once).
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "cpu/host_info.h"
#include "cpu/thread_pool.h"
#include "tests/check.h"

using namespace bloomery::cpu;

TEST(cpu_core_share_gives_up_the_cores_other_threads_keep_busy) {
  // Two CPUs, two busy programs: runnable, our two threads wait half the time; one fits.
  CoreShare two(2, 2);
  CHECK(two.active() == 2);
  two.observe(0.5);
  CHECK(two.active() == 1) << two.active();
  CHECK(two.contended());
  // Alone with the two programs our thread still waits a third of the time: it stays one.
  two.observe(1.0 / 3);
  CHECK(two.active() == 1) << two.active();

  // Sixteen CPUs, one busy program: our sixteen threads wait 1/17 of the time; fifteen fit.
  CoreShare sixteen(16, 16);
  sixteen.observe(1.0 / 17);
  CHECK(sixteen.active() == 15) << sixteen.active();

  // A quiet machine keeps every thread; a pool never takes more threads than it has.
  CoreShare quiet(4, 8);
  for (int i = 0; i < 10; ++i) quiet.observe(0.0);
  CHECK(quiet.active() == 4) << quiet.active();
  CHECK(!quiet.contended());
}

TEST(cpu_core_share_takes_cores_back_and_probes_a_busy_machine_ever_more_rarely) {
  CoreShare share(2, 2);
  share.observe(0.5);
  CHECK(share.active() == 1);
  // Free cores: the next period takes one more thread (a probe).
  share.observe(0.0);
  CHECK(share.active() == 2) << share.active();
  // The probe met contention: back to one, and the next probe waits two free periods.
  share.observe(1.0 / 3);
  CHECK(share.active() == 1) << share.active();
  share.observe(0.0);
  CHECK(share.active() == 1) << share.active();
  share.observe(0.0);
  CHECK(share.active() == 2) << share.active();
  // This probe found the cores free: it stands.
  share.observe(0.0);
  CHECK(share.active() == 2) << share.active();
}

TEST(cpu_thread_pool_uses_fewer_threads_while_the_cpus_are_busy) {
  const uint32_t cpus = usable_cpus();
  if (cpus < 2) return;  // one CPU: a pool of one thread has nothing to give up
  ThreadPool pool(cpus);
  CHECK(pool.active() == cpus);
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (uint32_t i = 0; i < cpus; ++i) {
    busy.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  }
  std::atomic<uint64_t> sum{0};
  const auto until = std::chrono::steady_clock::now() + 6 * ThreadPool::kSamplePeriod;
  while (std::chrono::steady_clock::now() < until && pool.active() == cpus) {
    pool.parallel_for(64, 1, [&](size_t begin, size_t end) {
      uint64_t local = 0;
      for (size_t i = begin; i < end; ++i) {
        for (int k = 0; k < 2000; ++k) local += i * k;
      }
      sum.fetch_add(local, std::memory_order_relaxed);
    });
  }
  const uint32_t active = pool.active();
  stop = true;
  for (std::thread& t : busy) t.join();
  CHECK(active < cpus) << "the pool kept " << active << " of " << cpus << " threads against " << cpus
                       << " busy threads";
}

TEST(cpu_thread_pool_runs_each_task_once_over_many_short_loops) {
  // Within the pool's first sample period, so every thread takes part: tasks of ~20 us, so that
  // a loop that ended before the workers in it did would be seen with their tasks unfinished.
  // With the caller sleeping on its last workers at once, and spinning first.
  for (const bool caller_spins : {false, true}) {
    ThreadPool pool(4);
    pool.set_caller_spins(caller_spins);
    std::vector<std::atomic<int>> seen(9);
    for (int loop = 0; loop < 300; ++loop) {
      const size_t tasks = 1 + static_cast<size_t>(loop) % seen.size();
      pool.parallel_for(tasks, 1, [&](size_t begin, size_t end) {
        for (size_t i = begin; i < end; ++i) {
          const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
          while (std::chrono::steady_clock::now() < until) {
          }
          seen[i].fetch_add(1, std::memory_order_relaxed);
        }
      });
      for (size_t i = 0; i < tasks; ++i) {
        if (seen[i].exchange(0) != 1) {
          CHECK(false) << "caller spins " << caller_spins << ", loop " << loop << " task " << i
                       << " did not run exactly once";
          return;
        }
      }
    }
  }
}

TEST(cpu_thread_pool_loop_returns_after_its_workers_finish) {
  // Two tasks that meet: each waits (up to 100 ms) for the other to start, so a worker runs one
  // while the caller runs the other; the worker's then takes 2 ms more. The loop must wait for it.
  // The first loop has both threads (the pool has not sampled the CPUs yet); later ones may run
  // on the caller alone while other programs keep the CPUs busy, so the test counts the loops a
  // worker took part in and needs one.
  // The worker's 2 ms outlast a spinning caller's spin: it spins, then sleeps.
  for (const bool caller_spins : {false, true}) {
    ThreadPool pool(2);
    pool.set_caller_spins(caller_spins);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the worker waits for loops
    const std::thread::id caller = std::this_thread::get_id();
    int met = 0;
    for (int loop = 0; loop < 5; ++loop) {
      std::atomic<int> started{0};
      std::atomic<int> finished{0};
      // Tasks are counted, not calls: while other programs keep the CPUs busy the pool may run
      // both on the caller in one call.
      pool.parallel_for(2, 1, [&](size_t begin, size_t end) {
        started.fetch_add(static_cast<int>(end - begin));
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
        while (started.load() < 2 && std::chrono::steady_clock::now() < give_up) {
        }
        if (std::this_thread::get_id() != caller) {
          ++met;
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        finished.fetch_add(static_cast<int>(end - begin));
      });
      CHECK(finished.load() == 2) << "caller spins " << caller_spins << ", loop " << loop << " returned with "
                                  << finished.load() << " of 2 tasks done";
    }
    CHECK(met > 0) << "the worker took part in no loop: nothing was tested";
  }
}

TEST(cpu_thread_pool_runs_small_loops_on_the_caller_and_hands_out_large_ones) {
  // Within its first sample period every thread of the pool is active.
  ThreadPool pool(4);
  const size_t small = ThreadPool::kMinParallelBytes / 64;
  CHECK(pool.grain(63, small) == 63) << "a loop of less than kMinParallelBytes is one hand-out";
  CHECK(pool.grain(64 * 1024, small) == ThreadPool::kMinHandoutBytes / small) << "hand-outs of kMinHandoutBytes";
  CHECK(pool.grain(64, small) == 8) << "two hand-outs per active thread, though smaller";
  CHECK(pool.grain(64, ThreadPool::kMinHandoutBytes) == 1) << "tasks of a hand-out's bytes go one at a time";
  CHECK(pool.grain(1000, 0) == 1000);
  // The small loop never wakes a worker.
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<size_t> elsewhere{0}, ran{0};
  pool.parallel_for(63, pool.grain(63, small), [&](size_t begin, size_t end) {
    if (std::this_thread::get_id() != caller) elsewhere.fetch_add(end - begin);
    ran.fetch_add(end - begin);
  });
  CHECK(ran.load() == 63);
  CHECK(elsewhere.load() == 0) << elsewhere.load() << " tasks of a small loop ran on workers";
}
