// Parameters to and from safetensors files (huggingface/safetensors), by name:
//   u64 little-endian N | N bytes of JSON | data
// The JSON maps each tensor name to {"dtype": "F32"|"F16"|"BF16", "shape": [...],
// "data_offsets": [begin, end]} (offsets from the start of the data, row-major,
// little endian), plus an optional "__metadata__" object of strings.
#pragma once
#include <string>
#include <vector>

#include "sgrt/dtype.h"
#include "sgrt/session.h"

namespace sgrt {

struct SafeTensor {
  std::string name;
  DType dtype = DType::f32;  // f32, f16 or bf16
  Shape shape;
  std::vector<float> values;  // converted to f32
};

// Parses and validates a whole file (header, dtypes, shapes against byte
// ranges, ranges inside the data and not overlapping); errors name the path.
Status read_safetensors(const std::string& path, std::vector<SafeTensor>* out);
// The file's first 8 + N bytes: the header length N and the JSON header.
Status read_safetensors_header(const std::string& path, std::vector<uint8_t>* out);
// The tensor names of a file's header; the data is not read.
Status read_safetensors_names(const std::string& path, std::vector<std::string>* out);
// Writes atomically; each tensor stored as its `dtype`.
Status write_safetensors(const std::string& path, const std::vector<SafeTensor>& tensors);

// Which parameters a file holds: all of them, or only the trained ones (a
// LoRA run's adapters, to put on a base model loaded from elsewhere).
enum class ParamSet { all, trained };

// Every parameter of the session's model (or every trained one) from the
// file, by name and shape; running statistics (batch norm) go with the
// parameters in both sets, as PyTorch's state_dict keeps its buffers. Everything is checked before any parameter is
// written: a missing, unknown or mis-shaped tensor (with `trained`, also one
// naming a frozen parameter) leaves the session unchanged.
Status import_safetensors(Session& s, const std::string& path, ParamSet which = ParamSet::all);
// Every parameter (or every trained one) as `dtype` (f32, f16 or bf16).
Status export_safetensors(const Session& s, const std::string& path, DType dtype, ParamSet which = ParamSet::all);

}  // namespace sgrt
