// The CPU backend: host memory arena and the kernels of kernels/cpu.
#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "backends.h"
#include "cpu/op_args.h"
#include "cpu_quant_replay.h"
#include "product_fusion.h"

namespace sgrt {
namespace {

struct BoundOp {
  cpu::CpuKernel fn;
  cpu::OpArgs args;
  const OpInfoLoaded* op;
  size_t index;  // op's place in its program (ops fused into it are gone from the list)
  // A fused bias the product's output overlaps: copied from bias_source into
  // staged_bias (where args.bias points) before the op runs.
  const float* bias_source = nullptr;
  std::vector<float> staged_bias{};
  QuantReplay::Entry* replay = nullptr;  // a quantize replayed (cpu_quant_replay.h; replay_ owns it), or null
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(bool fuse) : fuse_(fuse) {}
  ~CpuBackend() override {
    if (arena_) ::munmap(arena_, size_);
  }
  const char* name() const override { return "cpu"; }

  Status prepare(const Model& model) override {
    if (arena_) return Status::Runtime("cpu backend: prepare called twice");
    uint64_t bytes;
    SG_TRY(arena_size(model, &bytes));
    // Anonymous pages: zero, page-aligned, and resident only once touched, so
    // the transient range of a program that never runs (sgrt run's eval)
    // costs no memory.
    void* p = bytes ? ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) : MAP_FAILED;
    if (p == MAP_FAILED) return Status::Runtime("cpu backend: cannot allocate the " + std::to_string(bytes) + "-byte arena");
    arena_ = static_cast<uint8_t*>(p);
    size_ = bytes;
    const std::vector<TensorInfo>& ts = model.tensors();
    std::vector<bool> written(ts.size(), false);
    for (const ProgramInfo& p : model.programs())
      for (const OpInfoLoaded& op : p.ops)
        for (int id : op.out) written[id] = true;
    const bool replay = quant_replay_enabled();
    for (const ProgramInfo& p : model.programs()) {
      std::vector<BoundOp> ops;
      for (const OpInfoLoaded& op : p.ops) {
        BoundOp b{nullptr, cpu::OpArgs{op.code, &op.attrs, {}, {}, op.quant}, &op, ops.size()};
        std::vector<DType> in, out;
        for (int id : op.in) {
          b.args.in.push_back(cpu::TensorArg{arena_ + ts[id].offset, &ts[id].type, numel(ts[id].type.shape)});
          in.push_back(ts[id].type.dtype);
        }
        for (int id : op.out) {
          b.args.out.push_back(cpu::TensorArg{arena_ + ts[id].offset, &ts[id].type, numel(ts[id].type.shape)});
          out.push_back(ts[id].type.dtype);
        }
        b.fn = cpu::find_cpu_kernel(op.code, in, out);
        if (!b.fn) {
          std::string sig;
          for (DType d : in) sig += std::string(sig.empty() ? "" : ", ") + dtype_name(d);
          return Status::Unsupported(op.loc + ": the cpu backend has no kernel for " + std::string(op_info(op.code).name) +
                                     "(" + sig + ")");
        }
        if (replay) b.replay = replay_.entry_for(model, op, written);
        ops.push_back(std::move(b));
      }
      if (fuse_) fuse_adds(model, p, &ops);
      programs_.push_back(std::move(ops));
    }
    prepared(model);
    return Status::Ok();
  }

