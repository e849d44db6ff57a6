#include "table.h"

#include <algorithm>
#include <cstdint>

#include "lowering.h"
#include "sgrt/kernel_table.h"
#include "sgrt/quant.h"
#include "sgrt/scale_spec.h"

namespace sgrt::vk {

uint32_t groups_for(uint64_t n, const KernelOptions& o, uint32_t local) {
  return static_cast<uint32_t>(std::clamp<uint64_t>((n + local - 1) / local, 1, o.max_groups));
}

namespace {

constexpr uint32_t kMaxAxes = 8;

constexpr uint32_t kReduceLocal = 64;  // reduce_axes.comp's local size

// strided.glsl's axes (sgrt/shape.h's MergedAxes) into the push constants from axis `first`.
Status put_axes(const Ctx& c, const MergedAxes& a, uint32_t first, Push* p) {
  if (first + a.dim.size() > kMaxAxes)
    return Status::Unsupported("the vulkan backend indexes at most " + std::to_string(kMaxAxes) + " non-unit axes");
  for (size_t k = 0; k < a.dim.size(); ++k) {
    p->dim[first + k] = static_cast<uint32_t>(a.dim[k]);
    p->stride[first + k] = static_cast<uint32_t>(a.stride[k]);
  }
  return Status::Ok();
}

AxisSplit split(const Ctx& c, int64_t def_axis) {
  const Shape& xs = c.in(0).type.shape;
  int64_t axis = 0;
  normalize_axis(c.op.attrs.i("axis", def_axis), static_cast<int64_t>(xs.size()), &axis);
  return split_at_axis(xs, axis);
}

Status elementwise(const Ctx& c, Dispatch* d, std::vector<Dispatch>*) {
  d->shader = "elementwise";
  for (size_t i = 0; i < c.op.in.size(); ++i) d->push.off[i] = c.word(c.in(i));
  d->push.off[2] = c.word(c.out(0));
  d->push.n = static_cast<uint32_t>(numel(c.out(0).type.shape));
  d->push.f[0] = static_cast<float>(c.op.code == OpCode::Fill ? c.op.attrs.f("value") : c.op.attrs.f("alpha"));
  d->groups[0] = groups_for(d->push.n, c.opts);
  return Status::Ok();
}

// pad: zeros over y, then gather.comp's scatter variant writes x into y's window
// (walking x's axes with y's strides).
Status pad(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out) {
  const Shape& xs = c.in(0).type.shape;
  const Shape& ys = c.out(0).type.shape;
  Dispatch zero = *d;
  zero.op = static_cast<uint32_t>(OpCode::Fill);
  zero.shader = "elementwise";
  zero.push.off[2] = c.word(c.out(0));
  zero.push.n = static_cast<uint32_t>(numel(ys));
  zero.groups[0] = groups_for(zero.push.n, c.opts);
  out->push_back(zero);
  std::vector<int64_t> st = row_major_strides(ys);
  MergedAxes axes;
  for (size_t k = 0; k < xs.size(); ++k) axes.add(xs[k], st[k]);
  SG_TRY(put_axes(c, axes, 0, &d->push));
  d->shader = "gather";
  d->push.off[0] = c.word(c.in(0));
  d->push.off[2] = c.word(c.out(0)) + static_cast<uint32_t>(row_major_offset(c.op.attrs.ints("before"), ys));
  d->push.n = static_cast<uint32_t>(numel(xs));
  d->push.p[0] = static_cast<uint32_t>(axes.dim.size());
  d->groups[0] = groups_for(d->push.n, c.opts);
  return Status::Ok();
}

Status gather(const Ctx& c, Dispatch* d, std::vector<Dispatch>*) {
  const Shape& xs = c.in(0).type.shape;
  const Shape& ys = c.out(0).type.shape;
  std::vector<int64_t> st;
  uint32_t base = 0;
  if (c.op.code == OpCode::Slice) {  // x's strides from the window's first element
    st = row_major_strides(xs);
    base = static_cast<uint32_t>(row_major_offset(c.op.attrs.ints("starts"), xs));
  } else if (c.op.code == OpCode::Transpose) {
    const std::vector<int64_t>& perm = c.op.attrs.ints("perm");
    std::vector<int64_t> xst = row_major_strides(xs);
    for (int64_t a : perm) st.push_back(xst[a]);
  } else if (c.op.code == OpCode::BroadcastTo) {
    st = broadcast_strides(xs, ys);
  } else {  // reshape: a flat copy
    st = row_major_strides(ys);
  }
  MergedAxes axes;
  for (size_t k = 0; k < ys.size(); ++k) axes.add(ys[k], st[k]);
  SG_TRY(put_axes(c, axes, 0, &d->push));
  d->shader = "gather";
  d->push.off[0] = c.word(c.in(0)) + base;
  d->push.off[2] = c.word(c.out(0));
  d->push.n = static_cast<uint32_t>(numel(ys));
  d->push.p[0] = static_cast<uint32_t>(axes.dim.size());
  d->groups[0] = groups_for(d->push.n, c.opts);
  return Status::Ok();
}

// reduce_axes.comp: kept axes enumerate the outputs, reduced axes the terms.
Status reduce_axes(const Ctx& c, const MergedAxes& kept, const MergedAxes& red, float divisor, Dispatch* d) {
  SG_TRY(put_axes(c, kept, 0, &d->push));
  SG_TRY(put_axes(c, red, static_cast<uint32_t>(kept.dim.size()), &d->push));
  d->shader = "reduce_axes";
  d->push.off[0] = c.word(c.in(0));
  d->push.off[2] = c.word(c.out(0));
  d->push.n = static_cast<uint32_t>(numel(c.out(0).type.shape));
  d->push.p[0] = static_cast<uint32_t>(kept.dim.size());
  d->push.p[1] = static_cast<uint32_t>(red.dim.size());
  d->push.f[0] = divisor;
  d->groups[0] = groups_for(d->push.n, c.opts, kReduceLocal);
  return Status::Ok();
}

Status reduce(const Ctx& c, Dispatch* d, std::vector<Dispatch>*) {
  AxisSplit s = split(c, 0);
  MergedAxes kept, red;
  kept.add(s.outer, s.n * s.inner);
  kept.add(s.inner, 1);
  red.add(s.n, s.inner);
  return reduce_axes(c, kept, red, c.op.code == OpCode::ReduceMean ? static_cast<float>(s.n) : 1.f, d);
}

Status sum_to(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out) {
  MergedAxes kept, red;
  sum_to_axes(c.in(0).type.shape, c.out(0).type.shape, &kept, &red);
  SG_TRY(reduce_axes(c, kept, red, 1.f, d));
  // Column sums in two passes, in the CPU's chunks (sgrt/column_sums.h).
  if (chunked_columns(red)) column_chunks(c, red.dim[0], d->push.n, 1, kReduceLocal, &d->push.p[2], d, out);
  return Status::Ok();
}

Status lanes(const Ctx& c, Dispatch* d, std::vector<Dispatch>*) {
  AxisSplit s = split(c, c.op.code == OpCode::ReduceMaxGrad ? 0 : -1);
  d->shader = "lanes";
  d->push.off[0] = c.word(c.in(0));
  if (c.op.in.size() > 1) d->push.off[1] = c.word(c.in(1));
  if (c.op.in.size() > 2) d->push.off[3] = c.word(c.in(2));
  d->push.off[2] = c.word(c.out(0));
  d->push.n = static_cast<uint32_t>(s.outer * s.inner);
  d->push.p[0] = static_cast<uint32_t>(s.n);
  d->push.p[1] = static_cast<uint32_t>(s.inner);
  d->groups[0] = groups_for(d->push.n, c.opts);
  return Status::Ok();
}

Status classifier(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out) {
  const Shape& zs = c.in(0).type.shape;
  const bool masked = c.op.code == OpCode::MaskedXent || c.op.code == OpCode::MaskedXentGrad;
  const bool grad = c.op.code == OpCode::SoftmaxXentGrad || c.op.code == OpCode::MaskedXentGrad;
  d->shader = "classifier";
  d->push.off[0] = c.word(c.in(0));
  d->push.off[1] = c.word(c.in(1));
  if (masked) d->push.off[4] = c.word(c.in(2));
  if (grad) d->push.off[3] = c.word(c.in(masked ? 3 : 2));
  d->push.off[2] = c.word(c.out(0));
  d->push.p[0] = static_cast<uint32_t>(zs[0]);
  d->push.p[1] = static_cast<uint32_t>(zs[1]);
  // Invocations per row (classifier.comp's ROW_THREADS): a 10-class head's row
  // is one invocation's work, a vocabulary's a workgroup's.
  d->size = zs[1] <= 32 ? 1 : zs[1] <= 4096 ? 32 : kLocal;
  d->groups[0] = groups_for(static_cast<uint64_t>(zs[0]) * d->size, c.opts);
  if (grad) return Status::Ok();
  // The loss and accuracy: the rows' terms side by side, then one workgroup sums them.
  d->push.p[2] = c.scratch->take(static_cast<uint32_t>(zs[0]), d);
  Dispatch rows = *d;
  rows.op |= 1u << 8;
  out->push_back(std::move(rows));
  d->groups[0] = 1;
  d->size = kLocal;  // the sum has no rows: one pipeline whatever the class count
  return Status::Ok();
}

Status optimizer(const Ctx& c, Dispatch* d, std::vector<Dispatch>*) {  // lr_schedule, step_increment
  const Attrs& at = c.op.attrs;
  d->shader = "optimizer";
  d->push.off[0] = c.word(c.in(0));
  d->push.off[2] = c.word(c.out(0));
  d->push.f[0] = static_cast<float>(at.f("lr"));
  d->push.f[1] = static_cast<float>(at.f("min_lr_ratio"));
  d->push.p[0] = static_cast<uint32_t>(at.i("warmup"));
  d->push.p[1] = static_cast<uint32_t>(at.i("schedule"));
  return Status::Ok();
}

// check_finite (check_finite.comp): one workgroup per gradient, side by side
// (each writes only its own two scratch words: no barrier between them), then
// one dispatch that adds their sums in gradient order and counts. With attr
// norms the inputs are optimizer scales holding each gradient's norm.
Status check_finite(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out) {
  bool norms = c.op.attrs.i("norms", 0) != 0;
  const uint32_t grads = static_cast<uint32_t>(c.op.in.size() - 1);
  d->shader = "check_finite";
  d->op = 1;
  d->push.off[4] = c.word(c.in(0));
  d->push.off[5] = c.word(c.out(1));
  d->push.f[0] = static_cast<float>(c.op.attrs.f("clip", 0.0));
  d->push.n = grads;
  d->push.p[0] = c.scratch->take(2 * grads, d);
  for (uint32_t k = 0; k < grads; ++k) {
    const TensorInfo& g = c.in(k + 1);
    Dispatch one;
    one.shader = "check_finite";
    one.push.off[0] = c.word(g) + (norms ? kOptGradNorm : 0);
    one.push.n = norms ? 1 : static_cast<uint32_t>(numel(g.type.shape));
    one.push.p[0] = d->push.p[0] + 2 * k;
    one.reads = {{g.offset, g.offset + g.bytes}};
    one.writes = {{kScratchBase + 4ull * one.push.p[0], kScratchBase + 4ull * (one.push.p[0] + 2)}};
    out->push_back(std::move(one));
  }
  return Status::Ok();
}

Status matmul(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out) {
  d->push.off[1] = c.word(c.in(1));
  SG_TRY(gemm_grid(c, c.in(0).type.shape, c.in(1).type.shape, c.opts.coop, true, d));
  SG_TRY(split_k(c, d, out));
  return fuse_epilogue(c, d);
}

}  // namespace

const std::vector<KernelEntry<Lower>>& kernel_table() {
  using Match = KernelMatch;
  using D = DType;
  const D f = D::f32, i = D::i32, q8 = D::q8_0, q4 = D::q4_1;
  static const std::vector<KernelEntry<Lower>> t = with_elementwise<Lower>(kBackendVulkan, elementwise, {
      {OpCode::MatMul, {f, f}, {f}, matmul},
      {OpCode::Fill, {}, {f}, elementwise},
      {OpCode::Reshape, {f}, {f}, gather},           {OpCode::Reshape, {i}, {i}, gather},
      {OpCode::Transpose, {f}, {f}, gather},         {OpCode::BroadcastTo, {f}, {f}, gather},
      {OpCode::SumTo, {f}, {f}, sum_to},
      {OpCode::Slice, {f}, {f}, gather},             {OpCode::Pad, {f}, {f}, pad},
      {OpCode::ReduceSum, {f}, {f}, reduce},         {OpCode::ReduceMean, {f}, {f}, reduce},
      {OpCode::ReduceMax, {f}, {f}, reduce},         {OpCode::ReduceMaxGrad, {f, f, f}, {f}, lanes},
      {OpCode::Softmax, {f}, {f}, lanes},            {OpCode::LogSoftmax, {f}, {f}, lanes},
      {OpCode::SoftmaxGrad, {f, f}, {f}, lanes},     {OpCode::LogSoftmaxGrad, {f, f}, {f}, lanes},
      {OpCode::SoftmaxXent, {f, i}, {f}, classifier}, {OpCode::SoftmaxXentGrad, {f, i, f}, {f}, classifier},
      {OpCode::Accuracy, {f, i}, {f}, classifier},
      {OpCode::MaskedXent, {f, i, f}, {f}, classifier}, {OpCode::MaskedXentGrad, {f, i, f, f}, {f}, classifier},
      {OpCode::LrSchedule, {i}, {f}, optimizer},     {OpCode::StepIncrement, {i}, {i}, optimizer},
      // Any dtypes: the shape rule admits only what the lowering handles.
      {OpCode::SgdUpdate, {}, {}, update, Match::any},
      {OpCode::AdamwUpdate, {}, {}, update, Match::any},
      {OpCode::Dequantize, {}, {}, dequantize, Match::any},
      {OpCode::QuantizeGrad, {}, {}, quantize_grad, Match::any},
      {OpCode::Quantize, {}, {}, quantize, Match::any},
      {OpCode::QMatMul, {}, {}, qmatmul, Match::any},
      {OpCode::DgeGrad, {f, f, i}, {f}, dge_grad},   {OpCode::ClampOutliers, {f}, {f, f}, clamp_outliers},
      {OpCode::CheckFinite, {i, f}, {i, f}, check_finite, Match::variadic},
      {OpCode::DequantMatMul, {f, q8}, {f}, dequant_matmul}, {OpCode::DequantMatMul, {f, q4}, {f}, dequant_matmul},
      {OpCode::Embedding, {q8, i}, {f}, embedding},  {OpCode::Embedding, {q4, i}, {f}, embedding},
      {OpCode::Embedding, {f, i}, {f}, embedding},   {OpCode::EmbeddingGrad, {i, f}, {f}, embedding},
      {OpCode::LayerNorm, {f, f, f}, {f, f, f}, norm}, {OpCode::LayerNormGrad, {f, f, f, f, f}, {f, f, f}, norm},
      {OpCode::RmsNorm, {f, f}, {f, f}, norm},       {OpCode::RmsNormGrad, {f, f, f, f}, {f, f}, norm},
      {OpCode::Rope, {f}, {f}, rope},                {OpCode::Dropout, {f, i}, {f}, dropout},
      {OpCode::Attention, {f, f, f}, {f, f}, attention},
      {OpCode::AttentionGrad, {f, f, f, f, f, f}, {f, f, f}, attention},
      {OpCode::RopeAt, {f, i}, {f}, rope},
      {OpCode::KvAttention, {f, f, f, f, f, i}, {f, f, f}, attention},
      {OpCode::Im2col, {f}, {f}, im2col},            {OpCode::Col2im, {f}, {f}, im2col},
      {OpCode::RunningStat, {f, f}, {f, f}, running_stat},
  });
  return t;
}

namespace {

std::string signature(const OpInfoLoaded& op, const std::vector<TensorInfo>& ts) {
  std::string s = std::string(op_info(op.code).name) + "(";
  for (size_t k = 0; k < op.in.size(); ++k) s += std::string(k ? ", " : "") + type_str(ts[op.in[k]].type);
  return s + ")";
}

int64_t tiles(int64_t m, int64_t n, int64_t tile) { return ((m + tile - 1) / tile) * ((n + tile - 1) / tile); }

}  // namespace

uint32_t Scratch::take_region(uint32_t n) {
  region_need = std::max(region_need, n);
  return 0;
}

uint32_t Scratch::take(uint32_t n, Dispatch* d) {
  uint32_t first = words;
  words += n;
  Range r{kScratchBase + 4ull * first, kScratchBase + 4ull * words};
  d->reads.push_back(r);
  d->writes.push_back(r);
  return first;
}

Status gemm_grid(const Ctx& c, const Shape& as, const Shape& bs, bool coop, bool thin, Dispatch* d) {
  int64_t ar = numel(as) / as.back(), ac = as.back(), br = numel(bs) / bs.back(), bc = bs.back();
  bool ta = c.op.attrs.i("trans_a"), tb = c.op.attrs.i("trans_b");
  int64_t m = ta ? ac : ar, n = tb ? br : bc, k = ta ? ar : ac;
  d->op = (ta ? 1u : 0u) | (tb ? 2u : 0u);
  d->push.p[0] = static_cast<uint32_t>(m);
  d->push.p[1] = static_cast<uint32_t>(n);
  d->push.p[2] = static_cast<uint32_t>(k);
  d->push.dim[0] = static_cast<uint32_t>(ac);
  d->push.dim[1] = static_cast<uint32_t>(bc);
  d->push.off[0] = c.word(c.in(0));
  d->push.off[2] = c.word(c.out(0));
  if (!coop && thin && c.opts.gemm_thin && std::min(m, n) <= kThinSide) {
    // A workgroup per kThinLong indices of the long side.
    d->shader = "gemm_thin";
    d->op |= n <= m ? kThinN : 0u;
    d->groups[0] = static_cast<uint32_t>((std::max(m, n) + kThinLong - 1) / kThinLong);
    if (d->groups[0] > c.opts.max_groups)
      return Status::Unsupported("matmul of " + std::to_string(m) + "x" + std::to_string(n) + " exceeds the dispatch grid");
    return Status::Ok();
  }
  const bool small = !coop && tiles(m, n, 128) < static_cast<int64_t>(c.opts.gemm_small_grid);
  uint32_t tile = coop || small ? 64 : 128;  // gemm_coop.comp or gemm_tiled64.comp, gemm_tiled.comp
  d->shader = coop ? "gemm_coop" : small ? "gemm_tiled64" : "gemm_tiled";
  d->size = coop ? c.opts.coop_threads : 0;
  d->groups[0] = static_cast<uint32_t>((n + tile - 1) / tile);
  d->groups[1] = static_cast<uint32_t>((m + tile - 1) / tile);
  if (d->groups[0] > c.opts.max_groups || d->groups[1] > c.opts.max_groups)
    return Status::Unsupported("matmul of " + std::to_string(m) + "x" + std::to_string(n) + " exceeds the dispatch grid");
  return Status::Ok();
}

Status split_k(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out, uint32_t region_used) {
  const int64_t m = d->push.p[0], n = d->push.p[1], k = d->push.p[2];
  const int64_t groups = int64_t{d->groups[0]} * d->groups[1];
  if (d->shader == "gemm_coop" || d->shader == "gemm_thin" || groups >= int64_t{c.opts.split_k_grid} || k < 2 * kSplitPiece)
    return Status::Ok();
  int64_t splits = std::min((int64_t{c.opts.split_k_grid} + groups - 1) / groups, k / kSplitPiece);
  const int64_t piece = ((k + splits - 1) / splits + kFp8Tile - 1) / kFp8Tile * kFp8Tile;
  splits = (k + piece - 1) / piece;
  const int64_t words = splits * m * n;
  if (splits < 2 || words + region_used > INT32_MAX) return Status::Ok();
  const uint32_t partial = c.scratch->take_region(static_cast<uint32_t>(region_used + words)) + region_used;
  const Range partials{kScratchBase + 4ull * partial, kScratchBase + 4ull * (partial + words)};
  d->push.dim[5] = partial;
  d->push.dim[6] = static_cast<uint32_t>(splits);
  d->push.dim[7] = static_cast<uint32_t>(piece);
  Dispatch sums = *d;
  sums.op |= kSplitSums;
  sums.groups[2] = static_cast<uint32_t>(splits);
  sums.writes = {partials};
  out->push_back(std::move(sums));
  d->op |= kSplitReduce;
  d->groups[0] = groups_for(static_cast<uint64_t>(m * n), c.opts);
  d->groups[1] = 1;
  d->reads.push_back(partials);
  return Status::Ok();
}

Status fuse_epilogue(const Ctx& c, Dispatch* d) {
  if (c.epi.out < 0) return Status::Ok();
  if (d->shader == "gemm_coop") return Status::Unsupported("gemm_coop has no epilogue for a fused scale or add");
  const TensorInfo& out = c.ts[c.epi.out];
  d->push.off[2] = c.word(out);
  d->writes = {{out.offset, out.offset + out.bytes}};
  if (c.epi.addend < 0) {
    d->op |= kEpiScale;
    d->push.f[0] = c.epi.alpha;
    return Status::Ok();
  }
  const TensorInfo& addend = c.ts[c.epi.addend];
  d->op |= kEpiAdd;
  d->push.stride[0] = c.word(addend);
  d->reads.push_back({addend.offset, addend.offset + addend.bytes});
  return Status::Ok();
}

void column_chunks(const Ctx& c, int64_t terms, int64_t outputs, uint32_t planes, uint32_t local, uint32_t* first_word,
                   Dispatch* d, std::vector<Dispatch>* out) {
  const int64_t chunks = (terms + kColumnChunk - 1) / kColumnChunk;
  const uint32_t words = static_cast<uint32_t>(chunks * outputs * planes);
  *first_word = c.scratch->take_region(words);
  const Range sums{kScratchBase + 4ull * *first_word, kScratchBase + 4ull * (*first_word + words)};
  Dispatch part = *d;
  part.op |= 1u << 8;
  part.groups[0] = groups_for(static_cast<uint64_t>(chunks * outputs), c.opts, local);
  part.writes = {sums};
  out->push_back(std::move(part));
  d->op |= 2u << 8;
  d->groups[0] = groups_for(static_cast<uint64_t>(outputs), c.opts, local);
  d->reads.push_back(sums);
}

Status lower_op(const OpInfoLoaded& op, const std::vector<TensorInfo>& ts, uint32_t tag, const KernelOptions& opts,
                Scratch* scratch, std::vector<Dispatch>* out, const Epilogue& epi) {
  std::vector<DType> in, outs;
  Dispatch d;
  for (int id : op.in) { in.push_back(ts[id].type.dtype); d.reads.push_back({ts[id].offset, ts[id].offset + ts[id].bytes}); }
  for (int id : op.out) { outs.push_back(ts[id].type.dtype); d.writes.push_back({ts[id].offset, ts[id].offset + ts[id].bytes}); }
  if (epi.out >= 0 && op.code != OpCode::MatMul && op.code != OpCode::QMatMul)
    return Status::Invalid(op.loc + ": only a product takes a fused epilogue, not " + signature(op, ts));
  Lower fn = find_kernel(kernel_table(), op.code, in, outs);
  if (!fn) return Status::Unsupported(op.loc + ": the vulkan backend has no kernel for " + signature(op, ts));
  for (int id : op.in)
    if (ts[id].offset % 4) return Status::Unsupported(op.loc + ": " + signature(op, ts) + ": tensor " + ts[id].name + " is not 4-byte aligned in the arena");
  for (int id : op.out)
    if (ts[id].offset % 4) return Status::Unsupported(op.loc + ": " + signature(op, ts) + ": tensor " + ts[id].name + " is not 4-byte aligned in the arena");
  d.op = static_cast<uint32_t>(op.code);  // the shaders specialized on ops.glsl's codes
  d.push.tag = tag;
  size_t first = out->size();
  SG_TRY(fn(Ctx{op, ts, opts, scratch, epi}, &d, out).with_context(op.loc + ": " + signature(op, ts)));
  out->push_back(std::move(d));
  for (size_t k = first; k < out->size(); ++k) (*out)[k].push.tag = tag;
  return Status::Ok();
}

}  // namespace sgrt::vk
