// Decoding runs of a GGUF block-format matrix (q8_0, q4_1: blocks of 32 along a
// row, formats/gguf_blocks.h) to f32, for the kernels that read a frozen
// quantized base: dequant_matmul (inside the GEMM's packing and its one-row
// path) and embedding. Built without FMA contraction, so the values are the
// file's, bit for bit, on every ISA.
#pragma once
#include <cstdint>

#include "sgrt/dtype.h"

namespace sgrt::cpu {

// out[0 .. n) = the elements at flat indices i0 .. i0 + n of a row-major block
// matrix (element i lives in block i / 32 at position i % 32; rows are whole
// blocks, so flat indices never straddle rows inside a block).
void gguf_decode_run(DType t, const void* data, int64_t i0, int64_t n, float* out);

}  // namespace sgrt::cpu
