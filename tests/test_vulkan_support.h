// Shared by the Vulkan tests: whether a Vulkan device exists at all. Tests skip
// only then (with a message); any other failure to open the backend fails.
#pragma once
#include <doctest/doctest.h>

#include <memory>

#include "sgrt/backend.h"

namespace sgrt::test {

inline bool vulkan_device_present() {
  std::unique_ptr<Backend> be;
  Status st = make_backend("vulkan", &be);
  if (st.ok()) return true;
  bool absent = st.code() == StatusCode::unsupported;  // no driver or no device
  if (absent) MESSAGE("skipping: no Vulkan device (" << st.message() << ")");
  else FAIL_CHECK("the vulkan backend failed to open: " << st.message());
  return false;
}

}  // namespace sgrt::test
