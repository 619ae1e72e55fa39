// A minimal unit-test harness for the engine's native tests (native_tests executable).
// TEST(name) { CHECK(cond) << "context"; } registers a test; main runs them all (or those
// whose name contains argv[1]) and ends with "N passed, N failed".
#pragma once

#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace bloomery::tests {

struct TestCase {
  const char* name;
  std::function<void()> body;
};

std::vector<TestCase>& registry();
void record_failure(const char* file, int line, const std::string& what);

struct Registrar {
  Registrar(const char* name, std::function<void()> body) { registry().push_back({name, std::move(body)}); }
};

// Collects the streamed context of a failed CHECK and records it when destroyed.
class FailureMessage {
 public:
  FailureMessage(const char* file, int line, const char* expr) : file_(file), line_(line) { out_ << expr; }
  ~FailureMessage() { record_failure(file_, line_, out_.str()); }
  template <typename T>
  FailureMessage& operator<<(const T& v) {
    out_ << (first_ ? ": " : "") << v;
    first_ = false;
    return *this;
  }

 private:
  const char* file_;
  int line_;
  bool first_ = true;
  std::ostringstream out_;
};

}  // namespace bloomery::tests

#define BLOOMERY_CONCAT2(a, b) a##b
#define BLOOMERY_CONCAT(a, b) BLOOMERY_CONCAT2(a, b)
#define TEST(name)                                                                                            \
  static void BLOOMERY_CONCAT(test_, name)();                                                                 \
  static ::bloomery::tests::Registrar BLOOMERY_CONCAT(registrar_, name)(#name, BLOOMERY_CONCAT(test_, name)); \
  static void BLOOMERY_CONCAT(test_, name)()
#define CHECK(cond) \
  if (cond) {       \
  } else            \
    ::bloomery::tests::FailureMessage(__FILE__, __LINE__, #cond)
