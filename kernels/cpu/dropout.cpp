// Inverted dropout with a counter-based mask: element i of step t is kept when
// rng_uniform(seed, t, offset + i) >= p, so the backward (the same op applied
// to dy in the same step) rebuilds the mask instead of storing it. offset is
// 0 but on data-parallel ranks, where it places the rank's rows in the global
// batch (split_train_step). attr training = 0 (the eval and infer programs)
// passes x through.
#include <cstring>

#include "sgrt/quant.h"
#include "sgrt/rng.h"

#include "cpu/op_args.h"
#include "cpu/parallel.h"

namespace sgrt::cpu {

Status k_dropout(const OpArgs& a) {
  const float* x = a.in[0].f();
  float* y = a.out[0].f();
  float p = static_cast<float>(a.attrs->f("p"));
  if (!a.attrs->i("training") || p == 0.f) {
    if (y != x) std::memcpy(y, x, sizeof(float) * a.in[0].n);
    return Status::Ok();
  }
  uint64_t seed = static_cast<uint64_t>(a.attrs->i("seed"));
  uint64_t step = static_cast<uint64_t>(a.in[1].i32()[kStep]);
  uint64_t offset = static_cast<uint64_t>(a.attrs->i("offset"));
  float keep_scale = 1.f / (1.f - p);
  parallel_for(a.in[0].n, 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      y[i] = rng_uniform(seed, step, offset + static_cast<uint64_t>(i)) >= p ? x[i] * keep_scale : 0.f;
  });
  return Status::Ok();
}

}  // namespace sgrt::cpu
