// Reading a frozen quantized base (GGUF q8_0 / q4_1 blocks, formats/gguf_blocks.h)
// in place in the arena: bytes out of the arena's words, one element of a row of
// blocks decoded by formats.glsl. Blocks start at even bytes (34 and 20 bytes, rows
// of whole blocks in a 4-byte aligned tensor), so an f16 field never straddles a word.
#ifndef SGRT_BLOCKS_GLSL
#define SGRT_BLOCKS_GLSL

#include "common.glsl"
#include "formats/formats.glsl"

// Table dtypes as the lowerings specialize them (lower_blocks.cpp).
const uint BLOCK_Q8_0 = 1u, BLOCK_Q4_1 = 2u;

uint arena_byte(uint off, uint b) { return (U[off + b / 4u] >> (8u * (b % 4u))) & 0xFFu; }
uint arena_u16(uint off, uint b) { return (U[off + b / 4u] >> (8u * (b % 4u))) & 0xFFFFu; }  // b even

// Element (r, c) of a block tensor at word `off` whose rows are `row_bytes` long.
float block_value(uint kind, uint off, uint row_bytes, uint r, uint c) {
  uint j = c % 32u;
  if (kind == BLOCK_Q8_0) {
    uint b = r * row_bytes + c / 32u * 34u;
    return fmt_q8_0_value(arena_u16(off, b), arena_byte(off, b + 2u + j));
  }
  uint b = r * row_bytes + c / 32u * 20u;
  uint byte = arena_byte(off, b + 4u + (j & 15u));
  return fmt_q4_1_value(arena_u16(off, b), arena_u16(off, b + 2u), j < 16u ? byte & 0xFu : byte >> 4);
}

#endif
