// Embedding lookup and its gradient (kernels/cpu/embedding.cpp). table [V, D],
// ids i32 [N] (any shape, flattened), y / dy [N, D]; off = {table or dtable, ids,
// y or dy}; n = N, p = {V, D}. An id outside [0, V) sets the error word (the host
// names the op) and leaves zeros.
// embedding: one invocation per element of y.
// embedding_grad: one invocation per column of dtable, walking the positions in
// order and adding dy's row into the row of its id: the CPU's loop, so repeated
// ids sum in the same order (bit-identical, no float atomics). Specialization
// OP | 1 << 8 is the zero fill of dtable that runs first. A frozen q8_0 / q4_1
// table (blocks.glsl kind in OP bits 9-10, p[2] bytes per row) is decoded as its
// rows are gathered.
#version 450
#include "blocks.glsl"
layout(local_size_x = 256) in;

const uint kOp = OP & 0xFFu;
const bool kZero = ((OP >> 8) & 1u) == 1u;
const uint kBlocks = (OP >> 9) & 3u;  // 0: an f32 table

bool valid(int id) {
  if (id >= 0 && uint(id) < pc.p[0]) return true;
  report_error();
  return false;
}

void main() {
  uint vocab = pc.p[0], d = pc.p[1];
  if (kOp == OP_Embedding) {
    FOR_EACH_INDEX(i, pc.n * d) {
      int id = I[pc.off[1] + i / d];
      float v = 0.0;
      if (valid(id)) v = kBlocks != 0u ? block_value(kBlocks, pc.off[0], pc.p[2], uint(id), i % d) : F[pc.off[0] + uint(id) * d + i % d];
      F[pc.off[2] + i] = v;
    }
  } else if (kZero) {
    FOR_EACH_INDEX(i, vocab * d) F[pc.off[0] + i] = 0.0;
  } else {
    FOR_EACH_INDEX(c, d) {
      for (uint r = 0u; r < pc.n; ++r) {
        int id = I[pc.off[1] + r];
        if (valid(id)) F[pc.off[0] + uint(id) * d + c] += F[pc.off[2] + r * d + c];
      }
    }
  }
}
