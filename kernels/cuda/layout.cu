// Data movement (kernels/cpu/layout.cpp is the definition): reshape is a copy;
// transpose, broadcast_to and slice gather through strides; pad zeroes y and
// scatters x into its window; sum_to's column sums (sgrt/column_sums.h: a thread
// an output and chunk of rows, then one an output adding the chunks' sums), or
// any other sum_to with one thread an output adding its preimage in input
// order: the CPU's orders, so the sums agree bit for bit and need no atomics.
#include "common.cuh"
#include "sgrt/column_sums.h"

namespace sgrt::cuda {
namespace {

// A row-major walk over `dims`, each axis stepping `strides` elements of the source.
struct Walk {
  int rank = 0;
  int64_t dims[kMaxRank] = {}, strides[kMaxRank] = {};
  int64_t total = 1;
};

__device__ inline int64_t walk_offset(const Walk& w, int64_t i) {
  int64_t off = 0;
  for (int k = w.rank - 1; k >= 0; --k) {
    off += (i % w.dims[k]) * w.strides[k];
    i /= w.dims[k];
  }
  return off;
}

// y[i] = x[offset of output index i].
__global__ void gather_kernel(Walk out, const float* x, float* y) {
  SG_GRID_STRIDE(i, out.total) y[i] = x[walk_offset(out, i)];
}

// y[offset of input index i] = x[i].
__global__ void scatter_kernel(Walk in, const float* x, float* y) {
  SG_GRID_STRIDE(i, in.total) y[walk_offset(in, i)] = x[i];
}

// y[o] = sum over the reduced axes of x, in row-major (input) order. `step` > 0:
// the reduced axes merge into one of that stride, so terms load kSumBatch at a
// time, independent of the running sum, and are then added in order: the sum
// waits on memory once per kSumBatch terms.
constexpr int kSumBatch = 16;
__device__ inline float sum_terms(const float* p, int64_t r, int64_t end, int64_t step) {
  float acc = 0.f;
  for (; r + kSumBatch <= end; r += kSumBatch) {
    float v[kSumBatch];
#pragma unroll
    for (int u = 0; u < kSumBatch; ++u) v[u] = p[(r + u) * step];
#pragma unroll
    for (int u = 0; u < kSumBatch; ++u) acc += v[u];
  }
  for (; r < end; ++r) acc += p[r * step];
  return acc;
}

__global__ void sum_to_kernel(Walk out, Walk reduced, int64_t step, const float* x, float* y) {
  SG_GRID_STRIDE(o, out.total) {
    const float* p = x + walk_offset(out, o);
    float acc = 0.f;
    if (step > 0) acc = sum_terms(p, 0, reduced.total, step);
    else
      for (int64_t r = 0; r < reduced.total; ++r) acc += p[walk_offset(reduced, r)];
    y[o] = acc;
  }
}

// Column sums' first pass: output o's chunk ch of `rows` terms `step` apart,
// in order, into part[ch * out.total + o].
__global__ void column_chunk_kernel(Walk out, int64_t rows, int64_t step, const float* x, float* part) {
  const int64_t chunks = (rows + kColumnChunk - 1) / kColumnChunk;
  SG_GRID_STRIDE(i, out.total * chunks) {
    const int64_t o = i % out.total, r = i / out.total * kColumnChunk;
    part[i] = sum_terms(x + walk_offset(out, o), r, min(rows, r + kColumnChunk), step);
  }
}

__global__ void column_total_kernel(int64_t n, int64_t chunks, const float* part, float* y0, float* y1) {
  SG_GRID_STRIDE(c, n) {
    float a = 0.f, b = 0.f;
    for (int64_t ch = 0; ch < chunks; ++ch) {
      a += part[ch * n + c];
      if (y1) b += part[(chunks + ch) * n + c];
    }
    y0[c] = a;
    if (y1) y1[c] = b;
  }
}

Status add_axis(Walk* w, int64_t dim, int64_t stride) {
  if (w->rank == kMaxRank) return Status::Unsupported("rank above " + std::to_string(kMaxRank));
  w->dims[w->rank] = dim;
  w->strides[w->rank++] = stride;
  w->total *= dim;
  return Status::Ok();
}

// base: x's element where output index 0 reads (a slice's window).
Status bind_gather(const OpArgs& a, const std::vector<int64_t>& strides, BindCtx& ctx, Launch* out, int64_t base = 0) {
  Walk w;
  const Shape& os = a.out[0].shape();
  for (size_t k = 0; k < os.size(); ++k) SG_TRY(add_axis(&w, os[k], strides[k]));
  const float* x = a.in[0].f() + base;
  float* y = a.out[0].f();
  unsigned grid = grid_for(w.total, ctx.dev);
  *out = [=](cudaStream_t s) {
    gather_kernel<<<grid, kThreads, 0, s>>>(w, x, y);
    return launched("gather_kernel");
  };
  return Status::Ok();
}

// pad: y = 0, then x walked with y's strides from y's window.
Status bind_pad(const OpArgs& a, BindCtx& ctx, Launch* out) {
  Walk w;
  const Shape& xs = a.in[0].shape();
  std::vector<int64_t> st = row_major_strides(a.out[0].shape());
  for (size_t k = 0; k < xs.size(); ++k) SG_TRY(add_axis(&w, xs[k], st[k]));
  const float* x = a.in[0].f();
  float* y = a.out[0].f();
  float* window = y + row_major_offset(a.attrs->ints("before"), a.out[0].shape());
  size_t bytes = sizeof(float) * a.out[0].n;
  unsigned grid = grid_for(w.total, ctx.dev);
  *out = [=](cudaStream_t s) {
    SG_TRY(cuda_status(cudaMemsetAsync(y, 0, bytes, s), "cudaMemsetAsync(pad)"));
    scatter_kernel<<<grid, kThreads, 0, s>>>(w, x, window);
    return launched("scatter_kernel");
  };
  return Status::Ok();
}

// x [..big] -> y [..small]: kept axes walk the output, reduced axes (where the
// output is 1 or absent and the input is not) walk each output element's preimage.
Status bind_sum_to(const OpArgs& a, BindCtx& ctx, Launch* out) {
  MergedAxes kept_axes, reduced_axes;
  sum_to_axes(a.in[0].shape(), a.out[0].shape(), &kept_axes, &reduced_axes);
  Walk kept, reduced;
  for (size_t k = 0; k < kept_axes.dim.size(); ++k) SG_TRY(add_axis(&kept, kept_axes.dim[k], kept_axes.stride[k]));
  for (size_t k = 0; k < reduced_axes.dim.size(); ++k)
    SG_TRY(add_axis(&reduced, reduced_axes.dim[k], reduced_axes.stride[k]));
  const int64_t step = reduced.rank == 1 ? reduced.strides[0] : 0;
  const float* x = a.in[0].f();
  float* y = a.out[0].f();
  const Device dev = ctx.dev;
  if (chunked_columns(reduced_axes)) {
    const int64_t rows = reduced.total, chunks = (rows + kColumnChunk - 1) / kColumnChunk;
    float* part = static_cast<float*>(ctx.scratch->reserve(sizeof(float) * chunks * kept.total));
    const unsigned grid = grid_for(chunks * kept.total, dev);
    *out = [=](cudaStream_t s) {
      column_chunk_kernel<<<grid, kThreads, 0, s>>>(kept, rows, step, x, part);
      SG_TRY(launched("column_chunk_kernel"));
      return launch_column_totals(kept.total, chunks, part, y, nullptr, dev, s);
    };
    return Status::Ok();
  }
  const unsigned grid = grid_for(kept.total, dev, kSerialThreads);  // one in-order sum per output
  *out = [=](cudaStream_t s) {
    sum_to_kernel<<<grid, kSerialThreads, 0, s>>>(kept, reduced, step, x, y);
    return launched("sum_to_kernel");
  };
  return Status::Ok();
}

}  // namespace

Status launch_column_totals(int64_t n, int64_t chunks, const float* part, float* y0, float* y1, const Device& dev,
                            cudaStream_t s) {
  column_total_kernel<<<grid_for(n, dev), kThreads, 0, s>>>(n, chunks, part, y0, y1);
  return launched("column_total_kernel");
}

Status bind_layout(const OpArgs& a, BindCtx& ctx, Launch* out) {
  switch (a.code) {
    case OpCode::Reshape: {
      const void* x = a.in[0].p;
      void* y = a.out[0].p;
      size_t bytes = dtype_bytes(a.in[0].dtype(), a.in[0].n);
      *out = [=](cudaStream_t s) {
        return x == y ? Status::Ok() : cuda_status(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync(reshape)");
      };
      return Status::Ok();
    }
    case OpCode::Transpose: {
      const std::vector<int64_t>& perm = a.attrs->ints("perm");
      std::vector<int64_t> xs = row_major_strides(a.in[0].shape()), st(perm.size());
      for (size_t k = 0; k < perm.size(); ++k) st[k] = xs[perm[k]];
      return bind_gather(a, st, ctx, out);
    }
    case OpCode::BroadcastTo:
      return bind_gather(a, broadcast_strides(a.in[0].shape(), a.out[0].shape()), ctx, out);
    case OpCode::SumTo: return bind_sum_to(a, ctx, out);
    case OpCode::Slice:
      return bind_gather(a, row_major_strides(a.in[0].shape()), ctx, out, row_major_offset(a.attrs->ints("starts"), a.in[0].shape()));
    case OpCode::Pad: return bind_pad(a, ctx, out);
    default: return Status::Runtime("cuda layout binder given " + std::string(op_info(a.code).name));
  }
}

}  // namespace sgrt::cuda
