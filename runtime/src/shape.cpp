#include "sgrt/shape.h"

namespace sgrt {

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::string type_str(const TensorType& t) { return std::string(dtype_name(t.dtype)) + shape_str(t.shape); }

bool normalize_axis(int64_t axis, int64_t rank, int64_t* out) {
  if (axis < -rank || axis >= rank) return false;
  *out = axis < 0 ? axis + rank : axis;
  return true;
}

AxisSplit split_at_axis(const Shape& s, int64_t axis) {
  AxisSplit r{1, s[axis], 1};
  for (int64_t i = 0; i < axis; ++i) r.outer *= s[i];
  for (size_t i = axis + 1; i < s.size(); ++i) r.inner *= s[i];
  return r;
}

}  // namespace sgrt
