// The transformer ops (semantics: kernels/cpu/embedding.cpp, norm.cpp, rope.cpp,
// dropout.cpp, running_stat.cpp): embedding.comp, norm.comp, rope.comp, dropout.comp,
// running_stat.comp.
#include <algorithm>
#include <cmath>

#include "lowering.h"
#include "sgrt/quant.h"

namespace sgrt::vk {
namespace {

constexpr uint32_t kNormLocal = 128;  // norm.comp's workgroup
// norm.comp's invocations per row: 32 up to this many columns (4 rows a
// workgroup), else 128 (one row).
constexpr int64_t kNormNarrowRow = 1024;
// Specialization OP | kPhase1: a shader's second variant (embedding.comp: the
// zero fill before the gradient's sums; rope.comp: interleaved pairs); kPhase2
// its third (embedding.comp: the links between a repeated id's positions).
constexpr uint32_t kPhase1 = 1u << 8, kPhase2 = 2u << 8;

uint32_t u32(int64_t v) { return static_cast<uint32_t>(v); }

}  // namespace

// embedding: (table [V, D], f32 or a block format, ids) -> [..., D]; embedding_grad: (ids, dy) -> [V, D]
// in three dispatches over 2N scratch words (embedding.comp): zero, link each
// position to the next with its id, sum each id's chain.
Status embedding(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out) {
  bool fwd = c.op.code == OpCode::Embedding;
  const Shape& ts = fwd ? c.in(0).type.shape : c.out(0).type.shape;
  const TensorInfo& ids = fwd ? c.in(1) : c.in(0);
  d->shader = "embedding";
  d->push.off[0] = c.word(fwd ? c.in(0) : c.out(0));
  d->push.off[1] = c.word(ids);
  d->push.off[2] = c.word(fwd ? c.out(0) : c.in(1));
  d->push.n = u32(numel(ids.type.shape));
  d->push.p[0] = u32(ts[0]);
  d->push.p[1] = u32(ts[1]);
  if (fwd) {
    const TensorType& table = c.in(0).type;  // f32, or q8_0 / q4_1 blocks decoded as gathered
    d->op |= block_kind(table.dtype) << 10;
    d->push.p[2] = u32(dtype_bytes(table.dtype, ts[1]));
    d->groups[0] = groups_for(numel(c.out(0).type.shape), c.opts);
    return Status::Ok();
  }
  const int64_t n = d->push.n;
  d->push.p[2] = c.scratch->take(u32(2 * n), d);
  Dispatch zero = *d;
  zero.op |= kPhase1;
  zero.groups[0] = groups_for(std::max(ts[0] * ts[1], n), c.opts);
  out->push_back(zero);
  Dispatch link = *d;
  link.op |= kPhase2;
  link.groups[0] = groups_for(n, c.opts);
  out->push_back(link);
  d->groups[0] = groups_for(n * ts[1], c.opts);
  return Status::Ok();
}

// layer_norm / rms_norm and their gradients: rows over 32 or 128 invocations
// each; the gradients add a column pass for dgain (and dbias).
Status norm(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out) {
  OpCode op = c.op.code;
  bool layer = op == OpCode::LayerNorm || op == OpCode::LayerNormGrad;
  const Shape& xs = c.in(0).type.shape;
  int64_t cols = xs.back(), rows = numel(xs) / cols;
  Push& p = d->push;
  d->shader = "norm";
  p.n = u32(rows);
  p.p[2] = u32(cols);
  p.f[0] = static_cast<float>(c.op.attrs.f("eps"));
  p.off[0] = c.word(c.in(0));
  p.off[1] = c.word(c.in(1));
  uint32_t row_threads = cols <= kNormNarrowRow ? 32 : kNormLocal;
  d->size = row_threads;
  int64_t rows_per_group = kNormLocal / row_threads;
  d->groups[0] = static_cast<uint32_t>(std::min<int64_t>((rows + rows_per_group - 1) / rows_per_group, c.opts.max_groups));
  if (op == OpCode::LayerNorm || op == OpCode::RmsNorm) {  // (x, g[, b]) -> (y, [mean,] rstd)
    if (layer) p.off[2] = c.word(c.in(2));
    p.off[3] = c.word(c.out(0));
    if (layer) p.off[4] = c.word(c.out(1));
    p.off[5] = c.word(c.out(layer ? 2 : 1));
    return Status::Ok();
  }
  // (x, g, [mean,] rstd, dy) -> (dx, dg[, db])
  size_t k = layer ? 1 : 0;
  if (layer) p.off[2] = c.word(c.in(2));
  p.off[3] = c.word(c.in(2 + k));
  p.off[4] = c.word(c.in(3 + k));
  p.off[5] = c.word(c.out(0));
  p.p[0] = c.word(c.out(1));
  if (layer) p.p[1] = c.word(c.out(2));
  out->push_back(*d);  // the rows: dx
  column_chunks(c, rows, cols, 2, kNormLocal, &d->push.dim[0], d, out);  // dg, db
  return Status::Ok();
}

// x [B, T, H*Dh] (, pos) -> y, each head's pairs rotated: halves, or interleaved (rope.comp).
Status rope(const Ctx& c, Dispatch* d, std::vector<Dispatch>*) {
  if (c.op.attrs.i("interleaved", 0)) d->op |= kPhase1;
  const Shape& xs = c.in(0).type.shape;
  int64_t heads = c.op.attrs.i("n_head"), dh = xs[2] / heads;
  double ratio = std::pow(c.op.attrs.f("base"), -2.0 / static_cast<double>(dh));
  d->shader = "rope";
  d->push.off[0] = c.word(c.in(0));
  if (c.op.code == OpCode::RopeAt) d->push.off[1] = c.word(c.in(1));
  d->push.off[2] = c.word(c.out(0));
  d->push.n = u32(xs[0] * xs[1] * heads * (dh / 2));
  d->push.p[0] = u32(xs[1]);
  d->push.p[1] = u32(heads);
  d->push.p[2] = u32(dh);
  d->push.f[0] = static_cast<float>(ratio);
  d->push.f[1] = static_cast<float>(ratio - static_cast<double>(d->push.f[0]));
  d->push.f[2] = c.op.attrs.i("inverse", 0) ? -1.f : 1.f;
  d->groups[0] = groups_for(d->push.n, c.opts);
  return Status::Ok();
}

// (x, train_state) -> x * mask / (1 - p); passes x through when not training.
Status dropout(const Ctx& c, Dispatch* d, std::vector<Dispatch>*) {
  float p = static_cast<float>(c.op.attrs.f("p"));
  bool drop = c.op.attrs.i("training") != 0 && p != 0.f;
  uint64_t seed = static_cast<uint64_t>(c.op.attrs.i("seed")), offset = static_cast<uint64_t>(c.op.attrs.i("offset"));
  d->shader = "dropout";
  d->push.off[0] = c.word(c.in(0));
  d->push.off[1] = c.word(c.in(1));
  d->push.off[2] = c.word(c.out(0));
  d->push.n = u32(numel(c.in(0).type.shape));
  d->push.p[0] = static_cast<uint32_t>(seed);
  d->push.p[1] = static_cast<uint32_t>(seed >> 32);
  d->push.p[2] = kStep;
  d->push.dim[0] = static_cast<uint32_t>(offset);
  d->push.dim[1] = static_cast<uint32_t>(offset >> 32);
  d->push.f[0] = drop ? p : 0.f;
  d->push.f[1] = drop ? 1.f / (1.f - p) : 1.f;
  d->groups[0] = groups_for(d->push.n, c.opts);
  return Status::Ok();
}

// (stat, running) -> (stat or running, running updated in place).
Status running_stat(const Ctx& c, Dispatch* d, std::vector<Dispatch>*) {
  bool training = c.op.attrs.i("training") != 0;
  d->shader = "running_stat";
  d->push.off[0] = c.word(c.in(0));
  d->push.off[1] = c.word(c.in(1));
  d->push.off[2] = c.word(c.out(0));
  d->push.n = u32(numel(c.in(0).type.shape));
  d->push.p[0] = !training ? 0u : c.op.attrs.i("update", 1) ? 2u : 1u;
  d->push.f[0] = static_cast<float>(c.op.attrs.f("momentum"));
  d->push.f[1] = static_cast<float>(c.op.attrs.f("unbias"));
  d->groups[0] = groups_for(d->push.n, c.opts);
  return Status::Ok();
}

}  // namespace sgrt::vk
