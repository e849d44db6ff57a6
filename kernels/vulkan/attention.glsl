// Shared by attention.comp (forward) and attention_grad.comp (dq; dk and dv):
// fused causal attention over tiles of TQ query rows and TK key rows
// (kernels/cpu/attention.cpp gives the semantics). q, y, dy, dq are
// [B, T, H*Dh], k, v, dk, dv [B, T, Hkv*Dh], lse [B, H, T]; query head h reads
// kv head h / (H / Hkv). The T x T scores never leave a TQ x TK tile in
// shared memory. Every sum runs in a fixed order (no atomics): runs repeat bit
// for bit.
// off = {q, k, v, y, lse, dy}; dim = {dq, dk, dv} (gradients); n = B;
// p = {T, H, Hkv}; f[0] = 1 / sqrt(Dh); constant_id 1 = Dh (at most 128).
// Shared tiles hold rows of LD = Dh + 1 words (the pad spreads a column's reads
// over the banks); lower_attention.cpp sizes them the same way.
#ifndef SGRT_ATTENTION_GLSL
#define SGRT_ATTENTION_GLSL
#include "common.glsl"

// The includer defines TQ and TK: the query and key rows of a tile pair; one
// invocation per (query row, key row) of it.
const uint THREADS = TQ * TK;
layout(local_size_x = THREADS) in;
layout(constant_id = 1) const uint DH = 64u;
const uint LD = DH + 1u;
// A [rows, Dh] accumulator spread over the invocations: entry e = tid + THREADS k
// is row e / Dh, column e % Dh; Dh <= 128 needs this many entries each.
#define ACC_PER_THREAD(rows) ((rows) * 128u / THREADS)

uint T_ = pc.p[0], H_ = pc.p[1], HKV_ = pc.p[2];
uint C_ = H_ * DH, CKV_ = HKV_ * DH;

// The first word of query head h's row 0 in batch b (q, y, dy, dq), and of kv head hk's (k, v, dk, dv).
uint q_head(uint b, uint h) { return b * T_ * C_ + h * DH; }
uint kv_head(uint b, uint hk) { return b * T_ * CKV_ + hk * DH; }

// tile[r][d] (r < rows) = the head's row row0 + r (0 from row `limit` on) of
// the tensor whose head row 0 is at word `base`, rows `stride` words apart.
#define LOAD_TILE_UPTO(tile, rows, base, stride, row0, limit)               \
  for (uint e_ = gl_LocalInvocationIndex; e_ < (rows) * DH; e_ += THREADS) { \
    uint r_ = e_ / DH, i_ = (row0) + r_;                                    \
    tile[r_ * LD + e_ % DH] = i_ < (limit) ? F[(base) + i_ * (stride) + e_ % DH] : 0.0; \
  }
#define LOAD_TILE(tile, rows, base, stride, row0) LOAD_TILE_UPTO(tile, rows, base, stride, row0, T_)

// The dot product of row ra of tile a with row rb of tile b, in order of d.
#define ROW_DOT(out, a, ra, b, rb)                                          \
  {                                                                         \
    out = 0.0;                                                              \
    for (uint d_ = 0u; d_ < DH; ++d_) out += a[(ra) * LD + d_] * b[(rb) * LD + d_]; \
  }

#endif
