// Shared by attention.comp (forward) and attention_grad.comp (dq; dk and dv):
// fused causal attention (kernels/cpu/attention.cpp gives the semantics). q, y,
// dy, dq are [B, T, H*Dh], k, v, dk, dv [B, T, Hkv*Dh], lse [B, H, T]; query
// head h reads kv head h / (H / Hkv).
// A workgroup owns R rows (query rows: the forward and dq; key rows: dk, dv)
// and streams tiles of S rows of the other side through workgroup memory. The
// G = 128 / R invocations of an owned row split the work without talking: each
// scores every G-th streamed row (into a shared [rows, S] tile), then reads the
// whole tile and accumulates every G-th of the row's Dh outputs in registers.
// So a tile costs three barriers, and the T x T scores never leave a tile. Every
// sum runs in a fixed order (no atomics): runs repeat bit for bit.
// off = {q, k, v, y, lse, dy}; dim = {dq, dk, dv} (gradients); n = B;
// p = {T, H, Hkv}; f[0] = 1 / sqrt(Dh); constant_id 1 = Dh | R << 8 | S << 16
// (Dh at most 128; lower_attention.cpp picks R and S to fit workgroup memory).
// Tiles hold rows of LD = Dh + 1 words: the rows an instruction reads at one
// column fall in different banks.
#ifndef SGRT_ATTENTION_GLSL
#define SGRT_ATTENTION_GLSL
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

const uint THREADS = 128u;
layout(local_size_x = THREADS) in;
layout(constant_id = 1) const uint SHAPE = 64u | 32u << 8 | 32u << 16;
const uint DH = SHAPE & 0xFFu, R = (SHAPE >> 8) & 0xFFu, S = SHAPE >> 16;
const uint G = THREADS / R;              // invocations per owned row
const uint DIMS = (DH + G - 1u) / G;     // outputs g, g + G, ... of a row: one invocation's
const uint LD = DH + 1u;

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

// out[t] (t < SPT) = row `own` of tile a . row first + G t of the streamed tile
// b (clamped to its last row), each summed in order of d: a row of a loads once
// for SPT products.
const uint SPT = (S + G - 1u) / G;
#define DOTS(out, a, own, b, first)                                          \
  {                                                                         \
    [[unroll]] for (uint t_ = 0u; t_ < SPT; ++t_) out[t_] = 0.0;            \
    for (uint d_ = 0u; d_ < DH; ++d_) {                                     \
      float x_ = a[(own) * LD + d_];                                        \
      [[unroll]] for (uint t_ = 0u; t_ < SPT; ++t_)                         \
        out[t_] += x_ * b[min((first) + G * t_, S - 1u) * LD + d_];         \
    }                                                                       \
  }

#endif
