// Shared by the Vulkan tests: whether a Vulkan device exists at all (tests skip
// only then, with a message; any other failure to open the backend fails), and
// a session prepared under one of the backend's environment switches.
#pragma once
#include <doctest/doctest.h>

#include <memory>

#include "scoped_env.h"
#include "sgrt/backend.h"
#include "sgrt/session.h"

namespace sgrt::test {

inline bool vulkan_device_present() {
#if defined(__SANITIZE_ADDRESS__)
  // lavapipe is not instrumented, and LeakSanitizer reports its allocations
  // once the loader has unloaded it (scripts/test.sh leaves the Vulkan suites out).
  MESSAGE("skipping: Vulkan under AddressSanitizer");
  return false;
#else
  std::unique_ptr<Backend> be;
  Status st = make_backend("vulkan", &be);
  if (st.ok()) return true;
  bool absent = st.code() == StatusCode::unsupported;  // no driver or no device
  if (absent) MESSAGE("skipping: no Vulkan device (" << st.message() << ")");
  else FAIL_CHECK("the vulkan backend failed to open: " << st.message());
  return false;
#endif
}

// A Vulkan session of m prepared with the switch `var` set to `value` ("": as
// unset, the backend's choice) and unset after; the prepare's status, which a
// test of a refused switch checks.
inline Status vulkan_session_with(const char* var, const char* value, const std::shared_ptr<const Model>& m,
                                  std::unique_ptr<Session>* out) {
  ScopedEnv e(var, value);
  std::unique_ptr<Backend> be;
  SG_TRY(make_backend("vulkan", &be));
  return Session::create(m, std::move(be), out);
}

}  // namespace sgrt::test
