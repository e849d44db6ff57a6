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

std::vector<int64_t> row_major_strides(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t k = 1;
  for (size_t i = s.size(); i-- > 0;) { st[i] = k; k *= s[i]; }
  return st;
}

std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  std::vector<int64_t> st(out.size(), 0);
  int64_t s = 1;
  for (size_t k = in.size(); k-- > 0;) {
    size_t o = out.size() - in.size() + k;
    st[o] = in[k] == 1 && out[o] != 1 ? 0 : s;
    s *= in[k];
  }
  return st;
}

int64_t row_major_offset(const std::vector<int64_t>& index, const Shape& s) {
  std::vector<int64_t> st = row_major_strides(s);
  int64_t off = 0;
  for (size_t k = 0; k < index.size(); ++k) off += index[k] * st[k];
  return off;
}

void MergedAxes::add(int64_t d, int64_t s) {
  if (d == 1) return;
  if (!dim.empty() && stride.back() == s * d) {
    dim.back() *= d;
    stride.back() = s;
    return;
  }
  dim.push_back(d);
  stride.push_back(s);
}

void sum_to_axes(const Shape& in, const Shape& out, MergedAxes* kept, MergedAxes* reduced) {
  const std::vector<int64_t> st = row_major_strides(in);
  const size_t lead = in.size() - out.size();
  for (size_t k = 0; k < in.size(); ++k) (k < lead || out[k - lead] == 1 ? reduced : kept)->add(in[k], st[k]);
}

}  // namespace sgrt
