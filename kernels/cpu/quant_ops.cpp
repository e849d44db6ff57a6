// quantize and qmatmul: the CPU kernels of the low-precision recipes, on top of
// cpu/quantize.h and cpu/gemm.h. The scale plan is the op's typed spec
// (sgrt/scale_spec.h); state slots are in sgrt/quant.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "cpu/gemm.h"
#include "cpu/op_args.h"
#include "cpu/quantize.h"
#include "formats/formats.h"
#include "sgrt/quant.h"

namespace sgrt::cpu {
namespace {

// Delayed scaling: the exponent from the history's max, or -1 state while the
// history is not yet full (just-in-time scaling until it is).
bool history_exponent(const float* state, int64_t hist, const QuantParams& p, int32_t prev, int32_t* e) {
  if (hist == 0 || state[kStateHistoryPos] < static_cast<float>(hist)) return false;
  float amax = 0;
  for (int64_t i = 0; i < hist; ++i) amax = std::max(amax, state[kStateHeader + i]);
  bool kept = false;
  *e = scale_exponent(amax, format_max(p.fmt), p.margin, prev, &kept);
  return true;
}

// Stochastic rounding's key: the quantization (its state tensor) and how many
// training encodes it has done, so a run's random words depend on the step alone.
uint32_t sr_key(int state_tensor, float encodes) {
  return fmt::mix32(static_cast<uint32_t>(state_tensor) * 0x9E3779B9u ^ fmt::mix32(static_cast<uint32_t>(encodes)));
}

}  // namespace

Status quantize_outputs(const OpArgs& a, QuantStats* stats) {
  const float* x = a.in[0].f();
  float* state = a.out[2].f();
  const Shape& xs = a.in[0].shape();
  int64_t cols = xs.back(), rows = a.in[0].n / cols;
  const ScaleSpec& spec = a.quant[0];
  QuantParams p;
  p.fmt = spec.dtype;
  p.margin = spec.margin;
  p.measure_amax = spec.history > 0;  // a static scale takes no amax at run time
  QuantGranularity g = spec.granularity;
  int64_t hist = spec.history;
  void* q = a.out[0].data;
  std::unique_ptr<float[]> rotated;  // not zero-filled: hadamard_rows writes every element
  if (spec.hadamard) {
    rotated.reset(new float[a.in[0].n]);
    hadamard_rows(x, rows, cols, rotated.get());
    x = rotated.get();
  }
  if (spec.stochastic) {
    p.stochastic = true;
    p.seed = sr_key(spec.state_tensor, state[kStateHistoryPos]);
  }
  QuantStats st;
  switch (g) {
    case QuantGranularity::mx:
      st = quantize_mx(x, rows, cols, p, q, static_cast<uint8_t*>(a.out[1].data));
      break;
    case QuantGranularity::nvfp4:
      // The tensor scale goes with the codes just written, so every program stores
      // it for its qmatmul, eval's and infer's too; the counters below are training's.
      st = quantize_nvfp4(x, rows, cols, p, q, static_cast<uint8_t*>(a.out[1].data), &state[kStateTensorScale]);
      break;
    case QuantGranularity::nvfp4_16x16:
      st = quantize_nvfp4_16x16(x, rows, cols, p, q, static_cast<uint8_t*>(a.out[1].data), &state[kStateTensorScale]);
      break;
    case QuantGranularity::tile1x128: case QuantGranularity::block128x128:
      st = quantize_fp8_tiles(x, rows, cols, g == QuantGranularity::tile1x128 ? 1 : kFp8Tile, p, q, a.out[1].f());
      break;
    default: {
      QuantAxis axis = g == QuantGranularity::row ? QuantAxis::row
                       : g == QuantGranularity::column ? QuantAxis::col : QuantAxis::tensor;
      int32_t* exps = a.out[1].i32();
      bool current = true;
      if (spec.mode == ScaleMode::static_pow2) {
        exps[0] = spec.static_log2;
        current = false;
      } else if (spec.mode == ScaleMode::delayed_amax) {
        int32_t e;
        if (history_exponent(state, hist, p, exps[0], &e)) {
          exps[0] = e;
          current = false;
        }
      }
      st = quantize(x, rows, cols, axis, p, current, q, exps);
      break;
    }
  }
  if (st.error) return Status::Runtime(std::string("quantize: ") + st.error);
  *stats = st;
  return Status::Ok();
}

void record_quantize(const OpArgs& a, const QuantStats& st) {
  if (a.attrs->i("update", 1) == 0) return;  // eval and infer programs leave the state alone
  const ScaleSpec& spec = a.quant[0];
  const int64_t hist = spec.history;
  float* state = a.out[2].f();
  state[kStateSaturated] += static_cast<float>(st.saturated);
  state[kStateKept] += static_cast<float>(st.kept_scales);
  state[kStateUnderflow] += static_cast<float>(st.underflow);
  if (hist > 0 && std::isfinite(st.amax)) {
    int64_t pos = static_cast<int64_t>(state[kStateHistoryPos]);
    state[kStateHeader + pos % hist] = st.amax;
    state[kStateHistoryPos] = static_cast<float>(pos + 1);
  } else if (spec.stochastic) {
    state[kStateHistoryPos] += 1;  // the next step's random words
  }
}

Status k_quantize(const OpArgs& a) {
  QuantStats st;
  SG_TRY(quantize_outputs(a, &st));
  record_quantize(a, st);
  return Status::Ok();
}

namespace {

// Describes operand `which` (0: A, 1: B) of a qmatmul for the GEMM. Its stored
// matrix is the 2-D view [rows, cols]; "outer" is M for A and N for B.
// rows16 holds 16x16 blocks' scales repeated per row: the GEMM reads one per row.
Status operand(const OpArgs& a, int which, GemmOperand* o, std::vector<uint8_t>* rows16) {
  const TensorArg& data = a.in[which * 3];
  const TensorArg& scale = a.in[which * 3 + 1];
  const float* state = a.in[which * 3 + 2].f();
  bool trans = a.attrs->i(which == 0 ? "trans_a" : "trans_b");
  QuantGranularity g = a.quant[which].granularity;
  int64_t cols = data.shape().back();
  // Is the stored row index the outer one? A untransposed: yes; B transposed: yes.
  bool rows_outer = which == 0 ? !trans : trans;
  o->data = data.data;
  o->dtype = data.type->dtype;
  o->trans = trans;
  o->ld = cols;
  o->scale = scale.data;
  o->scale_dtype = scale.type->dtype;
  switch (g) {
    case QuantGranularity::tensor: o->scale_mode = OperandScale::tensor; break;
    case QuantGranularity::row: o->scale_mode = rows_outer ? OperandScale::outer : OperandScale::inner; break;
    case QuantGranularity::column: o->scale_mode = rows_outer ? OperandScale::inner : OperandScale::outer; break;
    case QuantGranularity::mx: case QuantGranularity::nvfp4:
      if (!rows_outer) return Status::Runtime("qmatmul: block scales must run along the contracting dimension");
      o->scale_mode = OperandScale::block;
      o->block = g == QuantGranularity::mx ? kMxBlock : kNvfp4Block;
      o->scale_ld = scale.shape().back();
      if (g == QuantGranularity::nvfp4) o->tensor_scale = state[kStateTensorScale];
      break;
    case QuantGranularity::nvfp4_16x16: {
      if (!rows_outer) return Status::Runtime("qmatmul: block scales must run along the contracting dimension");
      const int64_t rows = data.n / cols, nb = scale.shape().back();
      rows16->resize(static_cast<size_t>(rows * nb));
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(rows16->data() + r * nb, static_cast<const uint8_t*>(scale.data) + (r / kNvfp4Block) * nb, nb);
      o->scale = rows16->data();
      o->scale_mode = OperandScale::block;
      o->block = kNvfp4Block;
      o->scale_ld = nb;
      o->tensor_scale = state[kStateTensorScale];
      break;
    }
    case QuantGranularity::tile1x128: case QuantGranularity::block128x128:
      return Status::Runtime("qmatmul: 1x128 / 128x128 operands go with each other only");
  }
  return Status::Ok();
}

// Blockwise FP8: both operands K-major codes with FP32 scales per 128-chunk of K.
Status chunked_operand(const OpArgs& a, int which, GemmOperand* o, ChunkScales* s) {
  const TensorArg& data = a.in[which * 3];
  const TensorArg& scale = a.in[which * 3 + 1];
  bool trans = a.attrs->i(which == 0 ? "trans_a" : "trans_b");
  if (which == 0 ? trans : !trans) return Status::Runtime("qmatmul: block scales must run along the contracting dimension");
  o->data = data.data;
  o->dtype = data.type->dtype;
  o->trans = trans;
  o->ld = data.shape().back();
  s->scale = scale.f();
  s->ld = scale.shape().back();
  s->outer_per_scale = a.quant[which].granularity == QuantGranularity::block128x128 ? kFp8Tile : 1;
  return Status::Ok();
}

}  // namespace

Status k_qmatmul(const OpArgs& a) {
  const bool chunked = is_k_chunked(a.quant[0].granularity);
  if (chunked != is_k_chunked(a.quant[1].granularity))
    return Status::Runtime("qmatmul: 1x128 / 128x128 operands go with each other only");
  GemmOperand A, B;
  ChunkScales sa, sb;
  std::vector<uint8_t> rows16[2];
  SG_TRY(chunked ? chunked_operand(a, 0, &A, &sa) : operand(a, 0, &A, &rows16[0]));
  SG_TRY(chunked ? chunked_operand(a, 1, &B, &sb) : operand(a, 1, &B, &rows16[1]));
  const Shape& as = a.in[0].shape();
  const Shape& bs = a.in[3].shape();
  int64_t ar = a.in[0].n / as.back(), ac = as.back();
  int64_t br = a.in[3].n / bs.back(), bc = bs.back();
  int64_t m = A.trans ? ac : ar, k = A.trans ? ar : ac, n = B.trans ? br : bc;
  const char* err = chunked ? gemm_k_chunked(m, n, k, A, sa, B, sb, a.out[0].f(), n)
                            : gemm(m, n, k, 1.f, A, B, 0.f, a.out[0].f(), n, a.bias, Triangle::none, a.act);
  if (err) return Status::Runtime(std::string("qmatmul: ") + err);
  if (!chunked) return Status::Ok();
  if (a.bias) add_bias_rows(a.out[0].f(), m, n, a.bias);
  activate_rows(a.out[0].f(), m, n, n, a.act);
  return Status::Ok();
}

}  // namespace sgrt::cpu
