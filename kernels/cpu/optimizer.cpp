// Optimizer ops: learning-rate schedule, the gradients' finiteness and global
// norm (for clipping), the step counter and a low-precision master's working
// copy; the updates themselves are in optimizer_update.cpp. The train state's
// slots are in sgrt/quant.h; updates skip a step check_finite flagged.
#include <cmath>

#include "sgrt/quant.h"

#include "cpu/optimizer_state.h"
#include "cpu/optimizer_step.h"
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
      // One pass: the sum of squares is finite exactly when every gradient is
      // (squares of finite floats cannot overflow a double). Each chunk sums in
      // row_reduce.h's 16 lanes (one chain of dependent adds was the op's time),
      // at the CPU's widest vectors, and the chunks add in chunk order: the same
      // norm on any thread count or ISA.
      double sumsq = 0;
      if (at.i("norms", 0)) {  // low-precision gradients: quantize_grad left each one's norm
        for (size_t k = 1; k < a.in.size(); ++k) {
          double norm = a.in[k].f()[kOptGradNorm];
          sumsq += norm * norm;
        }
      }
      for (size_t k = 1; k < a.in.size() && !at.i("norms", 0); ++k) {
        const float* g = a.in[k].f();
        int64_t n = a.in[k].n, chunks = (n + kGrain - 1) / kGrain;
        double* part = static_cast<double*>(thread_scratch(3, static_cast<size_t>(chunks) * sizeof(double)));
        parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
          part[b / kGrain] = grad_sum_squares(g + b, e - b);
        });
        for (int64_t c = 0; c < chunks; ++c) sumsq += part[c];
      }
      bool finite = std::isfinite(sumsq);
      int32_t* ts = a.out[0].i32();
      ts[kSkipStep] = !finite;
      ts[kNonfiniteRun] = finite ? 0 : ts[kNonfiniteRun] + 1;
      ts[kNonfiniteTotal] += !finite;
      // Clipping by global norm as torch.nn.utils.clip_grad_norm_: g *= min(1, clip / (norm + 1e-6)).
      double clip = at.f("clip", 0.0), norm = std::sqrt(sumsq);
      a.out[1].f()[0] = finite && clip > 0 ? static_cast<float>(std::min(1.0, clip / (norm + 1e-6))) : 1.f;
      return Status::Ok();
    }
    case OpCode::SgdUpdate: return sgd_update(a);
    case OpCode::QuantizeGrad: return quantize_grad(a);
    case OpCode::AdamwUpdate: return adamw_update(a);
    case OpCode::Dequantize: {
      int slot = static_cast<int>(at.i("slot"));
      const float inv = 1.f / a.in[1].f()[slot];
      float* out = a.out[0].f();
      parallel_for(a.in[0].n, kGrain, [&](int64_t b, int64_t e) {
        load_span(a.in[0].type->dtype, a.in[0].data, b, e - b, inv, out + b);
      });
      return Status::Ok();
    }
    default:
      return Status::Runtime("optimizer kernel given " + std::string(op_info(a.code).name));
  }
}

}  // namespace sgrt::cpu
