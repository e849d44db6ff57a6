// Fused causal attention, backward (attention.glsl has the layout), from the
// forward's lse and D = rowsum(dy * y):
//   P = exp(scale Q K^T - lse), dS = P * (dY V^T - D),
//   dq = scale dS K, dk = scale dS^T Q, dv = P^T dY.
// Specialization OP | 1 << 8 selects the variant:
//   0 (dq): one workgroup per (R query rows, batch * head), walking S-row key
//     tiles up to the diagonal;
//   1 (dk, dv): one workgroup per (R key rows, batch * kv head), walking the
//     group's query heads in order and, for each, S-row query tiles from the
//     diagonal on; so dk and dv sum over the heads without atomics.
// The invocations of an owned row form P and dS for every G-th streamed row
// into the shared [queries, keys] tiles, then each adds the whole tile into
// its G-th of the row's outputs.
#version 450
#include "attention.glsl"

const bool kKeys = (OP >> 8) == 1u;
const uint QROWS = kKeys ? S : R, KROWS = kKeys ? R : S;  // the query and key rows of a tile pair
const uint DPARTS = THREADS / QROWS;  // partial sums of a query row's D

shared float Qs[QROWS * LD], dYs[QROWS * LD], Ks[KROWS * LD], Vs[KROWS * LD];
shared float P[QROWS * (KROWS + 1u)], dS[QROWS * (KROWS + 1u)];  // [query, key]
shared float D_part[THREADS];  // D of query row u: D_part[u DPARTS ..] summed in order
shared float row_lse[QROWS];

// Query rows q0.. of head h: Qs, dYs, their lse, and D's partial sums:
// invocation (u, t) adds dy * y over columns t, t + DPARTS, ... of row u.
void load_queries(uint b, uint h, uint q0) {
  uint qh = q_head(b, h);
  LOAD_TILE(Qs, QROWS, pc.off[0] + qh, C_, q0);
  LOAD_TILE(dYs, QROWS, pc.off[5] + qh, C_, q0);
  uint tid = gl_LocalInvocationIndex, u = tid / DPARTS, i = q0 + u;
  float part = 0.0;
  if (i < T_) {
    uint row = qh + i * C_;
    for (uint d = tid % DPARTS; d < DH; d += DPARTS) part += F[pc.off[5] + row + d] * F[pc.off[3] + row + d];
  }
  D_part[tid] = part;
  if (tid < QROWS && q0 + tid < T_) row_lse[tid] = F[pc.off[4] + (b * H_ + h) * T_ + q0 + tid];
}

void load_keys(uint b, uint hk, uint j0) {
  uint kvh = kv_head(b, hk);
  LOAD_TILE(Ks, KROWS, pc.off[1] + kvh, CKV_, j0);
  LOAD_TILE(Vs, KROWS, pc.off[2] + kvh, CKV_, j0);
}

// P and dS of the owned row (a query row for dq, a key row for dk, dv) with
// streamed rows g, g + G, ... of the tile pair: those in [lo, hi) are visible,
// the others get 0.
void tile_grads(uint own, uint lo, uint hi) {
  uint g = gl_LocalInvocationIndex % G;
  float s[SPT], dp[SPT];
  if (g + G * (SPT - 1u) >= lo && g < hi) {  // some of them visible
    if (kKeys) {
      DOTS(s, Ks, own, Qs, g);
      DOTS(dp, Vs, own, dYs, g);
    } else {
      DOTS(s, Qs, own, Ks, g);
      DOTS(dp, dYs, own, Vs, g);
    }
  }
  [[unroll]] for (uint t = 0u; t < SPT; ++t) {
    uint x = g + G * t, u = kKeys ? x : own, c = kKeys ? own : x;
    if (x >= S) break;
    float p = 0.0, ds = 0.0;
    if (x >= lo && x < hi) {
      float D = 0.0;
      for (uint k = 0u; k < DPARTS; ++k) D += D_part[u * DPARTS + k];
      p = exp(s[t] * pc.f[0] - row_lse[u]);
      ds = p * (dp[t] - D);
    }
    P[u * (KROWS + 1u) + c] = p;
    dS[u * (KROWS + 1u) + c] = ds;
  }
}

void dq_rows() {
  uint r = gl_LocalInvocationIndex / G, g = gl_LocalInvocationIndex % G;
  uint q0 = gl_WorkGroupID.x * R, bh = gl_WorkGroupID.y, b = bh / H_, h = bh % H_;
  float acc[DIMS];
  [[unroll]] for (uint k = 0u; k < DIMS; ++k) acc[k] = 0.0;
  load_queries(b, h, q0);
  uint i = q0 + r, keys = min(q0 + R, T_);
  for (uint j0 = 0u; j0 < keys; j0 += S) {
    barrier();
    load_keys(b, h / (H_ / HKV_), j0);
    barrier();
    uint valid = i < T_ ? min(i + 1u - min(j0, i + 1u), S) : 0u;  // keys j0 .. i of this tile
    tile_grads(r, 0u, valid);
    barrier();
    for (uint c = 0u; c < valid; ++c) {
      float ds = dS[r * (S + 1u) + c];
      [[unroll]] for (uint k = 0u; k < DIMS; ++k)
        if (g + G * k < DH) acc[k] += ds * Ks[c * LD + g + G * k];
    }
  }
  if (i >= T_) return;
  uint row = pc.dim[0] + q_head(b, h) + i * C_;
  [[unroll]] for (uint k = 0u; k < DIMS; ++k)
    if (g + G * k < DH) F[row + g + G * k] = pc.f[0] * acc[k];
}

void dkv_rows() {
  uint c = gl_LocalInvocationIndex / G, g = gl_LocalInvocationIndex % G;
  uint j0 = gl_WorkGroupID.x * R, bk = gl_WorkGroupID.y, b = bk / HKV_, hk = bk % HKV_;
  uint group = H_ / HKV_, j = j0 + c;
  float acc_k[DIMS], acc_v[DIMS];
  [[unroll]] for (uint k = 0u; k < DIMS; ++k) {
    acc_k[k] = 0.0;
    acc_v[k] = 0.0;
  }
  load_keys(b, hk, j0);
  for (uint gh = 0u; gh < group; ++gh) {
    for (uint q0 = j0; q0 < T_; q0 += S) {
      barrier();
      load_queries(b, hk * group + gh, q0);
      barrier();
      uint rows = min(S, T_ - q0);  // queries q0 + u, u in [j - q0, rows), see key j
      tile_grads(c, j < T_ ? max(j, q0) - q0 : rows, rows);
      barrier();
      for (uint u = 0u; u < rows; ++u) {
        float p = P[u * (R + 1u) + c], ds = dS[u * (R + 1u) + c];
        [[unroll]] for (uint k = 0u; k < DIMS; ++k) {
          if (g + G * k < DH) {
            acc_k[k] += ds * Qs[u * LD + g + G * k];
            acc_v[k] += p * dYs[u * LD + g + G * k];
          }
        }
      }
    }
  }
  if (j >= T_) return;
  uint row = kv_head(b, hk) + j * CKV_;
  [[unroll]] for (uint k = 0u; k < DIMS; ++k) {
    if (g + G * k < DH) {
      F[pc.dim[1] + row + g + G * k] = pc.f[0] * acc_k[k];
      F[pc.dim[2] + row + g + G * k] = acc_v[k];
    }
  }
}

void main() {
  if (kKeys) dkv_rows();
  else dq_rows();
}
