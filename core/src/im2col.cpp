// im2col / col2im geometry from the attributes (sgrt/im2col.h), with the errors
// shape inference reports for a bad window.
#include "sgrt/im2col.h"

#include <string>

#include "sgrt/checked_math.h"

namespace sgrt {
namespace {

Status fail(OpCode code, const std::string& what) {
  return Status::Invalid(std::string(op_info(code).name) + ": " + what);
}

constexpr int64_t kMaxWindow = 1 << 16;  // bounds kernel, stride and pad, so no index overflows

// A (rows, cols) attribute: two integers in [min, kMaxWindow].
Status pair(OpCode code, const Attrs& attrs, const char* name, int64_t min, int64_t* a, int64_t* b) {
  const std::vector<int64_t>& v = attrs.ints(name);
  if (v.size() != 2 || v[0] < min || v[1] < min || v[0] > kMaxWindow || v[1] > kMaxWindow)
    return fail(code, std::string("attr ") + name + " must be two integers in [" + std::to_string(min) + ", " +
                          std::to_string(kMaxWindow) + "] (rows, cols), got " + shape_str(v));
  *a = v[0];
  *b = v[1];
  return Status::Ok();
}

}  // namespace

Status im2col_geometry(OpCode code, const Shape& in, const Attrs& attrs, Im2colGeometry* g) {
  bool fwd = code == OpCode::Im2col;
  if (in.size() != 4)
    return fail(code, std::string("expects ") + (fwd ? "x [N, H, W, C]" : "dy [N, Ho, Wo, KH*KW*C]") + " (rank 4), got " +
                          shape_str(in));
  Im2colGeometry r{};
  SG_TRY(pair(code, attrs, "kernel", 1, &r.kh, &r.kw));
  SG_TRY(pair(code, attrs, "stride", 1, &r.sh, &r.sw));
  SG_TRY(pair(code, attrs, "pad", 0, &r.ph, &r.pw));
  if (r.ph >= r.kh || r.pw >= r.kw)
    return fail(code, "padding " + shape_str({r.ph, r.pw}) + " must be smaller than the kernel " + shape_str({r.kh, r.kw}) +
                          " (a window of padding only)");
  r.n = in[0];
  if (fwd) {
    r.h = in[1], r.w = in[2], r.c = in[3];
  } else {
    SG_TRY(pair(code, attrs, "size", 1, &r.h, &r.w));
    if (in[3] % (r.kh * r.kw) != 0)
      return fail(code, "dy's last dimension " + std::to_string(in[3]) + " is not a multiple of KH*KW = " +
                            std::to_string(r.kh * r.kw));
    r.c = in[3] / (r.kh * r.kw);
  }
  int64_t hp = r.h + 2 * r.ph, wp = r.w + 2 * r.pw;
  if (r.kh > hp || r.kw > wp)
    return fail(code, "the " + std::to_string(r.kh) + "x" + std::to_string(r.kw) + " window is larger than the padded input " +
                          std::to_string(hp) + "x" + std::to_string(wp));
  r.ho = (hp - r.kh) / r.sh + 1;
  r.wo = (wp - r.kw) / r.sw + 1;
  if (!fwd && (in[1] != r.ho || in[2] != r.wo))
    return fail(code, "dy " + shape_str(in) + " does not match a " + std::to_string(r.h) + "x" + std::to_string(r.w) +
                          " input, whose output is " + std::to_string(r.ho) + "x" + std::to_string(r.wo));
  int64_t total;
  if (!checked_numel({r.n, r.ho, r.wo, r.kh, r.kw, r.c}, &total))
    return fail(code, "the patches of " + shape_str(in) + " would have more than 2^40 elements");
  *g = r;
  return Status::Ok();
}

}  // namespace sgrt
