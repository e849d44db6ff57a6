// Batch normalization's running statistics: training passes this batch's
// statistic on and, unless the op is a recomputed copy (update = 0), moves the
// running value toward it; evaluation passes the running value on.
#include <cstring>

#include "cpu/op_args.h"

namespace sgrt::cpu {

Status k_running_stat(const OpArgs& a) {
  const float* stat = a.in[0].f();
  float* used = a.out[0].f();
  float* running = a.out[1].f();  // in place: input 1
  const int64_t n = a.in[0].n;
  if (!a.attrs->i("training")) {
    std::memcpy(used, running, sizeof(float) * n);
    return Status::Ok();
  }
  if (used != stat) std::memcpy(used, stat, sizeof(float) * n);
  if (!a.attrs->i("update", 1)) return Status::Ok();
  const float m = static_cast<float>(a.attrs->f("momentum")), u = static_cast<float>(a.attrs->f("unbias"));
  for (int64_t c = 0; c < n; ++c) running[c] = (1.f - m) * running[c] + m * (u * stat[c]);
  return Status::Ok();
}

}  // namespace sgrt::cpu
