// Fused causal attention, forward (attention.glsl has the layout): one
// workgroup per (TQ query rows, batch * head), walking the key tiles up to the
// diagonal with an online softmax: a running row max m and sum l, the output
// accumulator rescaled by exp(m_old - m_new) when the max grows. Writes
// y = acc / l and lse = m + log(l). Invocation (r, c) = (tid / TK, tid % TK)
// scores query row r against key row c; invocations 0..TQ-1 run the row updates.
// kv_attention (decoding, kernels/cpu/attention.cpp): off = {q, k_cache,
// v_cache, y, pos}, dim = {k, v, Tmax}; query row i is position pos + i and sees
// cache rows 0..pos+i; no lse. Its first dispatch (OP | 1 << 8) copies k, v
// [B, T, Hkv*Dh] into the caches [B, Tmax, Hkv*Dh] at rows pos..; a position
// past the cache is reported as the op's error.
#version 450
#define TQ 16u
#define TK 16u
#include "attention.glsl"

shared float Qs[TQ * LD], Ks[TK * LD], Vs[TK * LD];
shared float P[TQ][TK + 1];  // a tile's scores, then exp(s - m)
shared float row_max[TQ], row_sum[TQ], row_rescale[TQ];
const uint kAcc = ACC_PER_THREAD(TQ);

const float kLowest = -3.402823466e38;  // finite: exp(kLowest - m) is 0, never NaN
const bool kKv = (OP & 0xFFu) == OP_KvAttention;

// The k, v rows of this step into the caches at rows pos..pos+T-1.
void append_to_cache(uint pos, uint tmax) {
  uint rows = T_ * CKV_;
  FOR_EACH_INDEX(e, pc.n * rows) {
    uint dst = (e / rows * tmax + pos) * CKV_ + e % rows;
    F[pc.off[1] + dst] = F[pc.dim[0] + e];
    F[pc.off[2] + dst] = F[pc.dim[1] + e];
  }
}

void main() {
  int pos_in = kKv ? I[pc.off[4]] : 0;
  uint tmax = kKv ? pc.dim[2] : T_, pos = uint(pos_in);
  if (pos_in < 0 || pos + T_ > tmax) {
    report_error();
    return;
  }
  if ((OP >> 8) == 1u) {
    append_to_cache(pos, tmax);
    return;
  }
  uint tid = gl_LocalInvocationIndex, r = tid / TK, c = tid % TK;
  uint q0 = gl_WorkGroupID.x * TQ, bh = gl_WorkGroupID.y, b = bh / H_, h = bh % H_;
  uint qh = q_head(b, h), kvh = b * tmax * CKV_ + h / (H_ / HKV_) * DH;
  LOAD_TILE(Qs, TQ, pc.off[0] + qh, C_, q0);
  if (tid < TQ) {
    row_max[tid] = kLowest;
    row_sum[tid] = 0.0;
  }
  float acc[kAcc];
  for (uint k = 0u; k < kAcc; ++k) acc[k] = 0.0;
  uint keys = pos + min(q0 + TQ, T_);  // the causal mask's last key + 1
  for (uint j0 = 0u; j0 < keys; j0 += TK) {
    barrier();  // the previous tile's readers are done
    LOAD_TILE_UPTO(Ks, TK, pc.off[1] + kvh, CKV_, j0, pos + T_);
    LOAD_TILE_UPTO(Vs, TK, pc.off[2] + kvh, CKV_, j0, pos + T_);
    barrier();
    uint i = q0 + r, j = j0 + c;
    if (i < T_ && j <= pos + i) {
      float s;
      ROW_DOT(s, Qs, r, Ks, c);
      P[r][c] = s * pc.f[0];
    }
    barrier();
    if (tid < TQ) {
      uint last = pos + q0 + tid;  // the row's last key
      uint valid = q0 + tid < T_ ? min(last + 1u - min(j0, last + 1u), TK) : 0u;  // keys j0 .. last of this tile
      float m = row_max[tid];
      for (uint cc = 0u; cc < valid; ++cc) m = max(m, P[tid][cc]);
      float a = exp(row_max[tid] - m), l = row_sum[tid] * a;
      for (uint cc = 0u; cc < TK; ++cc) {
        float p = cc < valid ? exp(P[tid][cc] - m) : 0.0;
        P[tid][cc] = p;
        l += p;
      }
      row_max[tid] = m;
      row_sum[tid] = l;
      row_rescale[tid] = a;
    }
    barrier();
    for (uint k = 0u; k < kAcc; ++k) {
      uint e = tid + THREADS * k, rr = e / DH, d = e % DH;
      if (e >= TQ * DH) break;
      float o = acc[k] * row_rescale[rr];
      for (uint cc = 0u; cc < TK; ++cc) o += P[rr][cc] * Vs[cc * LD + d];
      acc[k] = o;
    }
  }
  for (uint k = 0u; k < kAcc; ++k) {
    uint e = tid + THREADS * k, rr = e / DH, d = e % DH;
    if (e >= TQ * DH) break;
    if (q0 + rr < T_) F[pc.off[3] + qh + (q0 + rr) * C_ + d] = acc[k] / row_sum[rr];
  }
  if (!kKv && tid < TQ && q0 + tid < T_) F[pc.off[4] + bh * T_ + q0 + tid] = row_max[tid] + log(row_sum[tid]);
}
