#include "sgrt/shape_infer.h"

#include <algorithm>
#include <string>

#include "sgrt/checked_math.h"
#include "sgrt/im2col.h"
#include "sgrt/op_attrs.h"
#include "sgrt/quant.h"
#include "shape_infer_transformer.h"

namespace sgrt {
namespace {

bool is_float(DType t) { return t != DType::i32 && !dtype_is_block(t); }

Status fail(OpCode code, const std::string& what) {
  return Status::Invalid(std::string(op_info(code).name) + ": " + what);
}

Status expect_float(OpCode code, const std::vector<TensorType>& ins, size_t i) {
  if (!is_float(ins[i].dtype)) return fail(code, "input " + std::to_string(i) + " is " + type_str(ins[i]) + ", expected a float type");
  return Status::Ok();
}

Status same_shapes(OpCode code, const TensorType& a, const TensorType& b) {
  if (a.shape != b.shape) return fail(code, "shape mismatch: " + type_str(a) + " vs " + type_str(b));
  return Status::Ok();
}

// Numpy broadcasting from the right: can `from` be broadcast to `to`?
bool broadcastable(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  size_t off = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[off + i]) return false;
  return true;
}

Status check_dims(OpCode code, const Shape& s) {
  int64_t n;
  if (!checked_numel(s, &n))
    return fail(code, "shape " + shape_str(s) + " has a non-positive dimension or more than 2^40 elements");
  return Status::Ok();
}

// slice (starts, sizes) and pad (before, after): one entry per axis each.
Status infer_window(OpCode code, const TensorType& x, const Attrs& attrs, TensorType* out) {
  bool slice = code == OpCode::Slice;
  const char* an = slice ? "starts" : "before";
  const char* bn = slice ? "sizes" : "after";
  const std::vector<int64_t>& a = attrs.ints(an);
  const std::vector<int64_t>& b = attrs.ints(bn);
  if (a.size() != x.shape.size() || b.size() != x.shape.size())
    return fail(code, std::string(an) + " " + shape_str(a) + " and " + bn + " " + shape_str(b) + " need one entry per axis of " +
                          type_str(x));
  *out = x;
  for (size_t k = 0; k < a.size(); ++k) {
    std::string axis = "axis " + std::to_string(k) + " of " + type_str(x) + ": ";
    if (slice && (a[k] < 0 || b[k] < 1 || a[k] > x.shape[k] - b[k]))
      return fail(code, axis + "elements " + std::to_string(a[k]) + " .. " + std::to_string(a[k]) + " + " + std::to_string(b[k]) +
                            " - 1 are not inside 0 .. " + std::to_string(x.shape[k] - 1));
    if (!slice && (a[k] < 0 || b[k] < 0 || a[k] > (int64_t{1} << 40) || b[k] > (int64_t{1} << 40)))
      return fail(code, axis + "padding " + std::to_string(a[k]) + " before and " + std::to_string(b[k]) +
                            " after must be non-negative and at most 2^40");
    out->shape[k] = slice ? b[k] : a[k] + x.shape[k] + b[k];
  }
  return check_dims(code, out->shape);
}

Status infer_matmul(OpCode code, const TensorType& a, const TensorType& b, const Attrs& attrs, TensorType* out) {
  // Both operands are seen as 2-D: [product of leading dims, last dim].
  if (a.shape.size() < 2 || b.shape.size() < 2)
    return fail(code, "expects operands of rank >= 2, got " + type_str(a) + " @ " + type_str(b));
  int64_t rows = numel(a.shape) / a.shape.back(), cols = a.shape.back();
  int64_t brows = numel(b.shape) / b.shape.back(), bcols = b.shape.back();
  bool ta = attrs.i("trans_a"), tb = attrs.i("trans_b");
  int64_t m = ta ? cols : rows, ka = ta ? rows : cols;
  int64_t kb = tb ? bcols : brows, n = tb ? brows : bcols;
  if (ka != kb)
    return fail(code, "contracting dimensions differ: " + type_str(a) + (ta ? "^T" : "") + " @ " + type_str(b) +
                          (tb ? "^T" : "") + " (" + std::to_string(ka) + " vs " + std::to_string(kb) + ")");
  out->dtype = DType::f32;
  if (ta) out->shape = {m, n};
  else { out->shape = a.shape; out->shape.back() = n; }
  return Status::Ok();
}

Status infer_reduce(OpCode code, const TensorType& x, const Attrs& attrs, TensorType* out) {
  int64_t axis;
  if (!normalize_axis(attrs.i("axis"), x.shape.size(), &axis))
    return fail(code, "axis " + std::to_string(attrs.i("axis")) + " out of range for " + type_str(x));
  out->dtype = x.dtype;
  out->shape = x.shape;
  if (attrs.i("keepdims")) out->shape[axis] = 1;
  else out->shape.erase(out->shape.begin() + axis);
  return Status::Ok();
}

Status infer_classifier(OpCode code, const TensorType& logits, const TensorType& labels, TensorType* out) {
  if (logits.shape.size() != 2 || !is_float(logits.dtype))
    return fail(code, "logits must be float [N, C], got " + type_str(logits));
  if (labels.dtype != DType::i32 || labels.shape != Shape{logits.shape[0]})
    return fail(code, "labels must be i32[" + std::to_string(logits.shape[0]) + "], got " + type_str(labels));
  *out = TensorType{{}, DType::f32};
  return Status::Ok();
}

Status check_opt_scales(OpCode code, const TensorType& t) {
  if (t.dtype != DType::f32 || t.shape != Shape{kOptScaleLen})
    return fail(code, "optimizer scales must be f32[" + std::to_string(kOptScaleLen) + "], got " + type_str(t));
  return Status::Ok();
}

Status check_train_state(OpCode code, const TensorType& t) {
  if (t.dtype != DType::i32 || t.shape != Shape{kTrainStateLen})
    return fail(code, "train_state must be i32[" + std::to_string(kTrainStateLen) + "], got " + type_str(t));
  return Status::Ok();
}

// The spec carries what the quantize produces (dtype, granularity) and the
// length of the amax history its state holds.
Status infer_quantize(OpCode code, const std::vector<TensorType>& ins, const ScaleSpec* spec, std::vector<TensorType>* outs) {
  if (ins[0].dtype != DType::f32 || ins[0].shape.empty()) return fail(code, "expects an f32 tensor of rank >= 1, got " + type_str(ins[0]));
  if (ins[1].dtype != DType::f32 || ins[1].shape.size() != 1 || ins[1].shape[0] < kStateHeader)
    return fail(code, "state must be f32[>= " + std::to_string(kStateHeader) + "], got " + type_str(ins[1]));
  if (!spec) return fail(code, "has no scale spec");
  if (Status st = check_quant_spec(*spec); !st.ok()) return fail(code, st.message());
  if (ins[1].shape[0] != kStateHeader + spec->history) return fail(code, "state size does not match the amax history length");
  (*outs)[0] = TensorType{ins[0].shape, spec->dtype};
  (*outs)[1] = quant_scale_type(spec->granularity, ins[0].shape);
  (*outs)[2] = ins[1];
  return Status::Ok();
}

// Each operand's scale tensor is the one its spec's granularity implies.
Status check_qmatmul_scales(OpCode code, const std::vector<TensorType>& ins, const ScaleSpec* specs) {
  for (int w = 0; w < 2; ++w) {
    TensorType want = quant_scale_type(specs[w].granularity, ins[w * 3].shape);
    if (!(ins[w * 3 + 1] == want))
      return fail(code, std::string("operand ") + "ab"[w] + "'s scale is " + type_str(ins[w * 3 + 1]) + ", its " +
                            granularity_name(specs[w].granularity) + " granularity needs " + type_str(want));
  }
  return Status::Ok();
}

}  // namespace

