// An environment variable set for one scope (backend switches read when a
// backend opens), restored (or unset) when the scope ends, also on a failed
// REQUIRE: a switch the caller exported still holds for the tests after.
#pragma once
#include <cstdlib>
#include <optional>
#include <string>

namespace sgrt::test {

struct ScopedEnv {
  std::string name;
  std::optional<std::string> before;  // what the caller's environment held, restored after
  ScopedEnv(const char* n, const char* v) : name(n) {
    if (const char* b = std::getenv(n)) before = b;
    setenv(n, v, 1);
  }
  ~ScopedEnv() {
    if (before) setenv(name.c_str(), before->c_str(), 1);
    else unsetenv(name.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};

}  // namespace sgrt::test
