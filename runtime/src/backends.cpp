// Backend selection by name; GPU backends exist only when built in.
#include "backends.h"

namespace sgrt {

Status make_backend(const std::string& name, std::unique_ptr<Backend>* out) {
  if (name == "cpu") return make_cpu_backend(out);
#ifdef SGRT_WITH_VULKAN
  if (name == "vulkan") return make_vulkan_backend(out);
#endif
#ifdef SGRT_WITH_CUDA
  if (name == "cuda") return make_cuda_backend(out);
#endif
  return Status::Invalid("backend '" + name + "' is not built into this sgrt (available: " + built_in_backends() + ")");
}

std::string built_in_backends() {
  std::string r = "cpu";
#ifdef SGRT_WITH_VULKAN
  r += ", vulkan";
#endif
#ifdef SGRT_WITH_CUDA
  r += ", cuda";
#endif
  return r;
}

}  // namespace sgrt