namespace {

Status infer_unbounded(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs, std::vector<TensorType>* outs,
                       const ScaleSpec* quant) {
  const OpInfo& info = op_info(code);
  if (info.num_inputs >= 0 && static_cast<int>(ins.size()) != info.num_inputs)
    return fail(code, "takes " + std::to_string(info.num_inputs) + " inputs, got " + std::to_string(ins.size()));
  outs->assign(info.num_outputs, TensorType{});
  TensorType& out = (*outs)[0];
  switch (code) {
    case OpCode::MatMul:
      SG_TRY(expect_float(code, ins, 0));
      SG_TRY(expect_float(code, ins, 1));
      return infer_matmul(code, ins[0], ins[1], attrs, &out);
    // The elementwise families of ops.def's shape column: case labels from the table.
#define OP(e, name, nin, nout, kind, shape, grad, rule, backends, version, attrs) SG_CASE_IF_##shape(e)
#define SG_CASE_IF_binary(e) case OpCode::e:
#define SG_CASE_IF_unary(e)
#define SG_CASE_IF_own(e)
#include "sgrt/ops.def"
    case OpCode::SoftmaxGrad: case OpCode::LogSoftmaxGrad:
      SG_TRY(expect_float(code, ins, 0));
      SG_TRY(expect_float(code, ins, 1));
      SG_TRY(same_shapes(code, ins[0], ins[1]));
      out = ins[0];
      return Status::Ok();
#undef SG_CASE_IF_binary
#undef SG_CASE_IF_unary
#define SG_CASE_IF_binary(e)
#define SG_CASE_IF_unary(e) case OpCode::e:
#include "sgrt/ops.def"
      SG_TRY(expect_float(code, ins, 0));
      out = ins[0];
      return Status::Ok();
#undef OP
#undef SG_CASE_IF_binary
#undef SG_CASE_IF_unary
#undef SG_CASE_IF_own
    case OpCode::Softmax: case OpCode::LogSoftmax: {
      SG_TRY(expect_float(code, ins, 0));
      int64_t axis;
      if (!normalize_axis(attrs.i("axis", -1), ins[0].shape.size(), &axis))
        return fail(code, "axis out of range for " + type_str(ins[0]));
      out = ins[0];
      return Status::Ok();
    }
    case OpCode::Reshape: {
      const Shape& s = attrs.ints("shape");
      SG_TRY(check_dims(code, s));
      if (numel(s) != numel(ins[0].shape))
        return fail(code, "cannot reshape " + type_str(ins[0]) + " to " + shape_str(s) + " (element counts differ)");
      out = TensorType{s, ins[0].dtype};
      return Status::Ok();
    }
    case OpCode::Transpose: {
      const std::vector<int64_t>& perm = attrs.ints("perm");
      const Shape& x = ins[0].shape;
      std::vector<int64_t> sorted = perm;
      std::sort(sorted.begin(), sorted.end());
      bool ok = perm.size() == x.size();
      for (size_t i = 0; ok && i < sorted.size(); ++i) ok = sorted[i] == static_cast<int64_t>(i);
      if (!ok) return fail(code, "perm " + shape_str(perm) + " is not a permutation of the axes of " + type_str(ins[0]));
      out.dtype = ins[0].dtype;
      for (int64_t p : perm) out.shape.push_back(x[p]);
      return Status::Ok();
    }
    case OpCode::BroadcastTo: case OpCode::SumTo: {
      const Shape& s = attrs.ints("shape");
      SG_TRY(check_dims(code, s));
      bool ok = code == OpCode::BroadcastTo ? broadcastable(ins[0].shape, s) : broadcastable(s, ins[0].shape);
      if (!ok) return fail(code, "shapes " + type_str(ins[0]) + " and " + shape_str(s) + " are not broadcast-compatible");
      out = TensorType{s, ins[0].dtype};
      return Status::Ok();
    }
    case OpCode::Slice: case OpCode::Pad:
      SG_TRY(expect_float(code, ins, 0));
      return infer_window(code, ins[0], attrs, &out);
    case OpCode::ReduceSum: case OpCode::ReduceMean: case OpCode::ReduceMax:
      SG_TRY(expect_float(code, ins, 0));
      return infer_reduce(code, ins[0], attrs, &out);
    case OpCode::SoftmaxXent: case OpCode::Accuracy:
      return infer_classifier(code, ins[0], ins[1], &out);
    case OpCode::Fill: {
      const Shape& s = attrs.ints("shape");
      SG_TRY(check_dims(code, s));
      out = TensorType{s, DType::f32};
      return Status::Ok();
    }
    case OpCode::ReduceMaxGrad: {
      TensorType reduced;
      SG_TRY(infer_reduce(code, ins[0], attrs, &reduced));
      if (numel(ins[1].shape) != numel(reduced.shape) || ins[1].shape != ins[2].shape)
        return fail(code, "y " + type_str(ins[1]) + " and dy " + type_str(ins[2]) + " do not match the reduction of " + type_str(ins[0]));
      out = ins[0];
      return Status::Ok();
    }
    case OpCode::SoftmaxXentGrad: {
      TensorType loss;
      SG_TRY(infer_classifier(code, ins[0], ins[1], &loss));
      if (!ins[2].shape.empty()) return fail(code, "dloss must be a scalar, got " + type_str(ins[2]));
      out = ins[0];
      return Status::Ok();
    }
    case OpCode::MaskedXent: case OpCode::MaskedXentGrad: {
      SG_TRY(infer_classifier(code, ins[0], ins[1], &out));
      if (ins[2].dtype != DType::f32 || ins[2].shape != ins[1].shape)
        return fail(code, "mask must be f32[" + std::to_string(ins[0].shape[0]) + "], got " + type_str(ins[2]));
      if (code == OpCode::MaskedXent) return Status::Ok();
      if (!ins[3].shape.empty()) return fail(code, "dloss must be a scalar, got " + type_str(ins[3]));
      out = ins[0];
      return Status::Ok();
    }
    case OpCode::LrSchedule:
      SG_TRY(check_train_state(code, ins[0]));
      out = TensorType{{}, DType::f32};
      return Status::Ok();
    case OpCode::StepIncrement:
      SG_TRY(check_train_state(code, ins[0]));
      out = ins[0];
      return Status::Ok();
    case OpCode::CheckFinite:
      if (ins.empty()) return fail(code, "needs the train state");
      SG_TRY(check_train_state(code, ins[0]));
      for (size_t i = 1; i < ins.size(); ++i) SG_TRY(expect_float(code, ins, i));
      out = ins[0];
      (*outs)[1] = TensorType{{}, DType::f32};
      return Status::Ok();
    case OpCode::Quantize: return infer_quantize(code, ins, quant, outs);
    case OpCode::QMatMul: {
      for (int i : {0, 3})
        if (ins[i].dtype == DType::i32) return fail(code, "operand " + type_str(ins[i]) + " is not a float type");
      for (int i : {2, 5})
        if (ins[i].dtype != DType::f32 || ins[i].shape.size() != 1 || ins[i].shape[0] < kStateHeader)
          return fail(code, "quantization state must be f32[>= " + std::to_string(kStateHeader) + "], got " + type_str(ins[i]));
      if (quant) SG_TRY(check_qmatmul_scales(code, ins, quant));
      return infer_matmul(code, ins[0], ins[3], attrs, &out);
    }
    case OpCode::DgeGrad:
      SG_TRY(same_shapes(code, ins[0], ins[1]));
      if (ins[1].shape.size() != 2 || ins[2].dtype != DType::i32 || ins[2].shape != Shape{ins[1].shape[1]})
        return fail(code, "expects dW and W [out, in] and i32[in] column exponents, got " + type_str(ins[1]) + ", " + type_str(ins[2]));
      out = ins[0];
      return Status::Ok();
    case OpCode::ClampOutliers: {
      SG_TRY(expect_float(code, ins, 0));
      double alpha = attrs.f("alpha");
      if (!(alpha > 0.5 && alpha < 1.0)) return fail(code, "alpha must lie in (0.5, 1)");
      (*outs)[0] = ins[0];
      (*outs)[1] = ins[0];
      return Status::Ok();
    }
    case OpCode::SgdUpdate: case OpCode::AdamwUpdate: {
      // (param, grad, state..., lr, train_state, scales, grad_coef): param, grad
      // and state agree in shape; param and state may be low precision (quant.h).
      int nstate = code == OpCode::SgdUpdate ? 1 : 2;
      for (int i = 1; i <= nstate + 1; ++i) SG_TRY(same_shapes(code, ins[0], ins[i]));
      for (int i = 0; i <= nstate + 1; ++i) SG_TRY(expect_float(code, ins, i));
      if (!ins[nstate + 2].shape.empty()) return fail(code, "lr must be a scalar, got " + type_str(ins[nstate + 2]));
      SG_TRY(check_train_state(code, ins[nstate + 3]));
      SG_TRY(check_opt_scales(code, ins[nstate + 4]));
      if (ins[nstate + 5].dtype != DType::f32 || !ins[nstate + 5].shape.empty())
        return fail(code, "grad_coef must be an f32 scalar, got " + type_str(ins[nstate + 5]));
      (*outs)[0] = ins[0];
      for (int i = 0; i < nstate; ++i) (*outs)[1 + i] = ins[2 + i];
      (*outs)[nstate + 1] = ins[nstate + 4];
      return Status::Ok();
    }
    case OpCode::QuantizeGrad: {
      if (ins[0].dtype != DType::f32) return fail(code, "the gradient must be f32, got " + type_str(ins[0]));
      SG_TRY(check_opt_scales(code, ins[1]));
      DType d = static_cast<DType>(attrs.i("dtype"));
      if (d != DType::e4m3 && d != DType::e5m2 && d != DType::f16) return fail(code, "dtype must be e4m3, e5m2 or f16");
      out = TensorType{ins[0].shape, d};
      (*outs)[1] = ins[1];
      return Status::Ok();
    }
    case OpCode::Dequantize:
      SG_TRY(expect_float(code, ins, 0));
      SG_TRY(check_opt_scales(code, ins[1]));
      if (attrs.i("slot") < 0 || attrs.i("slot") >= kOptScaleLen) return fail(code, "slot out of range");
      out = TensorType{ins[0].shape, DType::f32};
      return Status::Ok();
    case OpCode::Embedding: return infer_embedding(code, ins, attrs, outs);
    case OpCode::EmbeddingGrad: return infer_embedding_grad(code, ins, attrs, outs);
    case OpCode::LayerNorm: case OpCode::RmsNorm: return infer_norm(code, ins, attrs, outs);
    case OpCode::LayerNormGrad: case OpCode::RmsNormGrad: return infer_norm_grad(code, ins, attrs, outs);
    case OpCode::Attention: case OpCode::AttentionGrad: return infer_attention(code, ins, attrs, outs);
    case OpCode::Rope: return infer_rope(code, ins, attrs, outs);
    case OpCode::DequantMatMul: return infer_dequant_matmul(code, ins, attrs, outs);
    case OpCode::RopeAt: return infer_rope_at(code, ins, attrs, outs);
    case OpCode::KvAttention: return infer_kv_attention(code, ins, attrs, outs);
    case OpCode::Dropout: return infer_dropout(code, ins, attrs, outs);
    case OpCode::Im2col: case OpCode::Col2im: {  // sgrt/im2col.h
      if (ins[0].dtype != DType::f32) return fail(code, "expects f32, got " + type_str(ins[0]));
      Im2colGeometry g;
      SG_TRY(im2col_geometry(code, ins[0].shape, attrs, &g));
      out.dtype = DType::f32;
      out.shape = code == OpCode::Im2col ? Shape{g.n, g.ho, g.wo, g.patch()} : Shape{g.n, g.h, g.w, g.c};
      return Status::Ok();
    }
    case OpCode::RunningStat: {  // (stat [C], running [C]) -> (stat's type, running)
      if (ins[0].dtype != DType::f32 || ins[0].shape.size() != 1 || !(ins[1] == ins[0]))
        return fail(code, "expects two f32 vectors of one length, got " + type_str(ins[0]) + " and " + type_str(ins[1]));
      double m = attrs.f("momentum"), u = attrs.f("unbias");
      if (!(m >= 0 && m <= 1)) return fail(code, "attr momentum must lie in [0, 1]");
      if (!(u >= 1 && u <= 2)) return fail(code, "attr unbias must lie in [1, 2] (N / (N - 1))");
      out = ins[0];
      (*outs)[1] = ins[1];
      return Status::Ok();
    }
    case OpCode::kCount: break;
  }
  return fail(code, "unknown op");
}

}  // namespace

// Outputs are bounded like a loaded file's tensors, so no element or byte count
// derived from them (a matmul of two long operands, say) overflows.
Status infer_types(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs, std::vector<TensorType>* outs,
                   const ScaleSpec* quant) {
  SG_TRY(check_op_attrs(code, attrs));
  SG_TRY(infer_unbounded(code, ins, attrs, outs, quant));
  for (const TensorType& t : *outs) {
    int64_t n;
    if (!checked_numel(t.shape, &n)) return fail(code, "the output " + type_str(t) + " has more than 2^40 elements");
  }
  return Status::Ok();
}

}  // namespace sgrt
