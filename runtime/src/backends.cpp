// Backend selection by name (GPU backends exist only when built in) and the
// arena size every backend allocates.
#include "backends.h"

namespace sgrt {

Status Backend::arena_size(const Model& model, uint64_t* bytes) const {
  *bytes = model.arena_alloc_bytes();
  if (*bytes > arena_limit_)
    return Status::Runtime(std::string(name()) + " backend: the " + std::to_string(*bytes) + "-byte arena exceeds the limit of " +
                           std::to_string(arena_limit_) + " bytes");
  return Status::Ok();
}

Status make_backend(const std::string& name, std::unique_ptr<Backend>* out) {
  if (name == "cpu") return make_cpu_backend(out);
#ifdef SGRT_WITH_VULKAN
  if (name == "vulkan") return make_vulkan_backend(out);
#endif
#ifdef SGRT_WITH_CUDA
  if (name == "cuda") return make_cuda_backend(out);
#endif
  std::string avail = "cpu";
#ifdef SGRT_WITH_VULKAN
  avail += ", vulkan";
#endif
#ifdef SGRT_WITH_CUDA
  avail += ", cuda";
#endif
  return Status::Invalid("backend '" + name + "' is not built into this sgrt (available: " + avail + ")");
}

}  // namespace sgrt
