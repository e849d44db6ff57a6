// Inverted dropout with the CPU's counter-based mask (kernels/cpu/dropout.cpp,
// sgrt/rng.h): element i of step t is kept when rng_uniform(seed, t, offset + i) >= p.
// splitmix64 runs on 32-bit halves (uvec2: x = low, y = high), so no device
// needs 64-bit integers, and the mask is the CPU's bit for bit.
// off = {x, train_state, y}; n elements; p = {seed low, seed high, step slot};
// f = {p, 1 / (1 - p)} (the CPU's floats; {0, 1} where the op passes x through);
// dim = {offset low, offset high} (the op's attribute: a rank's place in the batch).
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;

uvec2 add64(uvec2 a, uvec2 b) {
  uint carry;
  uint lo = uaddCarry(a.x, b.x, carry);
  return uvec2(lo, a.y + b.y + carry);
}

uvec2 mul64(uvec2 a, uvec2 b) {  // modulo 2^64
  uint hi, lo;
  umulExtended(a.x, b.x, hi, lo);
  return uvec2(lo, hi + a.x * b.y + a.y * b.x);
}

uvec2 xorshr64(uvec2 a, uint s) {  // a ^ (a >> s), 0 < s < 32
  return a ^ uvec2((a.x >> s) | (a.y << (32u - s)), a.y >> s);
}

uvec2 splitmix64(uvec2 x) {
  x = add64(x, uvec2(0x7F4A7C15u, 0x9E3779B9u));
  x = mul64(xorshr64(x, 30u), uvec2(0x1CE4E5B9u, 0xBF58476Du));
  x = mul64(xorshr64(x, 27u), uvec2(0x133111EBu, 0x94D049BBu));
  return xorshr64(x, 31u);
}

void main() {
  int step = I[pc.off[1] + pc.p[2]];
  uvec2 step64 = uvec2(uint(step), step < 0 ? 0xFFFFFFFFu : 0u);  // static_cast<uint64_t>(int32)
  uvec2 key = add64(splitmix64(uvec2(pc.p[0], pc.p[1]) ^ splitmix64(step64)), uvec2(pc.dim[0], pc.dim[1]));
  FOR_EACH_INDEX(i, pc.n) {
    uvec2 bits = splitmix64(add64(key, uvec2(i, 0u)));
    float u = float(bits.y >> 8) * (1.0 / 16777216.0);
    F[pc.off[2] + i] = u >= pc.f[0] ? F[pc.off[0] + i] * pc.f[1] : 0.0;
  }
}
