// Data movement: reshape, transpose, broadcast_to and its inverse sum_to, slice
// and its inverse pad.
#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/column_sums.h"
#include "cpu/op_args.h"
#include "cpu/parallel.h"
#include "cpu/vec_transpose.h"

namespace sgrt::cpu {
namespace {

// The input offset of the row-major index `i` over out's axes [0, axes), with
// in_strides for those axes (the trailing axes' offsets are the caller's).
int64_t strided_offset(int64_t i, const Shape& out, const std::vector<int64_t>& in_strides, int64_t axes) {
  int64_t off = 0;
  for (int64_t k = axes - 1; k >= 0; --k) {
    off += (i % out[k]) * in_strides[k];
    i /= out[k];
  }
  return off;
}

// Calls fn(out_index, in_offset) for every element of `out` in row-major order,
// rows of the last axis handed out across threads.
template <class F>
void for_each_strided(const Shape& out, const std::vector<int64_t>& in_strides, bool parallel, F fn) {
  int64_t rank = static_cast<int64_t>(out.size());
  if (rank == 0) { fn(0, 0); return; }
  int64_t inner = out.back(), rows = numel(out) / inner, sl = in_strides.back();
  auto run = [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      const int64_t off = strided_offset(r, out, in_strides, rank - 1);
      for (int64_t j = 0; j < inner; ++j) fn(r * inner + j, off + j * sl);
    }
  };
  if (parallel) parallel_for(rows, std::max<int64_t>(1, 16384 / inner), run);
  else run(0, rows);
}

// y = x read through in_strides over `out`'s elements: for_each_strided with its
// rows copied whole when the last axis is contiguous in x (a bias broadcast to
// [B, T, C], a slice) or repeated (a broadcast along the last axis).
void copy_strided(const float* x, float* y, const Shape& out, const std::vector<int64_t>& in_strides) {
  const int64_t rank = static_cast<int64_t>(out.size());
  if (rank == 0 || (in_strides.back() != 1 && in_strides.back() != 0)) {
    for_each_strided(out, in_strides, true, [&](int64_t i, int64_t o) { y[i] = x[o]; });
    return;
  }
  const int64_t inner = out.back(), rows = numel(out) / inner;
  parallel_for(rows, std::max<int64_t>(1, 16384 / inner), [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      const float* src = x + strided_offset(r, out, in_strides, rank - 1);
      if (in_strides.back() == 1) std::memcpy(y + r * inner, src, sizeof(float) * inner);
      else std::fill_n(y + r * inner, inner, *src);
    }
  });
}

// y[p * ly + l] = x[p + l * sl] for p < 4, l < 4: four 4-float runs of x loaded
// and transposed in registers (SSE / NEON width, the baseline of both), not
// sixteen single-float loads and stores.
inline void transpose4(const float* x, int64_t sl, float* y, int64_t ly) {
  typedef float v4 __attribute__((vector_size(16)));
  v4 t[4];
  for (int i = 0; i < 4; ++i) std::memcpy(&t[i], x + i * sl, sizeof(v4));
  transpose_tile<4>(t);
  for (int i = 0; i < 4; ++i) std::memcpy(y + i * ly, &t[i], sizeof(v4));
}

// sum_to whose reduced axes make chunked column sums (sgrt/column_sums.h):
// each output a column sum in that order. False (nothing written) otherwise.
bool sum_columns(const float* x, float* y, const Shape& xs, const Shape& ys) {
  MergedAxes kept, red;
  sum_to_axes(xs, ys, &kept, &red);
  if (!chunked_columns(red)) return false;
  const int64_t outputs = numel(ys), step = red.stride[0];
  std::vector<float> part(static_cast<size_t>(outputs));
  // Leading axes: output o is x's column o, contiguous across o (the loop vectorizes, no gather).
  if (kept.dim.size() == 1 && kept.stride[0] == 1) {
    column_sums(red.dim[0], 0, outputs, y, part.data(), [&](int64_t r, int64_t o) { return x[r * step + o]; });
    return true;
  }
  std::vector<int64_t> base(static_cast<size_t>(outputs));  // output o's first term
  for (int64_t o = 0; o < outputs; ++o)
    base[o] = strided_offset(o, kept.dim, kept.stride, static_cast<int64_t>(kept.dim.size()));
  column_sums(red.dim[0], 0, outputs, y, part.data(), [&](int64_t r, int64_t o) { return x[base[o] + r * step]; });
  return true;
}

}  // namespace

