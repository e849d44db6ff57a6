// Embedding lookup and its gradient (kernels/cpu/embedding.cpp). table [V, D],
// ids i32 [N] (any shape, flattened), y / dy [N, D]; off = {table or dtable, ids,
// y or dy}; n = N, p = {V, D, ...}. An id outside [0, V) sets the error word (the
// host names the op) and leaves zeros.
// embedding: one invocation per element of y. A frozen q8_0 / q4_1 table
// (blocks.glsl kind in OP bits 10-11, p[2] bytes per row) is decoded as its rows
// are gathered.
// embedding_grad: dtable's row of an id is the sum of dy's rows at that id's
// positions, added in position order as the CPU's loop adds them (bit-identical,
// no float atomics), yet with the positions side by side. Three dispatches, the
// phase in OP bits 8-9, over N scratch words `next` and N `has_prev` from p[2]:
//  1: zero dtable and has_prev;
//  2: one invocation per position r: next[r] = the next position with r's id
//     (N: none), and has_prev[next[r]] = 1 (each position is one's next at most);
//  0: one invocation per (position r without a previous one, column c): walks
//     r's chain, summing dy's column c, and writes the id's dtable element.
#version 450
#include "blocks.glsl"
layout(local_size_x = 256) in;

const uint kOp = OP & 0xFFu;
const uint kPhase = (OP >> 8) & 3u;
const uint kBlocks = (OP >> 10) & 3u;  // 0: an f32 table

bool valid(int id) { return id >= 0 && uint(id) < pc.p[0]; }

void main() {
  uint vocab = pc.p[0], d = pc.p[1], n = pc.n;
  if (kOp == OP_Embedding) {
    FOR_EACH_INDEX(i, n * d) {
      int id = I[pc.off[1] + i / d];
      float v = 0.0;
      if (valid(id)) v = kBlocks != 0u ? block_value(kBlocks, pc.off[0], pc.p[2], uint(id), i % d) : F[pc.off[0] + uint(id) * d + i % d];
      else report_error();
      F[pc.off[2] + i] = v;
    }
    return;
  }
  uint next = pc.p[2], has_prev = pc.p[2] + n;
  if (kPhase == 1u) {
    FOR_EACH_INDEX(i, vocab * d) F[pc.off[0] + i] = 0.0;
    FOR_EACH_INDEX(r, n) scratch[has_prev + r] = 0u;
  } else if (kPhase == 2u) {
    FOR_EACH_INDEX(r, n) {
      int id = I[pc.off[1] + r];
      if (!valid(id)) report_error();
      uint s = r + 1u;
      while (s < n && I[pc.off[1] + s] != id) ++s;
      scratch[next + r] = s;
      if (s < n) scratch[has_prev + s] = 1u;
    }
  } else {
    FOR_EACH_INDEX(i, n * d) {
      uint r = i / d, c = i % d;
      int id = I[pc.off[1] + r];
      if (scratch[has_prev + r] != 0u || !valid(id)) continue;
      float sum = 0.0;
      for (uint s = r; s < n; s = scratch[next + s]) sum += F[pc.off[2] + s * d + c];
      F[pc.off[0] + uint(id) * d + c] = sum;
    }
  }
}
