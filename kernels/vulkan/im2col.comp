// im2col and its gradient col2im: the index rules of core/include/sgrt/im2col.h
// (kernels/cpu/im2col.cpp), one invocation per output element. off = {in, -, out};
// n = numel(out); dim = {N, H, W, C, KH, KW, SH, SW}, stride = {PH, PW, Ho, Wo}.
// col2im gathers each dx element's copies in (kh, kw) order: no atomics, the
// CPU's sums bit for bit.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;

void main() {
  uint h = pc.dim[1], w = pc.dim[2], c = pc.dim[3], kh = pc.dim[4], kw = pc.dim[5], sh = pc.dim[6], sw = pc.dim[7];
  int ph = int(pc.stride[0]), pw = int(pc.stride[1]);
  uint ho = pc.stride[2], wo = pc.stride[3], plen = kh * kw * c;
  if (OP == OP_Im2col) {
    FOR_EACH_INDEX(i, pc.n) {
      uint ch = i % c, t = i / c;
      uint kx = t % kw; t /= kw;
      uint ky = t % kh; t /= kh;
      uint ox = t % wo; t /= wo;
      uint oy = t % ho, n = t / ho;
      int iy = int(oy * sh + ky) - ph, ix = int(ox * sw + kx) - pw;
      bool inside = iy >= 0 && iy < int(h) && ix >= 0 && ix < int(w);
      F[pc.off[2] + i] = inside ? F[pc.off[0] + ((n * h + uint(iy)) * w + uint(ix)) * c + ch] : 0.0;
    }
  } else {
    FOR_EACH_INDEX(i, pc.n) {
      uint ch = i % c, t = i / c;
      uint ix = t % w; t /= w;
      uint iy = t % h, n = t / h;
      float acc = 0.0;
      for (uint ky = 0u; ky < kh; ++ky) {
        int ty = int(iy) + ph - int(ky);  // = oy * sh
        if (ty < 0 || uint(ty) % sh != 0u || uint(ty) / sh >= ho) continue;
        for (uint kx = 0u; kx < kw; ++kx) {
          int tx = int(ix) + pw - int(kx);
          if (tx < 0 || uint(tx) % sw != 0u || uint(tx) / sw >= wo) continue;
          uint row = (n * ho + uint(ty) / sh) * wo + uint(tx) / sw;
          acc += F[pc.off[0] + row * plen + (ky * kw + kx) * c + ch];
        }
      }
      F[pc.off[2] + i] = acc;
    }
  }
}
