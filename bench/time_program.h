// Shared by the benches that time a compiled graph's "infer" program on a
// backend, run to completion (a read of the loss waits for it: the Vulkan backend
// waits on its fence, CUDA's read syncs its stream).
#pragma once
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "sgrt/session.h"

namespace sgrt::bench {

// A session of `m` on `backend`, initialized from seed 1.
inline Status open_session(std::shared_ptr<const Model> m, const std::string& backend, std::unique_ptr<Session>* s) {
  std::unique_ptr<Backend> be;
  SG_TRY(make_backend(backend, &be));
  SG_TRY(Session::create(std::move(m), std::move(be), s));
  return (*s)->init(1, 1);
}

// *sec: the median seconds of the infer program over `reps` runs after two warm-ups.
inline Status median_infer_seconds(Session& s, int reps, double* sec) {
  int prog;
  SG_TRY(s.find_program("infer", &prog));
  std::vector<double> t;
  for (int i = 0; i < reps + 2; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    float loss;
    SG_TRY(s.run(prog));
    SG_TRY(s.read_scalar(s.model().loss(), &loss));
    if (i >= 2) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  *sec = t[t.size() / 2];
  return Status::Ok();
}

}  // namespace sgrt::bench
