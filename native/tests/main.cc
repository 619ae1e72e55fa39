#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>

#include "tests/check.h"

namespace bloomery::tests {

namespace {
int failures_in_current = 0;
}

std::vector<TestCase>& registry() {
  static std::vector<TestCase> r;
  return r;
}

void record_failure(const char* file, int line, const std::string& what) {
  ++failures_in_current;
  std::fprintf(stderr, "  %s:%d: CHECK failed: %s\n", file, line, what.c_str());
}

}  // namespace bloomery::tests

int main(int argc, char** argv) {
  using namespace bloomery::tests;
  const char* filter = argc > 1 ? argv[1] : nullptr;
  int passed = 0, failed = 0;
  for (const TestCase& t : registry()) {
    if (filter && !std::strstr(t.name, filter)) continue;
    failures_in_current = 0;
    const auto start = std::chrono::steady_clock::now();
    try {
      t.body();
    } catch (const std::exception& e) {
      record_failure(t.name, 0, std::string("unexpected exception: ") + e.what());
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf("%s %s (%.1f ms)\n", failures_in_current ? "FAIL" : "ok  ", t.name, ms);
    (failures_in_current ? failed : passed)++;
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
