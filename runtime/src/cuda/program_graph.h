// A program's launches captured once into a CUDA graph and replayed with one
// cudaGraphLaunch per run. The arena, the scratch and every launch's arguments
// are fixed at prepare (bind.h), so replaying the capture is the run; what it
// saves is the host's cost per launch (a few microseconds each: a LoRA step of
// SmolLM2-135M's shape makes about 3,600 of them).
#pragma once
#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>

#include "sgrt/status.h"

namespace sgrt::cuda {

class ProgramGraph {
 public:
  ProgramGraph(const ProgramGraph&) = delete;
  ProgramGraph& operator=(const ProgramGraph&) = delete;
  ~ProgramGraph();

  // Calls `enqueue` with `stream` capturing (it must only enqueue work on that
  // stream) and instantiates what it enqueued. `label` names the program in errors.
  static Status capture(cudaStream_t stream, const std::string& label, const std::function<Status()>& enqueue,
                        std::unique_ptr<ProgramGraph>* out);

  Status launch(cudaStream_t stream) const;
  size_t nodes() const { return nodes_; }

 private:
  ProgramGraph() = default;
  std::string launch_call_;  // names the program in a launch error (built once, not per run)
  cudaGraphExec_t exec_ = nullptr;
  size_t nodes_ = 0;
};

}  // namespace sgrt::cuda
