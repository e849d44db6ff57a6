// The compiler's graph: tensors and ops as the DSL builds them, then the
// programs, optimizer and memory plan the passes add. Serialized by
// serialize.cpp into the scaled-graph IR (ir/schema/sg.fbs).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "recipes.h"
#include "sg_generated.h"
#include "sgrt/attrs.h"
#include "sgrt/ops.h"
#include "sgrt/scale_spec.h"
#include "sgrt/shape.h"
#include "sgrt/status.h"

namespace sgrt::compiler {

struct Loc {
  std::string file;
  int line = 0;
  std::string str() const { return file.empty() ? "<builtin>" : file + ":" + std::to_string(line); }
};

struct Init {
  sg::InitKind kind = sg::InitKind::zeros;
  float a = 0, b = 0;
  uint64_t seed = 0;
};

// An input's declared value range (sg.input's `range`, or its data set's).
struct ValueRange {
  float lo = 0, hi = 0;
};

struct Tensor {
  std::string name;
  TensorType type;
  sg::Role role = sg::Role::activation;
  Loc loc;
  Init init;
  ScaleSpec scale;                 // core's typed spec (sgrt/scale_spec.h)
  std::optional<ValueRange> range;  // inputs only
  int grad_of = -1;
  bool persistent = false;  // lives across steps: params, optimizer state, inputs
  bool frozen = false;      // params only: no gradient, optimizer state or master (sg.freeze)
  DType base_dtype = DType::f32;  // params only: sg.lora's base, q8_0 / q4_1 blocks if it qualifies (frozen_base.h)
  // Filled by the memory plan.
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

struct Op {
  OpCode code;
  std::vector<int> in, out;
  Attrs attrs;
  Loc loc;
  int origin = -1;  // backward ops: index in Graph::forward of the op they differentiate
  int recomputes = -1;  // a forward op run again for backward (sg.checkpoint): its index in Graph::forward
};

struct Program {
  std::string name;
  std::vector<Op> ops;
  uint64_t peak_bytes = 0;
};

struct OptimizerConfig {
  sg::OptimizerKind kind = sg::OptimizerKind::none;
  float lr = 1e-3f, momentum = 0.9f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.f;
  sg::ScheduleKind schedule = sg::ScheduleKind::constant;
  int64_t warmup_steps = 0;
  float min_lr_ratio = 0.f;
  std::string state = "fp32";  // state precision level: fp32, O1, O2, O3 (docs/optimizer.md)
  float clip = 0.f;            // > 0: clip gradients to this global norm
};

struct DataConfig {
  std::string dataset, path;
  std::vector<std::pair<std::string, int>> fields;  // data field -> input tensor
  bool shuffle = true;
  int64_t batch = 0;
  std::map<std::string, std::string> options;  // the data set's own settings (sg.data.csv's delimiter, ...)
};

struct TrainConfig {
  int64_t epochs = 1, steps = 0, log_every = 50;
  uint64_t seed = 1;
  int64_t accumulate = 1;  // micro-batches per optimizer step (compiler/accumulate.h)
  int64_t eval_every = 0;  // held-out evaluation every N steps (0: the command line's --eval-every)
};

struct Graph {
  std::string name, source, recipe = "fp32";
  std::vector<std::string> keep;      // layers / params kept in high precision
  RecipeSwitches switches;
  bool plan_scales = true;            // false: plain per-tensor current amax everywhere
  bool infer_only = false;            // only the eval and infer programs: no gradients, no optimizer state
  std::vector<Tensor> tensors;
  std::vector<Op> forward;            // as the DSL built it
  std::vector<std::pair<size_t, size_t>> checkpoints;  // sg.checkpoint: [begin, end) of forward, recomputed for backward
  std::vector<Program> programs;      // filled by build_programs()
  // sg.program: name -> the outputs it computes (also in `outputs`, which infer leaves to it)
  std::vector<std::pair<std::string, std::vector<int>>> declared_programs;
  int loss = -1;
  std::vector<std::pair<std::string, int>> metrics, outputs;
  OptimizerConfig optimizer;
  DataConfig data;
  TrainConfig train;
  int train_state = -1, lr = -1;      // i32[2] {step, total steps}; f32[] learning rate
  uint64_t arena_bytes = 0, persistent_bytes = 0, naive_bytes = 0;

  int add_tensor(Tensor t);
  // Appends an op, inferring its outputs' types; errors cite `loc`.
  Status add_op(OpCode code, std::vector<int> in, Attrs attrs, Loc loc, std::vector<int>* out);
  // Single-output convenience; returns -1 and sets *st on error.
  int op1(OpCode code, std::vector<int> in, Attrs attrs, Loc loc, Status* st);
  // Appends to `ops` instead of the forward list (autodiff, optimizer). `loc`
  // is taken by value: callers often pass a tensor's loc, and adding outputs
  // may move the tensors.
  Status add_op_to(std::vector<Op>* ops, OpCode code, std::vector<int> in, Attrs attrs, Loc loc,
                   std::vector<int>* out, sg::Role out_role);
  // Appends an op that writes existing tensors in place (optimizer updates);
  // their types must be what the op infers.
  Status add_inplace_op_to(std::vector<Op>* ops, OpCode code, std::vector<int> in, Attrs attrs, Loc loc,
                           std::vector<int> out);
  const Tensor& t(int id) const { return tensors[id]; }
  int find_tensor(const std::string& name) const;
  int find_program(const std::string& name) const;
};

}  // namespace sgrt::compiler
