// Shared by the CUDA tests: whether a CUDA device is usable. Tests skip (with a
// message) only when sgrt was built without CUDA or no device exists; any other
// failure to open the backend fails the test.
#pragma once
#include <doctest/doctest.h>

#include <memory>

#include "sgrt/backend.h"

namespace sgrt::test {

inline bool cuda_device_present() {
#ifndef SGRT_WITH_CUDA
  MESSAGE("skipping: sgrt was built without the CUDA backend (configure with -DSGRT_CUDA=ON)");
  return false;
#else
  std::unique_ptr<Backend> be;
  Status st = make_backend("cuda", &be);
  if (st.ok()) return true;
  bool absent = st.code() == StatusCode::unsupported;  // no driver or no device
  if (absent) MESSAGE("skipping: no CUDA device (" << st.message() << ")");
  else FAIL_CHECK("the cuda backend failed to open: " << st.message());
  return false;
#endif
}

}  // namespace sgrt::test
