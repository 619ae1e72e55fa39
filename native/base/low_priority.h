// Heavy work that one request asks for (tokenizing megabytes of text, parsing a megabyte of
// grammar) runs below the threads that serve every request (the engine's, Node's event loop): on
// a machine of few cores it then takes the time they leave, instead of a share of theirs.
#pragma once

#include <sys/resource.h>

#include <exception>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

namespace bloomery {

// The nice value of that work: the lowest priority.
inline constexpr int kLowPriorityNice = 19;

// Runs `work` on a thread of its own at kLowPriorityNice and returns what it returns, or throws
// what it throws. The calling thread waits at its own priority: it may be a pool's thread, and
// an unprivileged thread can raise its nice value but never lower it back.
template <typename Work>
std::invoke_result_t<Work&> at_low_priority(Work work) {
  std::optional<std::invoke_result_t<Work&>> result;
  std::exception_ptr error;
  std::thread thread([&] {
    // On Linux the nice value is a thread's own, and `who` 0 names the calling thread; raising
    // it is always allowed.
    setpriority(PRIO_PROCESS, 0, kLowPriorityNice);
    try {
      result.emplace(work());
    } catch (...) {
      error = std::current_exception();
    }
  });
  thread.join();
  if (error) std::rethrow_exception(error);
  return std::move(*result);
}

}  // namespace bloomery