// A transpose that swaps its last two axes ([.., P, L] out of [.., L, P]): copied in
// 32 x 32 tiles, so the 32 input rows a tile reads stay in L1 while each is read 16
// times, not once per output row (the strided walk above missed cache on every
// element of a large weight-gradient operand); within a tile, 4 x 4 blocks in
// registers (twice as fast as element by element when the data is in cache: the
// blockwise recipes' weight gradients transpose every operand).
void transpose_last_two(const float* x, float* y, const Shape& out, const std::vector<int64_t>& in_strides) {
  constexpr int64_t kTile = 32;
  const int64_t rank = static_cast<int64_t>(out.size()), P = out[rank - 2], L = out[rank - 1], sl = in_strides[rank - 1];
  if (P * L == 0) return;
  const int64_t batches = numel(out) / (P * L), ptiles = (P + kTile - 1) / kTile;
  parallel_for(batches * ptiles, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t off = strided_offset(t / ptiles, out, in_strides, rank - 2);
      const int64_t p0 = (t % ptiles) * kTile, p1 = std::min(P, p0 + kTile);
      float* yb = y + (t / ptiles) * P * L;
      for (int64_t l0 = 0; l0 < L; l0 += kTile) {
        const int64_t l1 = std::min(L, l0 + kTile), l4 = l0 + (l1 - l0) / 4 * 4;
        int64_t p = p0;
        for (; p + 4 <= p1; p += 4)
          for (int64_t l = l0; l < l4; l += 4) transpose4(x + off + p + l * sl, sl, yb + p * L + l, L);
        for (int64_t q = p0; q < p1; ++q)  // what the blocks left: the tile's last rows and columns
          for (int64_t l = q < p ? l4 : l0; l < l1; ++l) yb[q * L + l] = x[off + q + l * sl];
      }
    }
  });
}

Status k_layout(const OpArgs& a) {
  const float* x = a.in[0].f();
  float* y = a.out[0].f();
  switch (a.code) {
    case OpCode::Reshape: {  // a copy, in 256 KiB pieces across the threads
      constexpr int64_t kPiece = 1 << 18;
      const int64_t bytes = static_cast<int64_t>(dtype_bytes(a.in[0].type->dtype, a.in[0].n));
      const uint8_t* src = static_cast<const uint8_t*>(a.in[0].data);
      uint8_t* dst = static_cast<uint8_t*>(a.out[0].data);
      parallel_for((bytes + kPiece - 1) / kPiece, 1, [&](int64_t b, int64_t e) {
        std::memcpy(dst + b * kPiece, src + b * kPiece, std::min(bytes, e * kPiece) - b * kPiece);
      });
      return Status::Ok();
    }
    case OpCode::Transpose: {
      const std::vector<int64_t>& perm = a.attrs->ints("perm");
      const Shape& xs = a.in[0].shape();
      std::vector<int64_t> xstride = row_major_strides(xs), st(perm.size());
      for (size_t k = 0; k < perm.size(); ++k) st[k] = xstride[perm[k]];
      const size_t r = perm.size();
      if (r >= 2 && st[r - 2] == 1 && st[r - 1] != 1) {
        transpose_last_two(x, y, a.out[0].shape(), st);
        return Status::Ok();
      }
      for_each_strided(a.out[0].shape(), st, true, [&](int64_t i, int64_t o) { y[i] = x[o]; });
      return Status::Ok();
    }
    case OpCode::BroadcastTo:
      copy_strided(x, y, a.out[0].shape(), broadcast_strides(a.in[0].shape(), a.out[0].shape()));
      return Status::Ok();
    case OpCode::SumTo: {
      // Serial: the sum's rounding does not depend on threads. Column sums in
      // chunks (sgrt/column_sums.h); any other shape in input order.
      if (sum_columns(x, y, a.in[0].shape(), a.out[0].shape())) return Status::Ok();
      std::memset(y, 0, sizeof(float) * a.out[0].n);
      for_each_strided(a.in[0].shape(), broadcast_strides(a.out[0].shape(), a.in[0].shape()), false,
                       [&](int64_t i, int64_t o) { y[o] += x[i]; });
      return Status::Ok();
    }
    case OpCode::Slice: {  // y = the window of x: x's strides from the window's first element
      int64_t base = row_major_offset(a.attrs->ints("starts"), a.in[0].shape());
      copy_strided(x + base, y, a.out[0].shape(), row_major_strides(a.in[0].shape()));
      return Status::Ok();
    }
    case OpCode::Pad: {  // zeros, then x written into the window of y
      std::memset(y, 0, sizeof(float) * a.out[0].n);
      int64_t base = row_major_offset(a.attrs->ints("before"), a.out[0].shape());
      for_each_strided(a.in[0].shape(), row_major_strides(a.out[0].shape()), true,
                       [&](int64_t i, int64_t o) { y[base + o] = x[i]; });
      return Status::Ok();
    }
    default:
      return Status::Runtime("layout kernel given " + std::string(op_info(a.code).name));
  }
}

}  // namespace sgrt::cpu
