// Shared by the Vulkan tests: whether a Vulkan device exists at all. Tests skip
// only then (with a message); any other failure to open the backend fails.
#pragma once
#include <doctest/doctest.h>

#include <memory>

#include "sgrt/backend.h"

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

}  // namespace sgrt::test
