// A loaded, verified .sg file, decoded into plain structs every backend uses.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sgrt/mapped_file.h"
#include "sgrt/status.h"
#include "sgrt/tensor_info.h"

namespace sg { struct Model; }

namespace sgrt {

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
  // load_bytes's checks on bytes the caller keeps (an export's output), without
  // a copy; footer false: the FlatBuffer alone, its footer not yet appended.
  static Status check_bytes(std::span<const uint8_t> bytes, const std::string& label, bool footer = true);

  const sg::Model& root() const { return *root_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::vector<ProgramInfo>& programs() const { return programs_; }
  int find_program(const std::string& name) const;
  int find_tensor(const std::string& name) const;
  uint64_t arena_bytes() const { return arena_bytes_; }  // the memory plan's figure
  // What a backend allocates: arena_bytes() rounded up to kArenaAlignment (at
  // least one block); checked at load not to overflow and to fit a size_t.
  uint64_t arena_alloc_bytes() const { return arena_alloc_bytes_; }
  int loss() const { return loss_; }
  int train_state() const { return train_state_; }
  int lr() const { return lr_; }
  const std::vector<std::pair<std::string, int>>& metrics() const { return metrics_; }
  const std::vector<std::pair<std::string, int>>& outputs() const { return outputs_; }
  int find_output(const std::string& name) const;  // the tensor of sg.output(name, ...); -1 if none
  const std::string& label() const { return label_; }
  // The .sg file's bytes, as loaded: load_file maps the file (read-only,
  // private), load_bytes keeps the vector it is given.
  std::span<const uint8_t> file_bytes() const { return bytes_; }
  // Drops the pages of `part` (a range of file_bytes()) from memory, where the
  // file is mapped: they are read from the file again if touched. An exported
  // file's weights need not stay resident once copied into an arena.
  void release_file_pages(std::span<const uint8_t> part) const;
  // The bytes of Model.buffers[index] (sized to its tensor, checked at load).
  std::span<const uint8_t> buffer(int index) const;
  // A program the runtime derives from the file's before a backend prepares
  // them (data-parallel train_step parts, sgrt/data_parallel.h).
  void add_program(ProgramInfo p) { programs_.push_back(std::move(p)); }
  // ZeRO-1 (sgrt/data_parallel.h), also before a backend prepares them: a
  // program keeps only the ops this rank runs; tensors no op uses any more
  // lose their storage (bytes 0) and the arena closes up over them; the
  // update's writer and sharing are noted on each tensor.
  void set_ops(size_t program, std::vector<OpInfoLoaded> ops) { programs_.at(program).ops = std::move(ops); }
  Status drop_storage(const std::vector<int>& ids);
  void set_updated_by(int tensor, int rank, bool sharded);
  // The compiled train_step's checkpoint identity, kept when a derived model
  // drops some of its ops (0: none kept; checkpoint.h computes it).
  uint64_t kept_step_identity() const { return kept_step_identity_; }
  void keep_step_identity(uint64_t id) { kept_step_identity_ = id; }
  // A program to adjust before a backend prepares it (a rank's dropout offsets).
  ProgramInfo& program(int i) { return programs_[static_cast<size_t>(i)]; }

 private:
  static Status load(std::unique_ptr<Model> m, const std::string& label, std::unique_ptr<Model>* out, bool footer = true);
  Status decode();
  std::vector<uint8_t> owned_;  // load_bytes's
  MappedFile mapped_;           // load_file's
  std::span<const uint8_t> bytes_;
  const sg::Model* root_ = nullptr;
  std::string label_;
  std::vector<TensorInfo> tensors_;
  std::vector<ProgramInfo> programs_;
  std::vector<std::pair<std::string, int>> metrics_, outputs_;
  uint64_t arena_bytes_ = 0, arena_alloc_bytes_ = 0, kept_step_identity_ = 0;
  int loss_ = -1, train_state_ = -1, lr_ = -1;
};

}  // namespace sgrt
