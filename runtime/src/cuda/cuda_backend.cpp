// The CUDA backend: one device arena sized by the memory plan, one stream, every
// op bound to its kernels at prepare (bind.h). run() enqueues launches only: no
// allocation, no host synchronization. write/read copy through the stream and wait;
// sync() and read() also report a bad label a classifier kernel recorded.
//
// prepare, in order: resolve every op to a binder (a missing kernel fails before
// anything is allocated); bind once with the arena at address 0 to learn the
// scratch size; check arena + scratch against free device memory; allocate; bind
// for real (GEMMs then time cuBLASLt's candidates: lt_gemm.h); capture each
// program's launches into a CUDA graph that run() replays (program_graph.h; not
// when profiling, which times each op's launches). A norm followed by the
// per-tensor quantize of its y is bound as a pair that shares an amax slot.
// Switches (docs/cuda.md): SGRT_CUDA_AUTOTUNE=0, SGRT_CUDA_FUSE=0, SGRT_CUDA_GRAPH=0,
// SGRT_CUDA_DECODE_BASE=0, SGRT_CUDA_FP8_BLOCK=cublaslt|chunked, SGRT_CUDA_VERBOSE=1.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "../backends.h"
#include "cuda/bind.h"
#include "cuda/cuda_status.h"
#include "program_graph.h"
#include "sgrt/checked_math.h"

