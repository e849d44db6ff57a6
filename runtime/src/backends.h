// Constructors of the built-in backends (internal to the runtime).
#pragma once
#include <memory>

#include "sgrt/backend.h"

namespace sgrt {

// fuse = false: every op runs as compiled, without the fusions of
// product_fusion.h; tests compare the two.
Status make_cpu_backend(std::unique_ptr<Backend>* out, bool fuse = true);
#ifdef SGRT_WITH_VULKAN
Status make_vulkan_backend(std::unique_ptr<Backend>* out);  // runtime/src/vulkan/
#endif
#ifdef SGRT_WITH_CUDA
Status make_cuda_backend(std::unique_ptr<Backend>* out);    // runtime/src/cuda/
#endif

}  // namespace sgrt
