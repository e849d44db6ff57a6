// Rotary position embedding (kernels/cpu/rope.cpp): x [B, T, H*Dh]; in each
// head pair i (i < Dh/2) turns by angle t * base^(-2i/Dh) at position t (f[2] =
// -1: the other way, the gradient). Pair i is elements (i, i + Dh/2), "rotate
// half"; specialization OP | 1 << 8: (2i, 2i + 1), interleaved (GGUF llama).
// rope_at (decoding with a KV cache) turns row t as position pos + t, pos the
// i32 at off[1]; a negative pos is reported as the op's error.
// One invocation per (row, head, pair).
// off = {x, pos (rope_at), y}; n = rows * H * Dh/2; p = {T, H, Dh}; f[0] + f[1] =
// base^(-2/Dh) (the host's double as two floats), f[2] = sign.
//
// The CPU computes the angle in double. Here it is a float-float (about 48
// bits): base^(-2i/Dh) by repeated squaring, times t, reduced modulo 2 pi in
// three pieces; only the reduced angle (in [-pi, pi]) is a plain float, so long
// contexts keep their precision. Its sine and cosine are computed here too:
// Vulkan lets the built-ins be off by 2^-11 absolute, and NVIDIA's are
// approximations whose error, over a model, shows at 1e-5 relative.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;

// a * b exactly, as hi + lo (Dekker's product; precise: no fused contractions).
vec2 two_prod(float a, float b) {
  precise float p = a * b;
  precise float ta = 4097.0 * a, tb = 4097.0 * b;
  precise float ah = ta - (ta - a), bh = tb - (tb - b);
  precise float al = a - ah, bl = b - bh;
  precise float e = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
  return vec2(p, e);
}

vec2 ff_mul(vec2 a, vec2 b) {
  vec2 t = two_prod(a.x, b.x);
  precise float e = t.y + (a.x * b.y + a.y * b.x);
  precise float s = t.x + e;
  precise float err = e - (s - t.x);
  return vec2(s, err);
}

// 2 pi = kPi2a + kPi2b + kPi2c; kPi2a has 8 significant bits, so k * kPi2a is exact.
const float kPi2a = 6.28125, kPi2b = 0.0019353071693331003, kPi2c = 1.0253131677018246e-11;
const float kInvPi2 = 0.15915494;
const bool kInterleaved = (OP >> 8) == 1u;
const bool kAt = (OP & 0xFFu) == OP_RopeAt;

// (sin a, cos a) for a in [-pi, pi] to about one ulp: a = q pi/2 + r with pi/2 in
// three pieces (q <= 2, so q * the first piece is exact), |r| <= pi/4, then the
// minimax polynomials of Cephes' sinf/cosf on r.
vec2 sincos_reduced(float a) {
  precise float q = round(a * 0.63661977);
  precise float r = ((a - q * 1.5703125) - q * 4.837512969970703125e-4) - q * 7.54978995489188216e-8;
  precise float z = r * r;
  precise float sr = r + r * z * (-1.6666654611e-1 + z * (8.3321608736e-3 + z * -1.9515295891e-4));
  precise float cr = 1.0 - 0.5 * z + z * z * (4.166664568298827e-2 + z * (-1.388731625493765e-3 + z * 2.443315711809948e-5));
  int quadrant = int(q) & 3;
  if (quadrant == 0) return vec2(sr, cr);
  if (quadrant == 1) return vec2(cr, -sr);
  if (quadrant == 2) return vec2(-sr, -cr);
  return vec2(-cr, sr);
}

void main() {
  uint T = pc.p[0], H = pc.p[1], Dh = pc.p[2], half_ = Dh / 2u;
  int pos = kAt ? I[pc.off[1]] : 0;
  if (pos < 0) {
    report_error();
    return;
  }
  FOR_EACH_INDEX(idx, pc.n) {
    uint i = idx % half_, h = (idx / half_) % H, r = idx / (half_ * H);
    vec2 freq = vec2(1.0, 0.0), b = vec2(pc.f[0], pc.f[1]);
    for (uint e = i; e > 0u; e >>= 1) {
      if ((e & 1u) != 0u) freq = ff_mul(freq, b);
      b = ff_mul(b, b);
    }
    vec2 angle = ff_mul(vec2(float(uint(pos) + r % T), 0.0), freq);
    precise float k = round(angle.x * kInvPi2);
    precise float a = ((angle.x - k * kPi2a) - k * kPi2b) + (angle.y - k * kPi2c);
    vec2 sc = sincos_reduced(a);
    float c = sc.y, s = pc.f[2] * sc.x;
    uint first = r * H * Dh + h * Dh + (kInterleaved ? 2u * i : i), other = kInterleaved ? 1u : half_;
    uint x = pc.off[0] + first, y = pc.off[2] + first;
    float x1 = F[x], x2 = F[x + other];
    F[y] = x1 * c - x2 * s;
    F[y + other] = x1 * s + x2 * c;
  }
}
