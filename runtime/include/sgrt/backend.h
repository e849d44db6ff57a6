// A device that runs a model's programs over one arena. CPU, CUDA and Vulkan
// implement it; everything a backend needs is resolved in prepare(), so a
// missing kernel fails at load and run() never allocates.
#pragma once
#include <memory>
#include <string>

#include "sgrt/model.h"
#include "sgrt/status.h"

namespace sgrt {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // Allocates the arena (once) and resolves every op of every program to a
  // kernel; errors name the op, its dtypes and its source line.
  virtual Status prepare(const Model& model) = 0;
  virtual Status write(uint64_t offset, const void* src, size_t bytes) = 0;
  virtual Status read(uint64_t offset, void* dst, size_t bytes) = 0;
  virtual Status run(int program) = 0;
  virtual Status sync() = 0;
};

// "cpu" (always), "cuda", "vulkan" when built in; an error lists what is available.
Status make_backend(const std::string& name, std::unique_ptr<Backend>* out);
// The backends built in: "cpu", then ", vulkan" and ", cuda" when they are.
std::string built_in_backends();

}  // namespace sgrt
