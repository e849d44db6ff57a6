// Optimizer ops: learning-rate schedule, non-finite gradient check, SGD with
// momentum, AdamW (PyTorch's update order), and the step counter. The train
// state's slots are in sgrt/quant.h; updates skip a step check_finite flagged.
#include <cmath>

#include "sgrt/quant.h"

#include "cpu/op_args.h"
#include "cpu/parallel.h"

namespace sgrt::cpu {
namespace {

constexpr int64_t kGrain = 1 << 14;

float scheduled_lr(const Attrs& at, int64_t step, int64_t total) {
  float lr = static_cast<float>(at.f("lr"));
  int64_t warmup = at.i("warmup");
  if (warmup > 0 && step < warmup) return lr * static_cast<float>(step + 1) / static_cast<float>(warmup);
  if (at.i("schedule") == 0) return lr;  // constant
  double span = static_cast<double>(std::max<int64_t>(1, total - warmup));
  double progress = std::min(1.0, static_cast<double>(step - warmup) / span);
  double min_ratio = at.f("min_lr_ratio");
  return static_cast<float>(lr * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + std::cos(M_PI * progress))));
}

}  // namespace

Status k_optimizer(const OpArgs& a) {
  const Attrs& at = *a.attrs;
  switch (a.code) {
    case OpCode::LrSchedule: {
      const int32_t* ts = a.in[0].i32();
      a.out[0].f()[0] = scheduled_lr(at, ts[kStep], ts[kTotalSteps]);
      return Status::Ok();
    }
    case OpCode::StepIncrement:
      a.out[0].i32()[kStep] += 1;
      return Status::Ok();
    case OpCode::CheckFinite: {
      bool finite = true;
      for (size_t k = 1; k < a.in.size() && finite; ++k) {
        const float* g = a.in[k].f();
        for (int64_t i = 0; i < a.in[k].n; ++i)
          if (!std::isfinite(g[i])) { finite = false; break; }
      }
      int32_t* ts = a.out[0].i32();
      ts[kSkipStep] = !finite;
      ts[kNonfiniteRun] = finite ? 0 : ts[kNonfiniteRun] + 1;
      ts[kNonfiniteTotal] += !finite;
      return Status::Ok();
    }
    case OpCode::SgdUpdate: {
      if (a.in[4].i32()[kSkipStep]) return Status::Ok();
      float* p = a.in[0].f();
      const float* g = a.in[1].f();
      float* mom = a.in[2].f();
      float lr = a.in[3].f()[0];
      float mu = static_cast<float>(at.f("momentum")), wd = static_cast<float>(at.f("weight_decay"));
      parallel_for(a.in[0].n, kGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          float gi = g[i] + wd * p[i];
          mom[i] = mu * mom[i] + gi;
          p[i] -= lr * mom[i];
        }
      });
      return Status::Ok();
    }
    case OpCode::AdamwUpdate: {
      if (a.in[5].i32()[kSkipStep]) return Status::Ok();
      float* p = a.in[0].f();
      const float* g = a.in[1].f();
      float* m = a.in[2].f();
      float* v = a.in[3].f();
      float lr = a.in[4].f()[0];
      int64_t t = a.in[5].i32()[kStep] + 1;
      float b1 = static_cast<float>(at.f("beta1")), b2 = static_cast<float>(at.f("beta2"));
      float eps = static_cast<float>(at.f("eps")), wd = static_cast<float>(at.f("weight_decay"));
      float bc1 = 1.f - std::pow(b1, static_cast<float>(t)), bc2 = 1.f - std::pow(b2, static_cast<float>(t));
      float step = lr / bc1, bc2_sqrt = std::sqrt(bc2);
      parallel_for(a.in[0].n, kGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          p[i] *= 1.f - lr * wd;
          m[i] = b1 * m[i] + (1.f - b1) * g[i];
          v[i] = b2 * v[i] + (1.f - b2) * g[i] * g[i];
          p[i] -= step * m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps);
        }
      });
      return Status::Ok();
    }
    default:
      return Status::Runtime("optimizer kernel given " + std::string(op_info(a.code).name));
  }
}

}  // namespace sgrt::cpu
