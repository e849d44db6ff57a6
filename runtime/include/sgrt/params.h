// A parameter's value as f32, wherever the optimizer's state level keeps it:
// the parameter tensor itself (fp32 level), or its low-precision master
// "NAME.master" under the scale in "NAME.opt_scales" (O1-O3; the parameter is
// then a working copy each program remakes, docs/optimizer.md).
#pragma once
#include <vector>

#include "sgrt/session.h"

namespace sgrt {

Status read_param(const Session& s, int param, std::vector<float>* out);

// The tensor that holds the parameter's value: the parameter itself, or its
// master when the parameter is a working copy; -1 when the model keeps none.
int value_tensor(const Model& m, int param);

// Whether a weights file (GGUF, safetensors) may leave this parameter out: a
// trained one beside frozen ones (an adapter on a frozen base, sg.freeze)
// keeps its initializer. Any other missing parameter is an error.
bool may_keep_init(const Model& m, const TensorInfo& param);
// What weight files hold: parameters and running statistics (batch norm's),
// as PyTorch's state_dict holds parameters and buffers.
inline bool is_weight(const TensorInfo& t) { return t.role == Role::param || t.role == Role::statistic; }

// The bytes that store `values` as the parameter (write them with
// Session::write); NaN, inf and values the master's format cannot hold under
// its scale are an error, found before anything is written.
struct ParamBytes {
  int tensor = -1;
  std::vector<uint8_t> bytes;
};
Status encode_param(const Session& s, int param, const std::vector<float>& values, ParamBytes* out);

}  // namespace sgrt
