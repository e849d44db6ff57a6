// im2col and its gradient col2im: sgrt/im2col.h's rules, a row of C channels
// at a time (the header's per-element index functions, as the GPUs run them,
// cost a handful of divisions per element). Each output row is written once,
// from its own reads, so rows split across threads freely; col2im adds a dx
// row's copies in the header's (kh, kw) order, so its sums match the GPUs'.
#include <algorithm>
#include <cstring>

#include "cpu/op_args.h"
#include "cpu/parallel.h"
#include "sgrt/im2col.h"

namespace sgrt::cpu {
namespace {

// patches [N, Ho, Wo, KH*KW*C]: row r is the patch of output pixel r.
void im2col(const Im2colGeometry& g, const float* x, float* y, int64_t rb, int64_t re) {
  for (int64_t r = rb; r < re; ++r) {
    int64_t ox = r % g.wo, t = r / g.wo, oy = t % g.ho, n = t / g.ho;
    float* dst = y + r * g.patch();
    for (int64_t ky = 0; ky < g.kh; ++ky) {
      int64_t iy = oy * g.sh - g.ph + ky;
      for (int64_t kx = 0; kx < g.kw; ++kx, dst += g.c) {
        int64_t ix = ox * g.sw - g.pw + kx;
        if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) std::memset(dst, 0, sizeof(float) * g.c);
        else std::memcpy(dst, x + ((n * g.h + iy) * g.w + ix) * g.c, sizeof(float) * g.c);
      }
    }
  }
}

// dx [N, H, W, C]: row r is input pixel r, the sum of its copies in dy.
void col2im(const Im2colGeometry& g, const float* dy, float* dx, int64_t rb, int64_t re) {
  for (int64_t r = rb; r < re; ++r) {
    int64_t ix = r % g.w, t = r / g.w, iy = t % g.h, n = t / g.h;
    float* dst = dx + r * g.c;
    std::fill(dst, dst + g.c, 0.f);
    for_each_copy(g, n, iy, ix, [&](int64_t off) {
      for (int64_t c = 0; c < g.c; ++c) dst[c] += dy[off + c];
    });
  }
}

}  // namespace

Status k_im2col(const OpArgs& a) {
  Im2colGeometry g;
  SG_TRY(im2col_geometry(a.code, a.in[0].shape(), *a.attrs, &g));
  const float* x = a.in[0].f();
  float* y = a.out[0].f();
  bool fwd = a.code == OpCode::Im2col;
  int64_t row = fwd ? g.patch() : g.c, rows = a.out[0].n / row;
  parallel_for(rows, std::max<int64_t>(1, 16384 / row), [&](int64_t rb, int64_t re) {
    if (fwd) im2col(g, x, y, rb, re);
    else col2im(g, x, y, rb, re);
  });
  return Status::Ok();
}

}  // namespace sgrt::cpu
