// at_low_priority: the work runs on a thread of the lowest priority and gives back its result or
// its exception, while the caller's thread keeps its own priority.
#include "base/low_priority.h"

#include <sys/resource.h>

#include <stdexcept>
#include <string>

#include "base/error.h"
#include "tests/check.h"

using bloomery::at_low_priority;

TEST(low_priority_work_runs_niced_and_leaves_the_caller_as_it_was) {
  const int caller = getpriority(PRIO_PROCESS, 0);
  const int inside = at_low_priority([] { return getpriority(PRIO_PROCESS, 0); });
  CHECK(inside == bloomery::kLowPriorityNice) << inside;
  CHECK(getpriority(PRIO_PROCESS, 0) == caller) << getpriority(PRIO_PROCESS, 0) << " was " << caller;
}

TEST(low_priority_work_returns_its_result_and_rethrows_its_error) {
  CHECK(at_low_priority([] { return std::string("tokens"); }) == "tokens");
  std::string code;
  try {
    at_low_priority([]() -> int { throw bloomery::Error("GRAMMAR_INVALID", "line 1"); });
  } catch (const bloomery::Error& e) {
    code = e.code();
  }
  CHECK(code == "GRAMMAR_INVALID") << code;
}
