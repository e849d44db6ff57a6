// Backend selection by name (GPU backends exist only when built in), the arena
// size every backend allocates, and coverage questions answered from each
// backend's kernel table (kernels/<backend>/table.cpp) without opening a device.
#include "backends.h"

#include <set>

#include "cpu/op_args.h"
#ifdef SGRT_WITH_VULKAN
#include "vulkan/table.h"
#endif
#ifdef SGRT_WITH_CUDA
#include "cuda/bind.h"
#endif

namespace sgrt {

std::vector<std::string> built_backends() {
  std::vector<std::string> names{"cpu"};
#ifdef SGRT_WITH_VULKAN
  names.push_back("vulkan");
#endif
#ifdef SGRT_WITH_CUDA
  names.push_back("cuda");
#endif
  return names;
}

std::string built_in_backends() {
  std::string avail;
  for (const std::string& b : built_backends()) avail += (avail.empty() ? "" : ", ") + b;
  return avail;
}

namespace {

Status not_built(const std::string& name) {
  return Status::Invalid("backend '" + name + "' is not built into this sgrt (available: " + built_in_backends() + ")");
}

std::string dtypes_str(const std::vector<DType>& v) {
  std::string s;
  for (DType d : v) s += std::string(s.empty() ? "" : ", ") + dtype_name(d);
  return s;
}

}  // namespace

Status Backend::arena_size(const Model& model, uint64_t* bytes) const {
  *bytes = model.arena_alloc_bytes();
  if (*bytes > arena_limit_)
    return Status::Runtime(std::string(name()) + " backend: the " + std::to_string(*bytes) + "-byte arena exceeds the limit of " +
                           std::to_string(arena_limit_) + " bytes");
  return Status::Ok();
}

Status Backend::request_profile() {
  if (prepared_) return Status::Runtime(std::string(name()) + " backend: profiling is asked for before prepare()");
  profiling_ = true;
  return Status::Ok();
}

void Backend::prepared(const Model& model) {
  prepared_ = true;
  if (!profiling_) return;
  for (const ProgramInfo& p : model.programs()) profile_.push_back(ProgramProfile{0, std::vector<double>(p.ops.size(), 0.0)});
}

ProgramProfile& Backend::profile_of(int program) {
  if (profile_[program].ran) return profile_[program];
  profile_[program].ran = true;
  first_run_.op_seconds.assign(profile_[program].op_seconds.size(), 0.0);
  return first_run_;
}

Status make_backend(const std::string& name, std::unique_ptr<Backend>* out) {
  if (name == "cpu") return make_cpu_backend(out);
#ifdef SGRT_WITH_VULKAN
  if (name == "vulkan") return make_vulkan_backend(out);
#endif
#ifdef SGRT_WITH_CUDA
  if (name == "cuda") return make_cuda_backend(out);
#endif
  return not_built(name);
}

Status backend_supports_op(const std::string& backend, OpCode code, const std::vector<DType>& in,
                           const std::vector<DType>& out, bool* yes) {
  if (backend == "cpu") *yes = find_kernel(cpu::kernel_table(), code, in, out) != nullptr;
#ifdef SGRT_WITH_VULKAN
  else if (backend == "vulkan") *yes = find_kernel(vk::kernel_table(), code, in, out) != nullptr;
#endif
#ifdef SGRT_WITH_CUDA
  else if (backend == "cuda") *yes = find_kernel(cuda::kernel_table(), code, in, out) != nullptr;
#endif
  else return not_built(backend);
  return Status::Ok();
}

bool Backend::supports_op(OpCode code, const std::vector<DType>& in, const std::vector<DType>& out) const {
  bool yes = false;
  return backend_supports_op(name(), code, in, out, &yes).ok() && yes;
}

Status missing_ops(const std::string& backend, const Model& model, std::vector<std::string>* missing) {
  missing->clear();
  std::set<std::string> seen;
  const std::vector<TensorInfo>& ts = model.tensors();
  for (const ProgramInfo& p : model.programs())
    for (const OpInfoLoaded& op : p.ops) {
      std::vector<DType> in, out;
      for (int id : op.in) in.push_back(ts[id].type.dtype);
      for (int id : op.out) out.push_back(ts[id].type.dtype);
      bool yes = false;
      SG_TRY(backend_supports_op(backend, op.code, in, out, &yes));
      std::string sig = std::string(op_info(op.code).name) + "(" + dtypes_str(in) + ") -> (" + dtypes_str(out) + ")";
      if (!yes && seen.insert(sig).second) missing->push_back(sig + " at " + op.loc);
    }
  return Status::Ok();
}

}  // namespace sgrt
