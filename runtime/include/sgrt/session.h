// A model on a backend: initializes parameters, moves tensors in and out, runs
// programs. One Session owns one arena.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "sgrt/backend.h"
#include "sgrt/model.h"

namespace sgrt {

class Session {
 public:
  static Status create(std::shared_ptr<const Model> model, std::unique_ptr<Backend> backend,
                       std::unique_ptr<Session>* out);

  // Parameters from their initializers mixed with `seed`; optimizer state zero;
  // the train state {0, total_steps}. The tensors marked in `supplied` (by id;
  // empty: none) are left for the caller, who writes them next: a checkpoint's
  // (checkpoint_tensors(), sgrt/checkpoint.h) or a weights file's
  // (weights_file_tensors(), sgrt/gguf_weights.h). Drawing SmolLM2's 134 M
  // initial values only to overwrite them took 4.8 s of every run.
  Status init(uint64_t seed, int64_t total_steps, const std::vector<bool>& supplied = {});

  Status write(int tensor, const void* src, size_t bytes);
  // Bytes [at, at + bytes) of the tensor: a large weight written in pieces,
  // so no copy of the whole of it sits beside the arena.
  Status write_range(int tensor, uint64_t at, const void* src, size_t bytes);
  Status read(int tensor, void* dst, size_t bytes) const;
  // Bytes [at, at + bytes) of the tensor: one row of a model's logits, not all of them.
  Status read_range(int tensor, uint64_t at, void* dst, size_t bytes) const;
  Status read_scalar(int tensor, float* out) const;
  Status run(int program);
  Status find_program(const std::string& name, int* out) const;

  const Model& model() const { return *model_; }
  Backend& backend() { return *backend_; }

 private:
  Session(std::shared_ptr<const Model> m, std::unique_ptr<Backend> b) : model_(std::move(m)), backend_(std::move(b)) {}
  std::shared_ptr<const Model> model_;
  std::unique_ptr<Backend> backend_;
};

// The initial values of a parameter (f32), exactly as Session::init writes them.
std::vector<float> initial_values(const TensorInfo& t, uint64_t seed);

}  // namespace sgrt
