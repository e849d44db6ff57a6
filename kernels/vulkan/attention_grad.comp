// Fused causal attention, backward (attention.glsl has the layout), from the
// forward's lse and D = rowsum(dy * y):
//   P = exp(scale Q K^T - lse), dS = P * (dY V^T - D),
//   dq = scale dS K, dk = scale dS^T Q, dv = P^T dY.
// Specialization OP | 1 << 8 selects the variant:
//   0 (dq): one workgroup per (TQ query rows, batch * head), walking the key
//     tiles up to the diagonal;
//   1 (dk, dv): one workgroup per (TK key rows, batch * kv head), walking the
//     group's query heads in order and, for each, the query tiles from the
//     diagonal on; so dk and dv sum over the heads without atomics.
// Invocation (r, c) = (tid / TK, tid % TK) computes P and dS for query row r
// and key row c of the tile pair. Eight key rows: the four [rows, Dh] tiles fit
// 32 KiB of workgroup memory up to Dh = 128.
#version 450
#define TQ 16u
#define TK 8u
#include "attention.glsl"

const bool kKeys = (OP >> 8) == 1u;

shared float Qs[TQ * LD], dYs[TQ * LD], Ks[TK * LD], Vs[TK * LD];
shared float P[TQ][TK + 1], dS[TQ][TK + 1];
shared float D_part[TQ][TK + 1];  // D of row r: the sum of D_part[r][0..TK) in order
shared float row_lse[TQ];

// Query rows q0.. of head h: Qs, dYs, their lse, and D's partial sums: invocation
// (r, c) adds dy * y over columns c, c + TK, ... of row r.
void load_queries(uint b, uint h, uint q0) {
  uint qh = q_head(b, h);
  LOAD_TILE(Qs, TQ, pc.off[0] + qh, C_, q0);
  LOAD_TILE(dYs, TQ, pc.off[5] + qh, C_, q0);
  uint tid = gl_LocalInvocationIndex, r = tid / TK, c = tid % TK, i = q0 + r;
  float part = 0.0;
  if (i < T_) {
    uint row = qh + i * C_;
    for (uint d = c; d < DH; d += TK) part += F[pc.off[5] + row + d] * F[pc.off[3] + row + d];
  }
  D_part[r][c] = part;
  if (tid < TQ && q0 + tid < T_) row_lse[tid] = F[pc.off[4] + (b * H_ + h) * T_ + q0 + tid];
}

void load_keys(uint b, uint hk, uint j0) {
  uint kvh = kv_head(b, hk);
  LOAD_TILE(Ks, TK, pc.off[1] + kvh, CKV_, j0);
  LOAD_TILE(Vs, TK, pc.off[2] + kvh, CKV_, j0);
}

// P and dS of the tile pair (query rows q0.., key rows j0..); 0 where masked.
void tile_grads(uint q0, uint j0) {
  uint tid = gl_LocalInvocationIndex, r = tid / TK, c = tid % TK;
  uint i = q0 + r, j = j0 + c;
  float p = 0.0, ds = 0.0;
  if (i < T_ && j <= i) {
    float s, dp, D = 0.0;
    ROW_DOT(s, Qs, r, Ks, c);
    ROW_DOT(dp, dYs, r, Vs, c);
    for (uint k = 0u; k < TK; ++k) D += D_part[r][k];
    p = exp(s * pc.f[0] - row_lse[r]);
    ds = p * (dp - D);
  }
  P[r][c] = p;
  dS[r][c] = ds;
}

void dq_rows() {
  uint tid = gl_LocalInvocationIndex;
  uint q0 = gl_WorkGroupID.x * TQ, bh = gl_WorkGroupID.y, b = bh / H_, h = bh % H_;
  const uint kAcc = ACC_PER_THREAD(TQ);
  float acc[kAcc];
  for (uint k = 0u; k < kAcc; ++k) acc[k] = 0.0;
  load_queries(b, h, q0);
  uint keys = min(q0 + TQ, T_);
  for (uint j0 = 0u; j0 < keys; j0 += TK) {
    barrier();
    load_keys(b, h / (H_ / HKV_), j0);
    barrier();
    tile_grads(q0, j0);
    barrier();
    for (uint k = 0u; k < kAcc; ++k) {
      uint e = tid + THREADS * k, r = e / DH, d = e % DH;
      if (e >= TQ * DH) break;
      float a = acc[k];
      for (uint c = 0u; c < TK; ++c) a += dS[r][c] * Ks[c * LD + d];
      acc[k] = a;
    }
  }
  uint qh = q_head(b, h);
  for (uint k = 0u; k < kAcc; ++k) {
    uint e = tid + THREADS * k, r = e / DH, d = e % DH;
    if (e >= TQ * DH) break;
    if (q0 + r < T_) F[pc.dim[0] + qh + (q0 + r) * C_ + d] = pc.f[0] * acc[k];
  }
}

void dkv_rows() {
  uint tid = gl_LocalInvocationIndex;
  uint j0 = gl_WorkGroupID.x * TK, bk = gl_WorkGroupID.y, b = bk / HKV_, hk = bk % HKV_;
  uint group = H_ / HKV_;
  const uint kAcc = ACC_PER_THREAD(TK);
  float acc_k[kAcc], acc_v[kAcc];
  for (uint k = 0u; k < kAcc; ++k) {
    acc_k[k] = 0.0;
    acc_v[k] = 0.0;
  }
  load_keys(b, hk, j0);
  for (uint g = 0u; g < group; ++g) {
    for (uint q0 = j0; q0 < T_; q0 += TQ) {
      barrier();
      load_queries(b, hk * group + g, q0);
      barrier();
      tile_grads(q0, j0);
      barrier();
      for (uint k = 0u; k < kAcc; ++k) {
        uint e = tid + THREADS * k, c = e / DH, d = e % DH;
        if (e >= TK * DH) break;
        float ak = acc_k[k], av = acc_v[k];
        for (uint r = 0u; r < TQ; ++r) {
          ak += dS[r][c] * Qs[r * LD + d];
          av += P[r][c] * dYs[r * LD + d];
        }
        acc_k[k] = ak;
        acc_v[k] = av;
      }
    }
  }
  uint kvh = kv_head(b, hk);
  for (uint k = 0u; k < kAcc; ++k) {
    uint e = tid + THREADS * k, c = e / DH, d = e % DH;
    if (e >= TK * DH) break;
    if (j0 + c < T_) {
      F[pc.dim[1] + kvh + (j0 + c) * CKV_ + d] = pc.f[0] * acc_k[k];
      F[pc.dim[2] + kvh + (j0 + c) * CKV_ + d] = acc_v[k];
    }
  }
}

void main() {
  if (kKeys) dkv_rows();
  else dq_rows();
}
