#include "sgrt/params.h"

#include <cmath>

#include "formats/formats.h"
#include "formats/gguf_blocks.h"
#include "sgrt/quant.h"

namespace sgrt {
namespace {

// The tensor that holds the parameter's value and the multiplier it is stored under.
struct Storage {
  int tensor;
  float scale = 1.f;
};

Status storage_of(const Session& s, int param, Storage* out) {
  const Model& m = s.model();
  const TensorInfo& p = m.tensors().at(param);
  if (!is_weight(p)) return Status::Invalid(p.name + " is not a parameter");
  out->tensor = value_tensor(m, param);
  if (out->tensor == param) return Status::Ok();
  const int scales = m.find_tensor(p.name + ".opt_scales");
  if (out->tensor < 0 || scales < 0) return Status::Invalid(p.name + ": the model keeps no value for this parameter");
  float sc[kOptScaleLen];
  SG_TRY(s.read(scales, sc, sizeof sc));
  out->scale = sc[kOptScaleW];
  return Status::Ok();
}

}  // namespace

int value_tensor(const Model& m, int param) {
  const TensorInfo& p = m.tensors().at(param);
  return p.persistent ? param : m.find_tensor(p.name + ".master");
}

bool may_keep_init(const Model& m, const TensorInfo& param) {
  return !param.frozen && count_params(m.tensors()).frozen > 0;
}

Status read_param(const Session& s, int param, std::vector<float>* out) {
  Storage st;
  SG_TRY(storage_of(s, param, &st));
  const TensorInfo& t = s.model().tensors()[st.tensor];
  size_t n = static_cast<size_t>(numel(t.type.shape));
  out->assign(n, 0.f);
  if (t.type.dtype == DType::f32) return s.read(st.tensor, out->data(), t.bytes);
  std::vector<uint8_t> raw(t.bytes);
  SG_TRY(s.read(st.tensor, raw.data(), raw.size()));
  if (dtype_is_block(t.type.dtype)) {  // a frozen quantized base: its decoded values
    fmt::gguf_decode_blocks(t.type.dtype == DType::q8_0, raw.data(), static_cast<int64_t>(n), out->data());
    return Status::Ok();
  }
  for (size_t i = 0; i < n; ++i) {
    switch (t.type.dtype) {
      case DType::f16: (*out)[i] = fmt::f16_decode(reinterpret_cast<const uint16_t*>(raw.data())[i]) / st.scale; break;
      case DType::e4m3: (*out)[i] = fmt::e4m3_decode(raw[i]) / st.scale; break;
      default: return Status::Unsupported(t.name + ": masters in " + dtype_name(t.type.dtype) + " are not supported");
    }
  }
  return Status::Ok();
}

Status encode_param(const Session& s, int param, const std::vector<float>& values, ParamBytes* out) {
  Storage st;
  SG_TRY(storage_of(s, param, &st));
  const TensorInfo& t = s.model().tensors()[st.tensor];
  const std::string& name = s.model().tensors()[param].name;
  if (values.size() != static_cast<size_t>(numel(t.type.shape)))
    return Status::Invalid(name + ": " + std::to_string(values.size()) + " values for " + type_str(t.type));
  if (t.type.dtype != DType::f32 && t.type.dtype != DType::f16 && t.type.dtype != DType::e4m3 && !dtype_is_block(t.type.dtype))
    return Status::Unsupported(t.name + ": masters in " + dtype_name(t.type.dtype) + " are not supported");
  float limit = t.type.dtype == DType::f16 ? fmt::kF16Max : t.type.dtype == DType::e4m3 ? fmt::kE4M3Max : INFINITY;
  out->tensor = st.tensor;
  out->bytes.assign(t.bytes, 0);
  if (dtype_is_block(t.type.dtype)) {  // a frozen quantized base: ggml's reference quantizer
    for (size_t i = 0; i < values.size(); ++i)
      if (!std::isfinite(values[i]))
        return Status::Invalid(name + ": value " + std::to_string(values[i]) + " at index " + std::to_string(i) +
                               " does not fit its " + dtype_name(t.type.dtype) + " storage");
    fmt::gguf_encode_blocks(t.type.dtype == DType::q8_0, values.data(), static_cast<int64_t>(values.size()), out->bytes.data());
    return Status::Ok();
  }
  for (size_t i = 0; i < values.size(); ++i) {
    float x = values[i] * st.scale;
    if (!std::isfinite(x) || !(std::fabs(x) <= limit))  // NaN, +-inf, or past an f16/e4m3 master's range
      return Status::Invalid(name + ": value " + std::to_string(values[i]) + " at index " + std::to_string(i) +
                             " does not fit its " + dtype_name(t.type.dtype) + " storage");
    switch (t.type.dtype) {
      case DType::f16: reinterpret_cast<uint16_t*>(out->bytes.data())[i] = fmt::f16_encode(x); break;
      case DType::e4m3: out->bytes[i] = fmt::e4m3_encode(x); break;
      default: reinterpret_cast<float*>(out->bytes.data())[i] = x;
    }
  }
  return Status::Ok();
}

}  // namespace sgrt
