// The geometry of im2col and its gradient col2im (ops.def), shared by shape
// inference and every backend's kernel. The two index functions below are the
// definition, one output element each: the CUDA kernels call them,
// kernels/vulkan/im2col.comp mirrors them, kernels/cpu/im2col.cpp applies them
// a row of C channels at a time (in the same order, for_each_copy). x [N, H, W, C] is read in KH x KW windows with
// stride (SH, SW) and zero padding (PH, PW) on both sides:
//   Ho = (H + 2 PH - KH) / SH + 1,  Wo = (W + 2 PW - KW) / SW + 1,
//   patches [N, Ho, Wo, KH*KW*C], entry (kh, kw, c) of patch (n, oy, ox) =
//   x[n, oy*SH - PH + kh, ox*SW - PW + kw, c], or 0 outside x.
#pragma once
#include <stdint.h>

#include "sgrt/attrs.h"
#include "sgrt/ops.h"
#include "sgrt/shape.h"
#include "sgrt/status.h"

#if defined(__CUDACC__)
#define SGRT_IM2COL_HD __host__ __device__
#else
#define SGRT_IM2COL_HD
#endif

namespace sgrt {

struct Im2colGeometry {
  int64_t n, h, w, c, kh, kw, sh, sw, ph, pw, ho, wo;
  SGRT_IM2COL_HD int64_t patch() const { return kh * kw * c; }
  SGRT_IM2COL_HD int64_t patches_numel() const { return n * ho * wo * patch(); }
  SGRT_IM2COL_HD int64_t image_numel() const { return n * h * w * c; }
};

// The geometry of an im2col (in: x's shape) or a col2im (in: dy's shape, H and W
// from attr size), its attributes checked; errors name the op.
Status im2col_geometry(OpCode code, const Shape& in, const Attrs& attrs, Im2colGeometry* g);

// im2col: the offset in x of patches element i, or -1 where it is padding.
SGRT_IM2COL_HD inline int64_t im2col_source(const Im2colGeometry& g, int64_t i) {
  int64_t c = i % g.c, t = i / g.c;
  int64_t kx = t % g.kw; t /= g.kw;
  int64_t ky = t % g.kh; t /= g.kh;
  int64_t ox = t % g.wo; t /= g.wo;
  int64_t oy = t % g.ho, n = t / g.ho;
  int64_t iy = oy * g.sh - g.ph + ky, ix = ox * g.sw - g.pw + kx;
  if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) return -1;
  return ((n * g.h + iy) * g.w + ix) * g.c + c;
}

// Calls copy(offset) with the offset in patches of each copy of input pixel
// (n, iy, ix)'s channel 0, in (kh, kw) order: col2im's order on every backend.
template <class F>
SGRT_IM2COL_HD inline void for_each_copy(const Im2colGeometry& g, int64_t n, int64_t iy, int64_t ix, F copy) {
  for (int64_t ky = 0; ky < g.kh; ++ky) {
    int64_t ty = iy + g.ph - ky;  // = oy * sh
    if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.ho) continue;
    for (int64_t kx = 0; kx < g.kw; ++kx) {
      int64_t tx = ix + g.pw - kx;
      if (tx < 0 || tx % g.sw != 0 || tx / g.sw >= g.wo) continue;
      copy(((n * g.ho + ty / g.sh) * g.wo + tx / g.sw) * g.patch() + (ky * g.kw + kx) * g.c);
    }
  }
}

// col2im: dx element i, the sum of the patch entries of dy it was copied to,
// added in (kh, kw) order: a gather, the same sums on every backend.
SGRT_IM2COL_HD inline float col2im_gather(const Im2colGeometry& g, const float* dy, int64_t i) {
  int64_t c = i % g.c, t = i / g.c;
  int64_t ix = t % g.w; t /= g.w;
  int64_t iy = t % g.h, n = t / g.h;
  float acc = 0.f;
  for_each_copy(g, n, iy, ix, [&](int64_t off) { acc += dy[off + c]; });
  return acc;
}

}  // namespace sgrt
