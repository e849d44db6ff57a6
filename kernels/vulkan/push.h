// The push constants every shader sees; mirrors kernels/vulkan/common.glsl.
#pragma once
#include <cstdint>

namespace sgrt::vk {

struct Push {
  uint32_t off[6] = {};     // arena offsets in 4-byte words
  uint32_t n = 0;           // elements, lanes or rows
  uint32_t p[3] = {};       // small integer parameters
  float f[4] = {};          // float parameters
  uint32_t dim[8] = {};     // axis sizes for the strided kernels
  uint32_t stride[8] = {};  // axis strides (in words) for the strided kernels
  uint32_t tag = 0;         // the op's index in its program, for error reports
};
static_assert(sizeof(Push) == 124, "Push must match common.glsl's push_constant block");

}  // namespace sgrt::vk
