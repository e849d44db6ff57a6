// The one mapping between core's typed ScaleSpec and the IR's sg::ScaleSpec
// table. The compiler and the exporter write through it, the loader reads
// through it; a spec that does not hold together is refused naming the tensor.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "sg_generated.h"
#include "sgrt/ops.h"
#include "sgrt/scale_spec.h"
#include "sgrt/shape.h"
#include "sgrt/status.h"

namespace sgrt {

static_assert(static_cast<int>(sg::ScaleMode::block) == static_cast<int>(ScaleMode::block) &&
              static_cast<int>(sg::ScaleMode::dynamic_rescale) == static_cast<int>(ScaleMode::dynamic_rescale),
              "sg.fbs ScaleMode and sgrt::ScaleMode disagree");
static_assert(static_cast<int>(sg::RescaleNorm::l2) == static_cast<int>(RescaleNorm::l2),
              "sg.fbs RescaleNorm and sgrt::RescaleNorm disagree");

// The table as the current schema version writes it (object API: Pack it, or
// hang it on an sg::TensorT). The tensor itself carries spec.dtype.
sg::ScaleSpecT encode_scale_spec(const ScaleSpec& spec);

// Decodes the spec of tensor `tensor` of element type `dtype` from a file of
// schema version `version`; a missing table is ScaleMode::none.
Status decode_scale_spec(const sg::ScaleSpec* s, DType dtype, const std::string& tensor, uint32_t version,
                         ScaleSpec* out);

// Version 1 files also carried the scale plan as op attributes; the reader
// drops them (the spec is the source).
bool is_v1_scale_attr(OpCode code, std::string_view attr);
// Version 1 wrote the amax history length into the spec for delayed mode
// only; a quantize's state (f32[kStateHeader + history]) says it for all.
void upgrade_v1_history(const TensorType& state, ScaleSpec* spec);

}  // namespace sgrt