namespace sgrt {
namespace {

using namespace cuda;

Binder find_binder(const OpInfoLoaded& op, const std::vector<TensorInfo>& ts, std::string* sig) {
  std::vector<DType> in, out;
  for (int id : op.in) in.push_back(ts[id].type.dtype);
  for (int id : op.out) out.push_back(ts[id].type.dtype);
  if (Binder fn = find_kernel(kernel_table(), op.code, in, out)) return fn;
  auto list = [](const std::vector<DType>& v) {
    std::string s;
    for (DType d : v) s += std::string(s.empty() ? "" : ", ") + dtype_name(d);
    return s;
  };
  *sig = std::string(op_info(op.code).name) + "(" + list(in) + ") -> (" + list(out) + ")";
  return nullptr;
}

// An environment switch that is on unless set to "0".
bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return !v || std::strcmp(v, "0") != 0;
}

// A norm whose y feeds the next op, a quantize with one scale for the tensor:
// the norm can reduce the quantize's amax while it writes y (bind.h, fused_amax).
bool norm_feeds_quantize(const OpInfoLoaded& norm, const OpInfoLoaded& next) {
  if (norm.code != OpCode::LayerNorm && norm.code != OpCode::RmsNorm) return false;
  if (next.code != OpCode::Quantize || next.in.empty() || next.in[0] != norm.out[0]) return false;
  QuantGranularity g = next.quant[0].granularity;
  return g == QuantGranularity::tensor || g == QuantGranularity::nvfp4;
}

std::string mib(size_t bytes) { return std::to_string((bytes + (1u << 20) - 1) >> 20) + " MiB"; }

struct BoundOp {
  Launch launch;
  const OpInfoLoaded* op;
};

class CudaBackend final : public Backend {
 public:
  ~CudaBackend() override {
    if (stream_) cudaStreamSynchronize(stream_);
    for (auto& program : events_)
      for (cudaEvent_t e : program)
        if (e) cudaEventDestroy(e);
    graphs_.clear();
    programs_.clear();  // cuBLASLt plans go before their handle
    if (lt_) cublasLtDestroy(lt_);
    cudaFree(workspace_);
    cudaFree(arena_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  const char* name() const override { return "cuda"; }

  Status open() {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      cudaGetLastError();
      return Status::Unsupported(std::string("no CUDA device: ") +
                                 (e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none"));
    }
    cudaDeviceProp p{};
    SG_CUDA(cudaSetDevice(0));
    SG_CUDA(cudaGetDeviceProperties(&p, 0));
    device_name_ = p.name;
    dev_.cc = p.major * 10 + p.minor;
    dev_.sms = p.multiProcessorCount;
    dev_.smem_optin = p.sharedMemPerBlockOptin;
    SG_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    SG_CUBLAS(cublasLtCreate(&lt_));
    autotune_ = env_on("SGRT_CUDA_AUTOTUNE");
    fuse_norm_quantize_ = env_on("SGRT_CUDA_FUSE");
    graphs_on_ = env_on("SGRT_CUDA_GRAPH");
    decode_base_ = env_on("SGRT_CUDA_DECODE_BASE");
    const char* block = std::getenv("SGRT_CUDA_FP8_BLOCK");
    const std::string b = block ? block : "";
    if (b == "cublaslt") fp8_block_ = BindCtx::Fp8Block::cublaslt;
    else if (b == "chunked") fp8_block_ = BindCtx::Fp8Block::chunked;
    else if (!b.empty()) return Status::Invalid("cuda backend: SGRT_CUDA_FP8_BLOCK is cublaslt or chunked, not '" + b + "'");
    const char* verbose = std::getenv("SGRT_CUDA_VERBOSE");
    verbose_ = verbose && std::strcmp(verbose, "0") != 0;
    return Status::Ok();
  }

  Status prepare(const Model& model) override {
    if (arena_) return Status::Runtime("cuda backend: prepare called twice");
    const std::vector<TensorInfo>& ts = model.tensors();
    std::vector<std::vector<std::pair<Binder, const OpInfoLoaded*>>> resolved;
    for (const ProgramInfo& p : model.programs()) {
      resolved.emplace_back();
      for (const OpInfoLoaded& op : p.ops) {
        std::string sig;
        Binder b = find_binder(op, ts, &sig);
        if (!b) return Status::Unsupported(op.loc + ": the cuda backend has no kernel for " + sig);
        resolved.back().push_back({b, &op});
      }
    }
    uint64_t arena_bytes;
    SG_TRY(arena_size(model, &arena_bytes));
    size_t scratch_bytes = 0;
    SG_TRY(bind_all(resolved, ts, 0, 0, &scratch_bytes));  // dry run: sizes and errors only
    size_t free_b = 0, total_b = 0, need;
    if (!checked_add<size_t>(arena_bytes, scratch_bytes, &need) || !checked_add<size_t>(need, sizeof(ErrorRecord), &need))
      return Status::Runtime("cuda backend: the arena and kernel workspace overflow a size_t");
    SG_CUDA(cudaMemGetInfo(&free_b, &total_b));
    if (need > free_b)
      return Status::Runtime("cuda backend: the model needs " + mib(need) + " of device memory (arena " + mib(arena_bytes) +
                             ", kernel workspace " + mib(scratch_bytes) + ") but " + device_name_ + " has " +
                             mib(free_b) + " free of " + mib(total_b));
    SG_CUDA(cudaMalloc(&arena_, arena_bytes));
    SG_CUDA(cudaMalloc(&workspace_, scratch_bytes + sizeof(ErrorRecord)));
    workspace_bytes_ = scratch_bytes + sizeof(ErrorRecord);
    SG_CUDA(cudaMemset(arena_, 0, arena_bytes));
    SG_CUDA(cudaMemset(workspace_, 0, scratch_bytes + sizeof(ErrorRecord)));
    size_ = arena_bytes;
    errors_ = reinterpret_cast<ErrorRecord*>(static_cast<uint8_t*>(workspace_) + scratch_bytes);
    size_t again = 0;
    SG_TRY(bind_all(resolved, ts, reinterpret_cast<uintptr_t>(arena_), reinterpret_cast<uintptr_t>(workspace_), &again));
    if (again > scratch_bytes) return Status::Runtime("cuda backend: binding reserved more scratch than its dry run");
    prepared(model);
    if (profiling())
      for (const ProgramInfo& p : model.programs()) {
        events_.emplace_back(p.ops.size() + 1);
        for (cudaEvent_t& e : events_.back()) SG_CUDA(cudaEventCreate(&e));
      }
    else if (graphs_on_)
      SG_TRY(capture_graphs(model));
    return Status::Ok();
  }

  Status write(uint64_t offset, const void* src, size_t bytes) override {
    if (offset > size_ || bytes > size_ - offset) return Status::Runtime("cuda backend: write outside the arena");
    SG_CUDA(cudaMemcpyAsync(static_cast<uint8_t*>(arena_) + offset, src, bytes, cudaMemcpyHostToDevice, stream_));
    return cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize(write)");
  }

  Status read(uint64_t offset, void* dst, size_t bytes) override {
    if (offset > size_ || bytes > size_ - offset) return Status::Runtime("cuda backend: read outside the arena");
    SG_CUDA(cudaMemcpyAsync(dst, static_cast<uint8_t*>(arena_) + offset, bytes, cudaMemcpyDeviceToHost, stream_));
    SG_CUDA(cudaStreamSynchronize(stream_));
    return recorded_errors();
  }

  Status run(int program) override {
    if (program < 0 || program >= static_cast<int>(programs_.size())) return Status::Runtime("cuda backend: no such program");
    if (profiling()) return run_timed(program);
    if (!graphs_.empty()) return graphs_[program] ? graphs_[program]->launch(stream_) : Status::Ok();
    for (const BoundOp& b : programs_[program]) SG_TRY(launch(b));
    return Status::Ok();
  }

  Status sync() override {
    SG_CUDA(cudaStreamSynchronize(stream_));
    return recorded_errors();
  }

  uint64_t device_bytes() const override { return size_ + workspace_bytes_; }

 private:
  // The op's line and name go on an error only: run() builds no string per launch.
  Status launch(const BoundOp& b) {
    Status st = b.launch(stream_);
    if (!st.ok()) return st.with_context(b.op->loc + ": " + std::string(op_info(b.op->code).name));
    return st;
  }

  // One graph per program with ops (an empty one runs nothing).
  Status capture_graphs(const Model& model) {
    for (size_t p = 0; p < programs_.size(); ++p) {
      graphs_.emplace_back();
      if (programs_[p].empty()) continue;
      const std::string& name = model.programs()[p].name;
      SG_TRY(ProgramGraph::capture(stream_, name, [&]() -> Status {
        for (const BoundOp& b : programs_[p]) SG_TRY(launch(b));
        return Status::Ok();
      }, &graphs_.back()));
      if (verbose_)
        std::fprintf(stderr, "cuda: program %s captured as a graph: %zu ops, %zu nodes\n", name.c_str(),
                     programs_[p].size(), graphs_.back()->nodes());
    }
    return Status::Ok();
  }

  // An event before the first op and after each; the run waits for the last to
  // read the spans (bound ops are the program's ops, in order: nothing is dropped).
  Status run_timed(int program) {
    std::vector<cudaEvent_t>& ev = events_[program];
    SG_CUDA(cudaEventRecord(ev[0], stream_));
    for (size_t i = 0; i < programs_[program].size(); ++i) {
      SG_TRY(launch(programs_[program][i]));
      SG_CUDA(cudaEventRecord(ev[i + 1], stream_));
    }
    SG_CUDA(cudaEventSynchronize(ev.back()));
    ProgramProfile& prof = profile_of(program);
    for (size_t i = 0; i + 1 < ev.size(); ++i) {
      float ms = 0;
      SG_CUDA(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
      prof.op_seconds[i] += ms * 1e-3;
    }
    ++prof.runs;
    return Status::Ok();
  }

  // Binds every op against an arena at `arena` and a workspace at `work` (0 in the
  // dry run: pointers are then offsets, which is all the binders' checks look at).
  // The dry run's scratch starts at 256, not 0: an op's first reservation must not
  // be a null pointer, which a binder reads as "none" (cuBLASLt's scale pointers
  // would be left unset and the dry run would plan another GEMM than the real bind).
  Status bind_all(const std::vector<std::vector<std::pair<Binder, const OpInfoLoaded*>>>& resolved,
                  const std::vector<TensorInfo>& ts, uintptr_t arena, uintptr_t work, size_t* scratch_peak) {
    Scratch scratch(work != 0 ? work : 256);
    BindCtx ctx;
    ctx.dev = dev_;
    ctx.lt = lt_;
    ctx.scratch = &scratch;
    ctx.errors = errors_;
    ctx.autotune = autotune_ && arena != 0;  // timing needs live addresses
    ctx.verbose = verbose_ && arena != 0;  // one line per choice: the real bind's
    ctx.decode_base = decode_base_;
    ctx.fp8_block = fp8_block_;
    programs_.clear();
    tags_.clear();
    for (const auto& prog : resolved) {
      std::vector<BoundOp> ops;
      bool pair_open = false;  // the op before was a norm fused with this quantize
      for (size_t i = 0; i < prog.size(); ++i) {
        const auto& [binder, op] = prog[i];
        OpArgs a{op->code, &op->attrs, {}, {}, op->quant};
        for (int id : op->in) a.in.push_back(Tensor{reinterpret_cast<void*>(arena + ts[id].offset), &ts[id].type, numel(ts[id].type.shape)});
        for (int id : op->out) a.out.push_back(Tensor{reinterpret_cast<void*>(arena + ts[id].offset), &ts[id].type, numel(ts[id].type.shape)});
        // The quantize of a fused norm/quantize pair keeps the pair's scratch (its
        // amax slot; a null pointer in the dry run, whose scratch starts at 0).
        const bool second_of_pair = pair_open;
        pair_open = false;
        if (!second_of_pair) {
          scratch.begin_op();
          ctx.fused_amax = nullptr;
          if (fuse_norm_quantize_ && i + 1 < prog.size() && norm_feeds_quantize(*op, *prog[i + 1].second)) {
            ctx.fused_amax = static_cast<unsigned*>(scratch.reserve(sizeof(unsigned)));
            pair_open = true;
          }
        }
        ctx.tag = static_cast<int32_t>(tags_.size());
        tags_.push_back(op);
        Launch l;
        Status st = binder(a, ctx, &l);
        if (!st.ok()) return st.with_context(op->loc + ": cuda " + std::string(op_info(op->code).name));
        if (second_of_pair) ctx.fused_amax = nullptr;
        ops.push_back({std::move(l), op});
      }
      programs_.push_back(std::move(ops));
    }
    *scratch_peak = scratch.peak();
    return Status::Ok();
  }

  // A label (classifier), id (embedding) or position (rope_at, kv_attention) error a kernel recorded since the
  // last check (then cleared).
  Status recorded_errors() {
    ErrorRecord e{};
    SG_CUDA(cudaMemcpy(&e, errors_, sizeof e, cudaMemcpyDeviceToHost));
    if (!e.flag) return Status::Ok();
    // On the ops' stream: a non-blocking stream is not ordered after the legacy one, so a plain cudaMemset
    // could land after the next run's kernels and erase what they record.
    SG_CUDA(cudaMemsetAsync(errors_, 0, sizeof e, stream_));
    const OpInfoLoaded* op = e.tag >= 0 && e.tag < static_cast<int32_t>(tags_.size()) ? tags_[e.tag] : nullptr;
    bool ids = op && (op->code == OpCode::Embedding || op->code == OpCode::EmbeddingGrad);
    std::string where = op ? op->loc + ": " + std::string(op_info(op->code).name) : std::string("classifier");
    if (op && (op->code == OpCode::RopeAt || op->code == OpCode::KvAttention))
      return Status::Runtime(where + ": position " + std::to_string(e.label) + " is negative or past the KV cache");
    return Status::Runtime(where + (ids ? ": id " : ": label ") + std::to_string(e.label) + " at row " +
                           std::to_string(e.row) + " is outside [0, " + std::to_string(e.classes) + ")");
  }

  std::string device_name_;
  Device dev_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* arena_ = nullptr;
  void* workspace_ = nullptr;  // kernel scratch, then the ErrorRecord
  ErrorRecord* errors_ = nullptr;
  size_t size_ = 0;
  size_t workspace_bytes_ = 0;
  std::vector<std::vector<BoundOp>> programs_;
  std::vector<std::unique_ptr<ProgramGraph>> graphs_;  // per program (null: no ops); empty: launch op by op
  std::vector<const OpInfoLoaded*> tags_;  // ErrorRecord::tag -> op
  std::vector<std::vector<cudaEvent_t>> events_;  // when profiling: per program, ops + 1
  bool autotune_ = true;            // SGRT_CUDA_AUTOTUNE=0: cuBLASLt's first heuristic choice
  bool fuse_norm_quantize_ = true;  // SGRT_CUDA_FUSE=0: every op runs its own kernels
  bool graphs_on_ = true;           // SGRT_CUDA_GRAPH=0: run() launches op by op instead of replaying a graph
  bool decode_base_ = true;         // SGRT_CUDA_DECODE_BASE=0: dequant_matmul on its tiled kernel alone
  BindCtx::Fp8Block fp8_block_ = BindCtx::Fp8Block::automatic;  // SGRT_CUDA_FP8_BLOCK
  bool verbose_ = false;            // SGRT_CUDA_VERBOSE=1: a line per tuned GEMM
};

}  // namespace

Status make_cuda_backend(std::unique_ptr<Backend>* out) {
  auto be = std::make_unique<CudaBackend>();
  SG_TRY(be->open());
  *out = std::move(be);
  return Status::Ok();
}

}  // namespace sgrt
