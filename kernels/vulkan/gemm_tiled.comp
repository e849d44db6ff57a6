// gemm_tiled.glsl with 128x128 tiles of C (8x8 per invocation): products that
// give a GPU enough workgroups at this size.
#version 450
#define R 2
#include "gemm_tiled.glsl"
