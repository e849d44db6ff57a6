#include "program_graph.h"

#include "cuda/cuda_status.h"

namespace sgrt::cuda {

ProgramGraph::~ProgramGraph() {
  if (exec_) cudaGraphExecDestroy(exec_);
}

Status ProgramGraph::capture(cudaStream_t stream, const std::string& label, const std::function<Status()>& enqueue,
                             std::unique_ptr<ProgramGraph>* out) {
  // Thread-local mode: a call on this thread that is unsafe under capture (an
  // allocation, a synchronous copy) fails instead of ending up outside the graph.
  SG_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  Status st = enqueue();
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);  // always: it leaves capture mode
  if (st.ok()) st = cuda_status(ended, "cudaStreamEndCapture");
  std::unique_ptr<ProgramGraph> g(new ProgramGraph());
  g->launch_call_ = "cudaGraphLaunch (program " + label + ")";
  if (st.ok()) st = cuda_status(cudaGraphGetNodes(graph, nullptr, &g->nodes_), "cudaGraphGetNodes");
  // A program whose ops all turned out to be no-ops (reshapes in place) captures nothing.
  if (st.ok() && g->nodes_ > 0) st = cuda_status(cudaGraphInstantiate(&g->exec_, graph, 0), "cudaGraphInstantiate");
  if (graph) cudaGraphDestroy(graph);  // the executable graph keeps its own copy
  if (!st.ok()) {
    cudaGetLastError();  // a failed capture leaves its error for the next call to find
    return st.with_context("cuda backend: capturing program " + label + " as a graph (SGRT_CUDA_GRAPH=0 launches op by op)");
  }
  *out = std::move(g);
  return Status::Ok();
}

Status ProgramGraph::launch(cudaStream_t stream) const {
  if (!exec_) return Status::Ok();
  return cuda_status(cudaGraphLaunch(exec_, stream), launch_call_.c_str());
}

}  // namespace sgrt::cuda
