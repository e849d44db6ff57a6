// The order of column sums (sum_to over leading or middle axes, a norm's dgain
// and dbias): every backend adds a column's terms in chunks of kColumnChunk
// rows, each chunk in row order from 0, then the chunks' sums in chunk order
// from 0. The CPU and the GPU backends so give the same bits, while a GPU runs
// a few hundred columns of thousands of rows on all its cores (one thread a
// column and chunk, then one a column) rather than on a few hundred threads.
#pragma once
#include <cstdint>

#include "sgrt/shape.h"

namespace sgrt {

constexpr int64_t kColumnChunk = 64;

// Whether sum_to's reduced axes (sum_to_axes) make column sums in chunks: one
// axis once merged, its terms a stride > 1 apart, more than a chunk of them.
// (Others are summed in the input's order: one chunk, or a row's own terms.)
inline bool chunked_columns(const MergedAxes& reduced) {
  return reduced.dim.size() == 1 && reduced.stride[0] > 1 && reduced.dim[0] > kColumnChunk;
}

}  // namespace sgrt
