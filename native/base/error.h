// The one error type the engine throws. `code` is stable (it becomes BloomeryError.code
// in TypeScript); `message` names the thing that is wrong.
#pragma once

#include <stdexcept>
#include <string>

namespace bloomery {

class Error : public std::runtime_error {
 public:
  Error(std::string code, const std::string& message) : std::runtime_error(message), code_(std::move(code)) {}
  const std::string& code() const noexcept { return code_; }

 private:
  std::string code_;
};

}  // namespace bloomery
