// A loaded, verified .sg file, decoded into plain structs every backend uses.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sgrt/attrs.h"
#include "sgrt/ops.h"
#include "sgrt/shape.h"
#include "sgrt/status.h"

namespace sg { struct Model; }

namespace sgrt {

// Every tensor's arena offset is a multiple of this (the compiler's memory
// plan aligns to it); kernels rely on it for aligned element access.
constexpr uint64_t kTensorAlignment = 64;

enum class Role : uint8_t { input = 0, param, grad, opt_state, activation, scratch, constant, scale_state };
enum class InitKind : uint8_t { zeros = 0, ones, uniform, normal, buffer };

struct TensorInfo {
  std::string name;
  TensorType type;
  Role role = Role::activation;
  uint64_t offset = 0, bytes = 0;
  bool persistent = false;
  InitKind init = InitKind::zeros;
  float init_a = 0, init_b = 0;
  uint64_t init_seed = 0;
  int init_buffer = -1;  // init == buffer: index into Model::buffer (exported graphs)
  std::string loc;  // "file:line"
};

struct OpInfoLoaded {
  OpCode code;
  std::vector<int> in, out;
  Attrs attrs;
  std::string loc;
};

struct ProgramInfo {
  std::string name;
  std::vector<OpInfoLoaded> ops;
  uint64_t peak_bytes = 0;
};

class Model {
 public:
  // Reads, checksums, verifies and validates; errors are prefixed with the path.
  static Status load_file(const std::string& path, std::unique_ptr<Model>* out);
  static Status load_bytes(std::vector<uint8_t> bytes, const std::string& label, std::unique_ptr<Model>* out);

  const sg::Model& root() const { return *root_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::vector<ProgramInfo>& programs() const { return programs_; }
  int find_program(const std::string& name) const;
  int find_tensor(const std::string& name) const;
  uint64_t arena_bytes() const { return arena_bytes_; }
  int loss() const { return loss_; }
  int train_state() const { return train_state_; }
  int lr() const { return lr_; }
  const std::vector<std::pair<std::string, int>>& metrics() const { return metrics_; }
  const std::vector<std::pair<std::string, int>>& outputs() const { return outputs_; }
  const std::string& label() const { return label_; }
  // The .sg file's bytes, as loaded.
  std::span<const uint8_t> file_bytes() const { return bytes_; }
  // The bytes of Model.buffers[index] (sized to its tensor, checked at load).
  std::span<const uint8_t> buffer(int index) const;

 private:
  Status decode();
  std::vector<uint8_t> bytes_;
  const sg::Model* root_ = nullptr;
  std::string label_;
  std::vector<TensorInfo> tensors_;
  std::vector<ProgramInfo> programs_;
  std::vector<std::pair<std::string, int>> metrics_, outputs_;
  uint64_t arena_bytes_ = 0;
  int loss_ = -1, train_state_ = -1, lr_ = -1;
};

}  // namespace sgrt
