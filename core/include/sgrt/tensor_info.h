// A model's tensors and ops as every backend sees them: plain structs decoded
// from the IR by the runtime's loader (runtime/src/model.cpp), read by the
// kernel tables of kernels/<backend>/.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "sgrt/attrs.h"
#include "sgrt/ops.h"
#include "sgrt/scale_spec.h"
#include "sgrt/shape.h"

namespace sgrt {

// Every tensor's arena offset is a multiple of this (the compiler's memory
// plan aligns to it); kernels rely on it for aligned element access.
constexpr uint64_t kTensorAlignment = 64;
// Backends allocate the arena in whole blocks of this many bytes.
constexpr uint64_t kArenaAlignment = 256;

enum class Role : uint8_t { input = 0, param, grad, opt_state, activation, scratch, constant, scale_state, cache, statistic };
enum class InitKind : uint8_t { zeros = 0, ones, uniform, normal, buffer };

// Proven at load, so backends bind tensors without further checks: offset is a
// multiple of kTensorAlignment, offset + bytes <= Model::arena_bytes(), and
// bytes == dtype_bytes(type) unless bytes is 0 (no storage: never an operand
// of an op); shapes hold at most kMaxElements (sgrt/checked_math.h).
struct TensorInfo {
  std::string name;
  TensorType type;
  Role role = Role::activation;
  uint64_t offset = 0, bytes = 0;
  bool persistent = false;
  bool frozen = false;  // a param no program trains (no gradient, optimizer state or master)
  // ZeRO-1 (sgrt/data_parallel.h): the rank whose optimizer update writes this
  // tensor (-1: every rank's), and whether that rank alone keeps it (the
  // moments: on the other ranks bytes is 0 and no program touches it).
  int updated_by = -1;
  bool sharded = false;
  InitKind init = InitKind::zeros;
  float init_a = 0, init_b = 0;
  uint64_t init_seed = 0;
  int init_buffer = -1;  // init == buffer: index into Model::buffer (exported graphs)
  std::string loc;  // "file:line"
};

// Parameter element counts, trained and frozen.
struct ParamCounts {
  uint64_t trained = 0, frozen = 0;
};
inline ParamCounts count_params(const std::vector<TensorInfo>& tensors) {
  ParamCounts c;
  for (const TensorInfo& t : tensors)
    if (t.role == Role::param) (t.frozen ? c.frozen : c.trained) += static_cast<uint64_t>(numel(t.type.shape));
  return c;
}

struct OpInfoLoaded {
  OpCode code;
  std::vector<int> in, out;
  Attrs attrs;
  // The typed scale specs the loader decodes from the IR: a quantize's output
  // (quant[0]), a qmatmul's operands a and b. Kernels read these, never attributes.
  ScaleSpec quant[2];
  std::string loc;
};

}  // namespace sgrt
