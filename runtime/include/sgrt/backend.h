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

// One program's op times over its runs but the first (sgrt train --profile),
// which pays one-time costs (a driver compiling shaders at first use, cold
// caches). op_seconds is indexed like ProgramInfo::ops; an op a fusion folded
// into another reads 0 and its time counts as its product's.
struct ProgramProfile {
  int64_t runs = 0;
  std::vector<double> op_seconds;
  bool ran = false;  // at least once (runs is 0 after a single run)
};

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
  // Per-op timing, asked for before prepare(): the GPU backends then build
  // their programs with a timestamp after each op and wait for each run to
  // read them, the CPU reads a clock around each op. Off unless asked for.
  // GPU times are device times between the ends of consecutive ops: ops that
  // run side by side (no barrier between them) share their time unevenly.
  Status request_profile();
  // One entry per program of the prepared model; empty unless requested.
  const std::vector<ProgramProfile>& profile() const { return profile_; }
  // Whether this backend's kernel table has (op, dtypes); asked before anything runs.
  bool supports_op(OpCode code, const std::vector<DType>& in, const std::vector<DType>& out) const;

  // prepare() then refuses, before allocating, an arena over `bytes` (the
  // fuzzers load models with huge declared arenas and run only small ones).
  void limit_arena(uint64_t bytes) { arena_limit_ = bytes; }

 protected:
  // The arena size prepare() allocates: the model's arena_alloc_bytes(), proven
  // at load, within limit_arena(). Every backend sizes its arena by this alone.
  Status arena_size(const Model& model, uint64_t* bytes) const;
  // Every prepare() calls it once its programs are built: from here on
  // request_profile() is refused, and profile() has a zeroed entry per
  // program when profiling was requested.
  void prepared(const Model& model);
  bool profiling() const { return profiling_; }
  // Where a run of `program` adds its count and op times: asked once a run,
  // it hands the first run a discarded entry.
  ProgramProfile& profile_of(int program);

 private:
  uint64_t arena_limit_ = UINT64_MAX;
  bool profiling_ = false, prepared_ = false;
  std::vector<ProgramProfile> profile_;
  ProgramProfile first_run_;
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
