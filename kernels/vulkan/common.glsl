// What every sgrt compute shader shares: the arena (binding 0, seen as float,
// int and uint words; or its address, binding 3, below), the error word
// (binding 1), the scratch words (binding 2:
// cross-workgroup counters, each op its own, zero between ops), the push
// constants and the op code the pipeline was specialized on. Mirrored by
// runtime/src/vulkan/push.h.
#ifndef SGRT_COMMON_GLSL
#define SGRT_COMMON_GLSL

#include "ops.glsl"

#if SGRT_ARENA_ADDRESS
// The *_addr build of every shader: the arena through its device address
// (binding 3 holds it), for an arena past maxStorageBufferRange, which bounds
// a storage-buffer binding but not a buffer reference. F, I and U index it
// exactly as the bound arena's arrays do.
#extension GL_EXT_buffer_reference : require
layout(buffer_reference, std430, buffer_reference_align = 4) buffer ArenaFRef { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer ArenaIRef { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer ArenaURef { uint v[]; };
layout(set = 0, binding = 3) uniform ArenaAddress {
  ArenaFRef arena_f;
  ArenaIRef arena_i;
  ArenaURef arena_u;
};
#define F arena_f.v
#define I arena_i.v
#define U arena_u.v
#else
layout(set = 0, binding = 0) buffer ArenaF { float F[]; };
layout(set = 0, binding = 0) buffer ArenaI { int I[]; };
layout(set = 0, binding = 0) buffer ArenaU { uint U[]; };
#endif
// 0 while all is well; a kernel that finds bad data (a label out of range)
// writes its op's tag + 1 and the host names that op after the run.
layout(set = 0, binding = 1) buffer Errors { uint error_tag; };
layout(set = 0, binding = 2) buffer Scratch { uint scratch[]; };

// Offsets are in 4-byte words from the arena's start. dim/stride describe up to
// 8 axes for the strided kernels (gather, reduce_axes).
layout(push_constant) uniform Push {
  uint off[6];
  uint n;
  uint p[3];
  float f[4];
  uint dim[8];
  uint stride[8];
  uint tag;
} pc;

// The op this pipeline runs (a value of ops.glsl), or a shader-specific variant.
layout(constant_id = 0) const uint OP = 0u;

void report_error() { atomicCompSwap(error_tag, 0u, pc.tag + 1u); }

// Grid-stride loop bounds for 1-D kernels launched with local size 256.
#define FOR_EACH_INDEX(i, count) \
  for (uint i = gl_GlobalInvocationID.x; i < (count); i += gl_NumWorkGroups.x * gl_WorkGroupSize.x)

#endif
