#include "sgrt/scale_codec.h"

#include "sgrt/quant.h"

namespace sgrt {

static_assert(static_cast<int>(sg::Granularity::column) == static_cast<int>(QuantGranularity::column),
              "sg.fbs Granularity's per-tensor/row/column values are QuantGranularity's");

sg::ScaleSpecT encode_scale_spec(const ScaleSpec& s) {
  sg::ScaleSpecT t;
  t.mode = static_cast<sg::ScaleMode>(s.mode);
  const bool square = s.granularity == QuantGranularity::block128x128 || s.granularity == QuantGranularity::nvfp4_16x16;
  t.granularity = square                                           ? sg::Granularity::block2d
                  : is_block(s.granularity)                        ? sg::Granularity::block
                                                                   : static_cast<sg::Granularity>(s.granularity);
  t.block_size = static_cast<int32_t>(block_size(s.granularity));
  if (is_block(s.granularity)) t.block_scale_dtype = static_cast<sg::DType>(block_scale_dtype(s.granularity));
  t.static_log2 = s.static_log2;
  t.history_len = s.history;
  t.margin = s.margin;
  t.rescale_norm = static_cast<sg::RescaleNorm>(s.rescale_norm);
  t.grad_only = s.grad_only;
  t.state_tensor = s.state_tensor;
  t.rule = s.rule;
  t.hadamard = s.hadamard;
  t.stochastic = s.stochastic;
  return t;
}

namespace {

// Block granularity names its kind by block size; version 2 also by the block
// scales' dtype (version 1 wrote e8m0 for both; 128-blocks and 16x16 blocks came
// later and always name theirs).
Status decode_granularity(const sg::ScaleSpec& s, uint32_t version, QuantGranularity* g) {
  int gran = static_cast<int>(s.granularity());
  if (gran < 0 || gran > static_cast<int>(sg::Granularity::block2d)) return Status::Invalid("invalid granularity " + std::to_string(gran));
  const bool square = s.granularity() == sg::Granularity::block2d;
  if (s.granularity() != sg::Granularity::block && !square) {
    if (s.block_size() != 0) return Status::Invalid("block size " + std::to_string(s.block_size()) + " on a non-block granularity");
    *g = static_cast<QuantGranularity>(gran);
    return Status::Ok();
  }
  if (square && s.block_size() == kFp8Tile) *g = QuantGranularity::block128x128;
  else if (square && s.block_size() == kNvfp4Block) *g = QuantGranularity::nvfp4_16x16;
  else if (square)
    return Status::Invalid("block2d granularity with block size " + std::to_string(s.block_size()) + " (takes " +
                           std::to_string(kFp8Tile) + " or " + std::to_string(kNvfp4Block) + ")");
  else if (s.block_size() == kMxBlock) *g = QuantGranularity::mx;
  else if (s.block_size() == kNvfp4Block) *g = QuantGranularity::nvfp4;
  else if (s.block_size() == kFp8Tile) *g = QuantGranularity::tile1x128;
  else
    return Status::Invalid("block granularity with block size " + std::to_string(s.block_size()) + " (takes " +
                           std::to_string(kMxBlock) + ": mx, " + std::to_string(kNvfp4Block) + ": nvfp4, or " +
                           std::to_string(kFp8Tile) + ": 1x128 tiles)");
  DType want = block_scale_dtype(*g);
  if ((version >= 2 || is_k_chunked(*g) || square) && static_cast<int>(s.block_scale_dtype()) != static_cast<int>(want))
    return Status::Invalid(std::string(granularity_name(*g)) + " blocks need " + dtype_name(want) + " block scales, got " +
                           sg::EnumNameDType(s.block_scale_dtype()));
  return Status::Ok();
}

Status decode(const sg::ScaleSpec& s, uint32_t version, ScaleSpec* out) {
  int mode = static_cast<int>(s.mode()), norm = static_cast<int>(s.rescale_norm());
  if (mode < 0 || mode > static_cast<int>(ScaleMode::block)) return Status::Invalid("invalid scale mode " + std::to_string(mode));
  if (norm < 0 || norm > static_cast<int>(RescaleNorm::l2)) return Status::Invalid("invalid rescale norm " + std::to_string(norm));
  out->mode = static_cast<ScaleMode>(mode);
  SG_TRY(decode_granularity(s, version, &out->granularity));
  out->static_log2 = s.static_log2();
  out->history = s.history_len();
  out->margin = s.margin();
  out->rescale_norm = static_cast<RescaleNorm>(norm);
  out->grad_only = s.grad_only();
  out->state_tensor = s.state_tensor();
  out->rule = s.rule() ? s.rule()->str() : "";
  out->hadamard = s.hadamard();
  out->stochastic = s.stochastic();
  if (out->mode != ScaleMode::none) return check_quant_spec(*out);
  if (out->granularity != QuantGranularity::tensor)
    return Status::Invalid(std::string(granularity_name(out->granularity)) + " granularity without a scale mode");
  return Status::Ok();
}

}  // namespace

Status decode_scale_spec(const sg::ScaleSpec* s, DType dtype, const std::string& tensor, uint32_t version,
                         ScaleSpec* out) {
  *out = ScaleSpec{};
  out->dtype = dtype;
  if (!s) return Status::Ok();
  Status st = decode(*s, version, out);
  if (!st.ok()) return Status::Invalid("tensor " + tensor + ": scale spec: " + st.message());
  return Status::Ok();
}

bool is_v1_scale_attr(OpCode code, std::string_view attr) {
  if (code == OpCode::Quantize)
    return attr == "dtype" || attr == "granularity" || attr == "history" || attr == "mode" || attr == "static_log2" ||
           attr == "margin";
  return code == OpCode::QMatMul && (attr == "a_granularity" || attr == "b_granularity");
}

void upgrade_v1_history(const TensorType& state, ScaleSpec* spec) {
  if (state.shape.size() == 1 && state.shape[0] >= kStateHeader) spec->history = static_cast<int32_t>(state.shape[0] - kStateHeader);
}

}  // namespace sgrt