  // The fusions of product_fusion.h: the product writes the last add's output, with
  // the bias in its epilogue or the addend (and a bias) added as it stores, and
  // then a ReLU's or a relu_grad's output; the broadcasts, adds and activations
  // no longer run.
  void fuse_adds(const Model& model, const ProgramInfo& p, std::vector<BoundOp>* ops) {
    std::vector<bool> gone(ops->size(), false);
    std::vector<int> product(ops->size());  // the op that writes op i's output, once fused
    for (size_t i = 0; i < ops->size(); ++i) product[i] = static_cast<int>(i);
    auto at = [&](int tensor) { return reinterpret_cast<const float*>(arena_ + model.tensors()[tensor].offset); };
    auto set_bias = [&](BoundOp& mm, int bias, bool stage) {
      mm.args.bias = at(bias);
      if (stage) {
        mm.bias_source = mm.args.bias;
        mm.staged_bias.resize(static_cast<size_t>(numel(model.tensors()[bias].type.shape)));
        mm.args.bias = mm.staged_bias.data();  // a vector's storage stays put when the op is moved
      }
    };
    const std::vector<BiasFusion> bias = find_bias_fusions(model, p);
    const std::vector<AddendFusion> addend = find_addend_fusions(model, p, bias);
    for (const BiasFusion& f : bias) {
      BoundOp& mm = (*ops)[f.matmul];
      mm.args.out = (*ops)[f.add].args.out;
      set_bias(mm, f.bias, f.stage_bias);
      gone[f.broadcast] = gone[f.add] = true;
      product[f.add] = f.matmul;
    }
    for (const AddendFusion& f : addend) {
      BoundOp& mm = (*ops)[f.matmul];
      mm.args.addend = at(f.addend);
      mm.args.out = (*ops)[f.add].args.out;
      gone[f.add] = true;
      product[f.add] = f.matmul;
      if (f.bias_add < 0) continue;
      mm.args.out = (*ops)[f.bias_add].args.out;
      set_bias(mm, f.bias, f.stage_bias);
      gone[f.broadcast] = gone[f.bias_add] = true;
      product[f.bias_add] = f.matmul;
    }
    for (const ActivationFusion& f : find_activation_fusions(model, p, bias, addend)) {
      BoundOp& mm = (*ops)[product[f.product]];
      mm.args.act = cpu::Activation{f.mask < 0, f.mask < 0 ? nullptr : at(f.mask)};
      gone[f.op] = true;
      if (!f.in_place) {
        mm.args.out = (*ops)[f.op].args.out;
        continue;
      }
      const int from = p.ops[f.op].out[0];  // its readers read the product's output instead
      for (size_t k = f.op + 1; k < ops->size(); ++k)
        for (size_t j = 0; j < p.ops[k].in.size(); ++j)
          if (p.ops[k].in[j] == from) (*ops)[k].args.in[j].data = mm.args.out[0].data;
    }
    std::vector<BoundOp> kept;
    for (size_t i = 0; i < ops->size(); ++i)
      if (!gone[i]) kept.push_back(std::move((*ops)[i]));
    *ops = std::move(kept);
  }

  Status write(uint64_t offset, const void* src, size_t bytes) override {
    if (offset > size_ || bytes > size_ - offset) return Status::Runtime("cpu backend: write outside the arena");
    std::memcpy(arena_ + offset, src, bytes);
    replay_.invalidate(offset, bytes);
    return Status::Ok();
  }

  Status read(uint64_t offset, void* dst, size_t bytes) override {
    if (offset > size_ || bytes > size_ - offset) return Status::Runtime("cpu backend: read outside the arena");
    std::memcpy(dst, arena_ + offset, bytes);
    return Status::Ok();
  }

  Status run(int program) override {
    if (program < 0 || program >= static_cast<int>(programs_.size())) return Status::Runtime("cpu backend: no such program");
    if (profiling()) return run_timed(program);
    for (BoundOp& b : programs_[program]) SG_TRY(run_op(b));
    return Status::Ok();
  }

  Status sync() override { return Status::Ok(); }

 private:
  static Status run_op(BoundOp& b) {
    if (b.bias_source) std::memcpy(b.staged_bias.data(), b.bias_source, sizeof(float) * b.staged_bias.size());
    Status st = b.replay ? QuantReplay::run(*b.replay, b.args) : b.fn(b.args);
    if (!st.ok()) return st.with_context(b.op->loc);
    return st;
  }

  Status run_timed(int program) {
    ProgramProfile& prof = profile_of(program);
    using Clock = std::chrono::steady_clock;
    for (BoundOp& b : programs_[program]) {
      Clock::time_point start = Clock::now();
      SG_TRY(run_op(b));
      prof.op_seconds[b.index] += std::chrono::duration<double>(Clock::now() - start).count();
    }
    ++prof.runs;
    return Status::Ok();
  }

  const bool fuse_;
  uint8_t* arena_ = nullptr;
  size_t size_ = 0;
  std::vector<std::vector<BoundOp>> programs_;
  QuantReplay replay_;
};

}  // namespace

Status make_cpu_backend(std::unique_ptr<Backend>* out, bool fuse) {
  *out = std::make_unique<CpuBackend>(fuse);
  return Status::Ok();
}

}  // namespace sgrt
