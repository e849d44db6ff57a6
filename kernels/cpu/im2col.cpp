// im2col and its gradient col2im (sgrt/im2col.h has the index rules). Both
// write each output element once, from its own reads, so rows split across
// threads freely; col2im's sums run in the header's fixed (kh, kw) order.
#include <algorithm>

#include "cpu/op_args.h"
#include "cpu/parallel.h"
#include "sgrt/im2col.h"

namespace sgrt::cpu {

Status k_im2col(const OpArgs& a) {
  Im2colGeometry g;
  SG_TRY(im2col_geometry(a.code, a.in[0].shape(), *a.attrs, &g));
  const float* x = a.in[0].f();
  float* y = a.out[0].f();
  // Rows: one patch (im2col) or one image row of C channels (col2im).
  bool fwd = a.code == OpCode::Im2col;
  int64_t row = fwd ? g.patch() : g.c, rows = a.out[0].n / row;
  parallel_for(rows, std::max<int64_t>(1, 16384 / row), [&](int64_t rb, int64_t re) {
    for (int64_t i = rb * row; i < re * row; ++i) {
      if (fwd) {
        int64_t s = im2col_source(g, i);
        y[i] = s < 0 ? 0.f : x[s];
      } else {
        y[i] = col2im_gather(g, x, i);
      }
    }
  });
  return Status::Ok();
}

}  // namespace sgrt::cpu
