// Rotary position embedding (RoFormer; the "rotate half" pairing of GPT-NeoX
// and LLaMA): in each head of x [B, T, H*Dh], element i < Dh/2 pairs with
// i + Dh/2 and the pair turns by the angle t * base^(-2i/Dh) at position t.
// attr inverse turns the other way: the gradient of a rotation. attr interleaved
// pairs 2i with 2i + 1 instead (GPT-J, and llama.cpp's "normal" rope: GGUF llama
// files store q and k weights permuted for it). rope_at (decoding with a KV
// cache) rotates row t as position pos + t, pos read from its i32[] input.
#include <cmath>
#include <string>
#include <vector>

#include "cpu/op_args.h"
#include "cpu/parallel.h"

namespace sgrt::cpu {

Status k_rope(const OpArgs& a) {
  const Shape& s = a.in[0].shape();
  int64_t T = s[1], C = s[2], H = a.attrs->i("n_head"), Dh = C / H, half = Dh / 2;
  int64_t pos = a.code == OpCode::RopeAt ? a.in[1].i32()[0] : 0;
  if (pos < 0) return Status::Invalid("rope_at: pos " + std::to_string(pos) + " is negative");
  double base = a.attrs->f("base");
  float sign = a.attrs->i("inverse") ? -1.f : 1.f;
  // element of pair i: first at i1 = i * step1, second at i1 + other
  int64_t step1 = a.attrs->i("interleaved") ? 2 : 1, other = a.attrs->i("interleaved") ? 1 : half;
  const float* x = a.in[0].f();
  float* y = a.out[0].f();
  // Each position's cos and sin [T][half], shared by the batch's rows and the
  // heads (the trigonometry was most of the op); the angle's double arithmetic
  // as before, so the same floats.
  std::vector<double> freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) freq[i] = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(Dh));
  float* cs = static_cast<float*>(thread_scratch(0, sizeof(float) * 2 * static_cast<size_t>(T * half)));
  parallel_for(T, std::max<int64_t>(1, 256 / half), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(pos + t) * freq[i];
        cs[2 * (t * half + i)] = static_cast<float>(std::cos(angle));
        cs[2 * (t * half + i) + 1] = sign * static_cast<float>(std::sin(angle));
      }
  });
  parallel_for(s[0] * T, std::max<int64_t>(1, 4096 / C), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* row_cs = cs + 2 * (r % T) * half;
      const float* xr = x + r * C;
      float* yr = y + r * C;
      for (int64_t i = 0; i < half; ++i) {
        const float c = row_cs[2 * i], sn = row_cs[2 * i + 1];
        for (int64_t h = 0; h < H; ++h) {
          int64_t i1 = h * Dh + i * step1, i2 = i1 + other;
          float x1 = xr[i1], x2 = xr[i2];
          yr[i1] = x1 * c - x2 * sn;
          yr[i2] = x1 * sn + x2 * c;
        }
      }
    }
  });
  return Status::Ok();
}

}  // namespace sgrt::cpu
