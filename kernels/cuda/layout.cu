// Data movement (kernels/cpu/layout.cpp is the definition): reshape is a copy;
// transpose, broadcast_to and slice gather through strides; pad zeroes y and
// scatters x into its window; sum_to gives each output
// element one thread that adds its preimage in input order, the CPU's order, so
// the sums agree bit for bit and no atomics are needed.
#include "common.cuh"

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
// the reduced axes merge into one of that stride (sum_to over leading axes, a
// bias gradient), so terms load kBatch at a time, independent of the running sum,
// and are then added in order: the sum waits on memory once per kBatch terms.
constexpr int kSumBatch = 16;
__global__ void sum_to_kernel(Walk out, Walk reduced, int64_t step, const float* x, float* y) {
  SG_GRID_STRIDE(o, out.total) {
    const float* p = x + walk_offset(out, o);
    float acc = 0.f;
    int64_t r = 0;
    if (step > 0) {
      for (; r + kSumBatch <= reduced.total; r += kSumBatch) {
        float v[kSumBatch];
#pragma unroll
        for (int u = 0; u < kSumBatch; ++u) v[u] = p[(r + u) * step];
#pragma unroll
        for (int u = 0; u < kSumBatch; ++u) acc += v[u];
      }
      for (; r < reduced.total; ++r) acc += p[r * step];
    } else {
      for (; r < reduced.total; ++r) acc += p[walk_offset(reduced, r)];
    }
    y[o] = acc;
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
  const Shape& big = a.in[0].shape();
  const Shape& small = a.out[0].shape();
  std::vector<int64_t> xs = row_major_strides(big);
  size_t lead = big.size() - small.size();
  Walk kept, reduced;
  for (size_t k = 0; k < big.size(); ++k) {
    bool reduce = k < lead || (small[k - lead] == 1 && big[k] != 1);
    if (reduce) SG_TRY(add_axis(&reduced, big[k], xs[k]));
    else SG_TRY(add_axis(&kept, big[k], xs[k]));
  }
  int64_t step = reduced.rank > 0 ? reduced.strides[reduced.rank - 1] : 0;
  for (int k = 0; k + 1 < reduced.rank; ++k)
    if (reduced.strides[k] != reduced.dims[k + 1] * reduced.strides[k + 1]) step = 0;
  const float* x = a.in[0].f();
  float* y = a.out[0].f();
  const unsigned grid = grid_for(kept.total, ctx.dev, kSerialThreads);  // one in-order sum per output
  *out = [=](cudaStream_t s) {
    sum_to_kernel<<<grid, kSerialThreads, 0, s>>>(kept, reduced, step, x, y);
    return launched("sum_to_kernel");
  };
  return Status::Ok();
}

}  // namespace

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
