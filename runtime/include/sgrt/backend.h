// A device that runs a model's programs over one arena. CPU, CUDA and Vulkan
// implement it; everything a backend needs is resolved in prepare(), so a
// missing kernel fails at load and run() never allocates.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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
  // Device memory prepare() allocated (arena, kernel workspace, error record; not
  // the driver's own context): run() allocates none, so it is also the peak.
  // 0 for the CPU, whose arena is host memory.
  virtual uint64_t device_bytes() const { return 0; }
  // Whether this backend's kernel table has (op, dtypes); asked before anything runs.
  bool supports_op(OpCode code, const std::vector<DType>& in, const std::vector<DType>& out) const;

  // prepare() then refuses, before allocating, an arena over `bytes` (the
  // fuzzers load models with huge declared arenas and run only small ones).
  void limit_arena(uint64_t bytes) { arena_limit_ = bytes; }

 protected:
  // The arena size prepare() allocates: the model's arena_alloc_bytes(), proven
  // at load, within limit_arena(). Every backend sizes its arena by this alone.
  Status arena_size(const Model& model, uint64_t* bytes) const;

 private:
  uint64_t arena_limit_ = UINT64_MAX;
};

// "cpu" (always), "cuda", "vulkan" when built in; an error lists what is available.
Status make_backend(const std::string& name, std::unique_ptr<Backend>* out);
// The backends built into this binary ("cpu", then "vulkan" and "cuda" when
// they are), as a list and as one "cpu, vulkan" string; and whether one of them
// has a kernel for (op, dtypes): read from its kernel table, no device is opened.
std::vector<std::string> built_backends();
std::string built_in_backends();
Status backend_supports_op(const std::string& backend, OpCode code, const std::vector<DType>& in,
                           const std::vector<DType>& out, bool* yes);

// Every op of `model` that `backend` has no kernel for, as "op(dtypes) at
// file:line", one entry per distinct op and dtypes; no device is opened.
Status missing_ops(const std::string& backend, const Model& model, std::vector<std::string>* missing);

}  // namespace sgrt
