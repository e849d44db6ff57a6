// Optimizer state levels (compiler/optimizer.cpp; semantics: kernels/cpu/
// optimizer_update.cpp, optimizer.cpp): SGD / AdamW over f32 or low-precision
// parameters, state and gradients (update.comp), a master's working copy
// (optimizer.comp), gradients to FP8 with their norm (quantize_grad.comp).
#include "lowering.h"
#include "sgrt/quant.h"

namespace sgrt::vk {
namespace {

enum UpdatePhase : uint32_t { kUpdateAmax = 1, kUpdateScales, kUpdateStore, kUpdateFinish };
constexpr uint32_t kUpdateScratchWords = 6;  // update.comp: 3 amaxes, 3 scales

bool one_of(DType t, DType a, DType b) { return t == a || t == b; }

}  // namespace

// (param, grad, s1, [s2,] lr, train_state, scales, grad_coef) -> (param, s1, [s2,] scales)
Status update(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out) {
  bool adam = c.op.code == OpCode::AdamwUpdate;
  size_t k = adam ? 1 : 0;  // inputs after the state shift by one for AdamW
  DType w = c.in(0).type.dtype, g = c.in(1).type.dtype, s1 = c.in(2).type.dtype;
  DType s2 = adam ? c.in(3).type.dtype : DType::f32;
  if (!one_of(w, DType::f32, DType::f16) || !one_of(s1, DType::f32, DType::e4m3) || !one_of(s2, DType::f32, DType::f16) ||
      !one_of(g, DType::f32, DType::e5m2))
    return Status::Unsupported("optimizer update: no vulkan kernel for these dtypes");
  const Attrs& at = c.op.attrs;
  Push& p = d->push;
  p.off[0] = c.word(c.in(0));
  p.off[1] = c.word(c.in(1));
  p.off[2] = c.word(c.in(2));
  if (adam) p.off[3] = c.word(c.in(3));
  p.off[4] = c.word(c.in(3 + k));
  p.off[5] = c.word(c.in(4 + k));
  p.p[0] = c.word(c.in(6 + k));
  p.p[1] = c.word(c.in(5 + k));
  d->size = static_cast<uint32_t>(w) | static_cast<uint32_t>(s1) << 4 | static_cast<uint32_t>(s2) << 8 |
            static_cast<uint32_t>(g) << 12;  // update.comp's constant_id 1
  p.n = static_cast<uint32_t>(numel(c.in(0).type.shape));
  p.dim[1] = at.i("scale_w", 0) != 0;
  if (adam) {
    p.f[0] = static_cast<float>(at.f("beta1"));
    p.f[1] = static_cast<float>(at.f("beta2"));
    p.f[2] = static_cast<float>(at.f("eps"));
    p.f[3] = static_cast<float>(at.f("weight_decay"));
  } else {
    p.f[0] = static_cast<float>(at.f("momentum"));
    p.f[1] = static_cast<float>(at.f("weight_decay"));
  }
  d->shader = "update";
  uint32_t code = static_cast<uint32_t>(c.op.code);
  uint32_t units = (p.n + 3) / 4;
  d->groups[0] = groups_for(units, c.opts);
  d->op = code | kUpdateStore << 8;
  if (w == DType::f32 && s1 == DType::f32 && s2 == DType::f32) return Status::Ok();
  // Low-precision state: amaxes, scales, store, finish (update.comp).
  p.dim[0] = c.scratch->take(kUpdateScratchWords, d);
  Dispatch e = *d;
  e.op = code | kUpdateAmax << 8;
  out->push_back(e);
  e.op = code | kUpdateScales << 8;
  e.groups[0] = 1;
  out->push_back(e);
  out->push_back(*d);
  d->op = code | kUpdateFinish << 8;
  d->groups[0] = 1;
  return Status::Ok();
}

// (q, scales) -> q / scales[slot] in f32
Status dequantize(const Ctx& c, Dispatch* d, std::vector<Dispatch>*) {
  DType q = c.in(0).type.dtype;
  if (q != DType::f32 && q != DType::f16 && q != DType::e4m3 && q != DType::e5m2)
    return Status::Unsupported(std::string("dequantize from ") + dtype_name(q));
  d->shader = "optimizer";
  d->push.off[0] = c.word(c.in(0));
  d->push.off[1] = c.word(c.in(1));
  d->push.off[2] = c.word(c.out(0));
  d->push.n = static_cast<uint32_t>(numel(c.in(0).type.shape));
  d->push.p[0] = static_cast<uint32_t>(q);
  d->push.p[1] = static_cast<uint32_t>(c.op.attrs.i("slot"));
  d->groups[0] = groups_for(d->push.n, c.opts);
  return Status::Ok();
}

// (grad f32, scales) -> (codes, scales): amax, partial sums, scale and norm, codes.
Status quantize_grad(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out) {
  DType q = c.out(0).type.dtype;
  if (c.in(0).type.dtype != DType::f32 || (q != DType::e4m3 && q != DType::e5m2 && q != DType::f16))
    return Status::Unsupported(std::string("quantize_grad to ") + dtype_name(q));
  uint64_t n = numel(c.in(0).type.shape);
  uint32_t groups = groups_for(n, c.opts);
  d->shader = "quantize_grad";
  d->push.off[0] = c.word(c.in(0));
  d->push.off[1] = c.word(c.out(0));
  d->push.off[2] = c.word(c.out(1));
  d->push.n = static_cast<uint32_t>(n);
  d->push.p[0] = static_cast<uint32_t>(q);
  d->push.p[1] = groups;
  d->push.dim[0] = c.scratch->take(2 + groups, d);
  d->groups[0] = groups;
  for (uint32_t phase = 0; phase < 3; ++phase) {
    Dispatch e = *d;
    e.op = phase;
    if (phase == 2) e.groups[0] = 1;
    out->push_back(e);
  }
  d->op = 3;
  d->groups[0] = groups_for((n * dtype_bits(q) + 31) / 32, c.opts);
  return Status::Ok();
}

}  // namespace sgrt::vk
