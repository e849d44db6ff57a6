// An environment variable set for one scope (backend switches read when a
// backend opens), unset again when the scope ends, also on a failed REQUIRE.
#pragma once
#include <cstdlib>
#include <string>

namespace sgrt::test {

struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};

}  // namespace sgrt::test
