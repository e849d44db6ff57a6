// im2col and its gradient col2im (kernels/cpu/im2col.cpp is the definition; the
// index rules are sgrt/im2col.h's, shared with it): one thread per output
// element. col2im gathers each dx element's copies in (kh, kw) order, so its
// sums match the CPU's bit for bit and need no atomics.
#include "common.cuh"
#include "sgrt/im2col.h"

namespace sgrt::cuda {
namespace {

__global__ void im2col_kernel(Im2colGeometry g, const float* x, float* y) {
  SG_GRID_STRIDE(i, g.patches_numel()) {
    int64_t s = im2col_source(g, i);
    y[i] = s < 0 ? 0.f : x[s];
  }
}

__global__ void col2im_kernel(Im2colGeometry g, const float* dy, float* dx) {
  SG_GRID_STRIDE(i, g.image_numel()) dx[i] = col2im_gather(g, dy, i);
}

}  // namespace

Status bind_im2col(const OpArgs& a, BindCtx& ctx, Launch* out) {
  Im2colGeometry g;
  SG_TRY(im2col_geometry(a.code, a.in[0].shape(), *a.attrs, &g));
  const float* x = a.in[0].f();
  float* y = a.out[0].f();
  unsigned grid = grid_for(a.out[0].n, ctx.dev);
  if (a.code == OpCode::Im2col) {
    *out = [=](cudaStream_t s) {
      im2col_kernel<<<grid, kThreads, 0, s>>>(g, x, y);
      return launched("im2col_kernel");
    };
  } else {
    *out = [=](cudaStream_t s) {
      col2im_kernel<<<grid, kThreads, 0, s>>>(g, x, y);
      return launched("col2im_kernel");
    };
  }
  return Status::Ok();
}

}  // namespace sgrt::cuda
