#include "shape_infer_transformer.h"

#include <string>

#include "sgrt/quant.h"

namespace sgrt {
namespace {

Status fail(OpCode code, const std::string& what) {
  return Status::Invalid(std::string(op_info(code).name) + ": " + what);
}

Status expect_f32(OpCode code, const TensorType& t, const char* what) {
  if (t.dtype != DType::f32) return fail(code, std::string(what) + " must be f32, got " + type_str(t));
  return Status::Ok();
}

Status expect_same(OpCode code, const TensorType& a, const TensorType& b, const char* what) {
  if (!(a == b)) return fail(code, std::string(what) + " " + type_str(b) + " does not match " + type_str(a));
  return Status::Ok();
}

Shape drop_last(const Shape& s) { return Shape(s.begin(), s.end() - 1); }

// x [..., D] with gain [D] (and for layer norm bias [D]); the per-row statistics are [...].
Status check_norm(OpCode code, const TensorType& x, const TensorType& gain) {
  SG_TRY(expect_f32(code, x, "x"));
  if (x.shape.empty()) return fail(code, "x must have rank >= 1");
  if (!(gain == TensorType{{x.shape.back()}, DType::f32}))
    return fail(code, "gain must be f32[" + std::to_string(x.shape.back()) + "], got " + type_str(gain));
  return Status::Ok();
}

// q, k, v [B, T, H*Dh] with n_head dividing the width.
Status check_heads(OpCode code, const TensorType& x, const Attrs& attrs, bool even_head) {
  SG_TRY(expect_f32(code, x, "input"));
  int64_t h = attrs.i("n_head");
  if (x.shape.size() != 3) return fail(code, "expects [batch, time, width], got " + type_str(x));
  if (h <= 0 || x.shape[2] % h != 0)
    return fail(code, "n_head " + std::to_string(h) + " does not divide the width " + std::to_string(x.shape[2]));
  if (even_head && (x.shape[2] / h) % 2 != 0) return fail(code, "the head size " + std::to_string(x.shape[2] / h) + " must be even");
  return Status::Ok();
}

// A frozen quantized base tensor: q8_0/q4_1 [rows, width], whole blocks per row.
Status check_block_table(OpCode code, const TensorType& t, const char* what) {
  if (t.shape.size() != 2) return fail(code, std::string(what) + " must be rank 2, got " + type_str(t));
  if (t.shape[1] % dtype_block_size(t.dtype) != 0)
    return fail(code, std::string(what) + " " + type_str(t) + ": the last dimension must be a multiple of " +
                          std::to_string(dtype_block_size(t.dtype)) + " (whole blocks per row)");
  return Status::Ok();
}

}  // namespace

Status infer_embedding(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs, std::vector<TensorType>* outs) {
  std::vector<TensorType>& o = *outs;
  // An f32 table, or a frozen q8_0/q4_1 one (decoded row by row as it is gathered).
  if (dtype_is_block(ins[0].dtype)) SG_TRY(check_block_table(code, ins[0], "table"));
  else SG_TRY(expect_f32(code, ins[0], "table"));
  if (ins[0].shape.size() != 2) return fail(code, "table must be [vocab, width], got " + type_str(ins[0]));
  if (ins[1].dtype != DType::i32) return fail(code, "ids must be i32, got " + type_str(ins[1]));
  o[0] = TensorType{ins[1].shape, DType::f32};
  o[0].shape.push_back(ins[0].shape[1]);
  return Status::Ok();
}

// (x f32 [..., K], w q8_0/q4_1 [N, K]) -> [..., N]; transpose_w: x [..., N] -> [..., K].
Status infer_dequant_matmul(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs, std::vector<TensorType>* outs) {
  const TensorType &x = ins[0], &w = ins[1];
  SG_TRY(expect_f32(code, x, "x"));
  if (x.shape.empty()) return fail(code, "x must have rank >= 1");
  if (!dtype_is_block(w.dtype)) return fail(code, "w must be a block format (q8_0, q4_1), got " + type_str(w));
  SG_TRY(check_block_table(code, w, "w"));
  const bool t = attrs.i("transpose_w");
  const int64_t in = t ? w.shape[0] : w.shape[1], out = t ? w.shape[1] : w.shape[0];
  if (x.shape.back() != in)
    return fail(code, "x " + type_str(x) + " does not match w " + type_str(w) + (t ? "" : "^T") + " (" +
                          std::to_string(x.shape.back()) + " vs " + std::to_string(in) + ")");
  (*outs)[0] = TensorType{x.shape, DType::f32};
  (*outs)[0].shape.back() = out;
  return Status::Ok();
}

Status infer_embedding_grad(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs, std::vector<TensorType>* outs) {
  std::vector<TensorType>& o = *outs;
  if (ins[0].dtype != DType::i32) return fail(code, "ids must be i32, got " + type_str(ins[0]));
  SG_TRY(expect_f32(code, ins[1], "dy"));
  if (ins[1].shape.size() != ins[0].shape.size() + 1 || drop_last(ins[1].shape) != ins[0].shape)
    return fail(code, "dy " + type_str(ins[1]) + " does not match ids " + type_str(ins[0]));
  if (attrs.i("vocab") <= 0) return fail(code, "attr vocab must be positive");
  o[0] = TensorType{{attrs.i("vocab"), ins[1].shape.back()}, DType::f32};
  return Status::Ok();
}

// layer_norm, rms_norm
Status infer_norm(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs, std::vector<TensorType>* outs) {
  std::vector<TensorType>& o = *outs;
  SG_TRY(check_norm(code, ins[0], ins[1]));
  if (code == OpCode::LayerNorm) SG_TRY(expect_same(code, ins[1], ins[2], "bias"));
  if (!(attrs.f("eps") > 0)) return fail(code, "attr eps must be positive");
  o[0] = ins[0];
  for (size_t i = 1; i < o.size(); ++i) o[i] = TensorType{drop_last(ins[0].shape), DType::f32};
  return Status::Ok();
}

// layer_norm_grad, rms_norm_grad
Status infer_norm_grad(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs, std::vector<TensorType>* outs) {
  std::vector<TensorType>& o = *outs;
  // (x, gain, [mean,] rstd, dy)
  SG_TRY(check_norm(code, ins[0], ins[1]));
  TensorType stat{drop_last(ins[0].shape), DType::f32};
  for (size_t i = 2; i + 1 < ins.size(); ++i) SG_TRY(expect_same(code, stat, ins[i], "statistic"));
  SG_TRY(expect_same(code, ins[0], ins.back(), "dy"));
  o[0] = ins[0];
  for (size_t i = 1; i < o.size(); ++i) o[i] = ins[1];
  return Status::Ok();
}

// attention, attention_grad: q (and y, dy) [B, T, H*Dh], k and v [B, T, Hkv*Dh]
// with Hkv (n_kv_head, default H) dividing H.
Status infer_attention(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs, std::vector<TensorType>* outs) {
  std::vector<TensorType>& o = *outs;
  SG_TRY(check_heads(code, ins[0], attrs, false));
  const Shape& s = ins[0].shape;
  int64_t h = attrs.i("n_head"), hkv = attrs.i("n_kv_head", h);
  if (hkv <= 0 || h % hkv != 0)
    return fail(code, "n_kv_head " + std::to_string(hkv) + " does not divide n_head " + std::to_string(h));
  TensorType kv{{s[0], s[1], s[2] / h * hkv}, DType::f32};
  TensorType lse{{s[0], h, s[1]}, DType::f32};
  for (size_t i = 1; i < ins.size(); ++i) {
    if (i == 1 || i == 2) SG_TRY(expect_same(code, kv, ins[i], i == 1 ? "k" : "v"));
    else SG_TRY(i == 4 ? expect_same(code, lse, ins[i], "lse") : expect_same(code, ins[0], ins[i], "input"));
  }
  o[0] = ins[0];
  if (code == OpCode::Attention) o[1] = lse;
  else o[1] = o[2] = kv;
  return Status::Ok();
}

Status infer_rope(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs, std::vector<TensorType>* outs) {
  std::vector<TensorType>& o = *outs;
  SG_TRY(check_heads(code, ins[0], attrs, true));
  if (!(attrs.f("base") > 1)) return fail(code, "attr base must be > 1");
  o[0] = ins[0];
  return Status::Ok();
}

// A decode position: i32[].
Status check_pos(OpCode code, const TensorType& pos) {
  if (!(pos == TensorType{{}, DType::i32})) return fail(code, "pos must be i32[], got " + type_str(pos));
  return Status::Ok();
}

Status infer_rope_at(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs, std::vector<TensorType>* outs) {
  SG_TRY(check_pos(code, ins[1]));
  return infer_rope(code, {ins[0]}, attrs, outs);
}

// kv_attention: q [B, T, H*Dh], k and v [B, T, Hkv*Dh], the caches [B, Tmax, Hkv*Dh]
// with Tmax >= T, pos i32[]; y is q's type, the caches are written in place.
Status infer_kv_attention(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs, std::vector<TensorType>* outs) {
  std::vector<TensorType> attn(3);
  SG_TRY(infer_attention(code, {ins[0], ins[1], ins[2]}, attrs, &attn));
  const TensorType& cache = ins[3];
  SG_TRY(expect_f32(code, cache, "k_cache"));
  if (cache.shape.size() != 3 || cache.shape[0] != ins[1].shape[0] || cache.shape[2] != ins[1].shape[2] ||
      cache.shape[1] < ins[1].shape[1])
    return fail(code, "k_cache " + type_str(cache) + " must be [batch, >= time, width] of k " + type_str(ins[1]));
  SG_TRY(expect_same(code, cache, ins[4], "v_cache"));
  SG_TRY(check_pos(code, ins[5]));
  *outs = {attn[0], cache, cache};
  return Status::Ok();
}

Status infer_dropout(OpCode code, const std::vector<TensorType>& ins, const Attrs& attrs, std::vector<TensorType>* outs) {
  std::vector<TensorType>& o = *outs;
  SG_TRY(expect_f32(code, ins[0], "x"));
  if (!(ins[1] == TensorType{{kTrainStateLen}, DType::i32}))
    return fail(code, "the second input must be the train state i32[" + std::to_string(kTrainStateLen) + "], got " + type_str(ins[1]));
  double p = attrs.f("p");
  if (!(p >= 0 && p < 1)) return fail(code, "attr p must lie in [0, 1)");
  o[0] = ins[0];
  return Status::Ok();
}

}  // namespace sgrt
