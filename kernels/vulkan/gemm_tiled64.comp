// gemm_tiled.glsl with 64x64 tiles of C (4x4 per invocation): 4x the
// workgroups, for products whose 128x128 tiles would leave a GPU idle.
#version 450
#define R 1
#include "gemm_tiled.glsl"
