// Fused causal attention, forward (attention.glsl has the layout): one
// workgroup per (R query rows, batch * head), walking S-row key tiles up to the
// diagonal with an online softmax: a running row max m and sum l, the output
// accumulator rescaled by exp(m_old - m_new) when the max grows. Writes
// y = acc / l and lse = m + log(l). The G invocations of a row each keep the
// same m and l (they fold the same scores in the same order) and their own
// outputs.
// kv_attention (decoding, kernels/cpu/attention.cpp): off = {q, k_cache,
// v_cache, y, pos}, dim = {k, v, Tmax}; query row i is position pos + i and sees
// cache rows 0..pos+i; no lse. Its first dispatch (OP | 1 << 8) copies k, v
// [B, T, Hkv*Dh] into the caches [B, Tmax, Hkv*Dh] at rows pos..; a position
// past the cache is reported as the op's error.
#version 450
#include "attention.glsl"

shared float Qs[R * LD], Ks[S * LD], Vs[S * LD];
shared float P[R * (S + 1u)];  // a tile's scaled scores, row r from r (S + 1)

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
  uint r = gl_LocalInvocationIndex / G, g = gl_LocalInvocationIndex % G;
  uint q0 = gl_WorkGroupID.x * R, bh = gl_WorkGroupID.y, b = bh / H_, h = bh % H_;
  uint qh = q_head(b, h), kvh = b * tmax * CKV_ + h / (H_ / HKV_) * DH;
  LOAD_TILE(Qs, R, pc.off[0] + qh, C_, q0);
  uint i = q0 + r, last = pos + i;  // query row i sees keys 0..last
  bool live = i < T_;
  float m = kLowest, l = 0.0, acc[DIMS];
  [[unroll]] for (uint k = 0u; k < DIMS; ++k) acc[k] = 0.0;
  uint keys = pos + min(q0 + R, T_);  // the causal mask's last key + 1, over the workgroup's rows
  for (uint j0 = 0u; j0 < keys; j0 += S) {
    barrier();  // the previous tile's readers are done
    LOAD_TILE_UPTO(Ks, S, pc.off[1] + kvh, CKV_, j0, pos + T_);
    LOAD_TILE_UPTO(Vs, S, pc.off[2] + kvh, CKV_, j0, pos + T_);
    barrier();
    uint valid = live ? min(last + 1u - min(j0, last + 1u), S) : 0u;  // keys j0 .. last of this tile
    if (g < valid) {
      float s[SPT];
      DOTS(s, Qs, r, Ks, g);
      [[unroll]] for (uint t = 0u; t < SPT; ++t)
        if (g + G * t < valid) P[r * (S + 1u) + g + G * t] = s[t] * pc.f[0];
    }
    barrier();
    if (valid > 0u) {  // every invocation of the row folds the whole tile, in the same order
      float mt = m;
      for (uint c = 0u; c < valid; ++c) mt = max(mt, P[r * (S + 1u) + c]);
      float a = exp(m - mt);
      l *= a;
      [[unroll]] for (uint k = 0u; k < DIMS; ++k) acc[k] *= a;
      for (uint c = 0u; c < valid; ++c) {
        float p = exp(P[r * (S + 1u) + c] - mt);
        l += p;
        [[unroll]] for (uint k = 0u; k < DIMS; ++k)
          if (g + G * k < DH) acc[k] += p * Vs[c * LD + g + G * k];
      }
      m = mt;
    }
  }
  if (!live) return;
  [[unroll]] for (uint k = 0u; k < DIMS; ++k)
    if (g + G * k < DH) F[pc.off[3] + qh + i * C_ + g + G * k] = acc[k] / l;
  if (!kKv && g == 0u) F[pc.off[4] + bh * T_ + i] = m + log(l);
}
