// Shapes and tensor types as the compiler and runtime both see them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "sgrt/dtype.h"

namespace sgrt {

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[2, 3]"

struct TensorType {
  Shape shape;
  DType dtype = DType::f32;
  bool operator==(const TensorType& o) const { return shape == o.shape && dtype == o.dtype; }
};
std::string type_str(const TensorType& t);  // "f32[2, 3]"

// Normalizes a possibly negative axis; false when out of range.
bool normalize_axis(int64_t axis, int64_t rank, int64_t* out);

// Splits a shape around an axis into (outer, n, inner) with outer*n*inner = numel.
struct AxisSplit { int64_t outer, n, inner; };
AxisSplit split_at_axis(const Shape& s, int64_t axis);

// Row-major element strides of `s`.
std::vector<int64_t> row_major_strides(const Shape& s);

// Strides of `in` (row-major) seen through `out` (numpy broadcasting from the
// right): missing leading axes and size-1 axes that broadcast step 0.
std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out);

// The row-major element offset of index `index` (one entry per axis) in `s`:
// where a slice's or a pad's window starts.
int64_t row_major_offset(const std::vector<int64_t>& index, const Shape& s);

// Strided axes, those of size 1 left out and neighbours one stride step apart
// merged into one: the GPU backends' index walks.
struct MergedAxes {
  std::vector<int64_t> dim, stride;
  void add(int64_t d, int64_t s);
};

// sum_to's axes of `in` (row-major) reduced to `out` (its missing and size-1
// axes): `kept` enumerates out's elements, `reduced` each one's terms.
void sum_to_axes(const Shape& in, const Shape& out, MergedAxes* kept, MergedAxes* reduced);

}  // namespace sgrt
