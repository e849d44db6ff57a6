// The transformer ops (definitions: kernels/cpu/embedding.cpp, norm.cpp,
// rope.cpp, dropout.cpp): embedding and its scatter-add gradient, layer and RMS
// norm with their gradients, rope (and rope_at), dropout, batch norm's running
// statistics. Every sum runs in a fixed order:
// the embedding gradient adds each id's rows in position order (the CPU's
// loop: bit-identical), a norm row is a fixed tree over one block, dgain/dbias
// are column sums in sgrt/column_sums.h's chunks. Rope's angle is computed in double as the
// CPU's; dropout calls sgrt/rng.h (constexpr, so device code shares it).
#include <cmath>

#include "common.cuh"
#include "sgrt/column_sums.h"
#include "sgrt/quant.h"
#include "sgrt/rng.h"

namespace sgrt::cuda {
namespace {

// Blocks for one-block-per-row kernels (a grid-stride loop over rows beyond it).
unsigned row_grid(int64_t rows) { return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(rows, 1 << 16))); }

__device__ bool id_ok(int32_t id, int64_t r, int64_t vocab, ErrorRecord* err, int32_t tag) {
  if (id >= 0 && id < vocab) return true;
  record_label_error(err, tag, id, r, vocab);
  return false;
}

// table [V, D], ids [N] -> y [N, D]
__global__ void embedding_kernel(int64_t n, int64_t d, int64_t vocab, const float* table, const int32_t* ids, float* y,
                                 ErrorRecord* err, int32_t tag) {
  SG_GRID_STRIDE(i, n * d) {
    int64_t r = i / d;
    y[i] = id_ok(ids[r], r, vocab, err, tag) ? table[ids[r] * d + i % d] : 0.f;
  }
}

// The embedding gradient, dt [V, D] = dy [N, D]'s rows summed by id, in position
// order per id as the CPU adds them, yet with the positions side by side: the
// links first, then one thread per (first position of an id, column) walking
// its id's chain. `next` and `has_prev` are N words of scratch, has_prev zeroed.

// next[r] = the next position with r's id (n: none); has_prev[next[r]] = 1
// (each position is one position's next at most).
__global__ void embedding_link_kernel(int64_t n, int64_t vocab, const int32_t* ids, int32_t* next, int32_t* has_prev,
                                      ErrorRecord* err, int32_t tag) {
  SG_GRID_STRIDE(r, n) {
    id_ok(ids[r], r, vocab, err, tag);
    int64_t s = r + 1;
    while (s < n && ids[s] != ids[r]) ++s;
    next[r] = static_cast<int32_t>(s);
    if (s < n) has_prev[s] = 1;
  }
}

// dt (zeroed) [id, c] = dy[r, c] + dy[next[r], c] + ... for each chain's first r.
__global__ void embedding_chain_kernel(int64_t n, int64_t d, int64_t vocab, const int32_t* ids, const int32_t* next,
                                       const int32_t* has_prev, const float* dy, float* dt) {
  SG_GRID_STRIDE(i, n * d) {
    const int64_t r = i / d, c = i % d;
    const int32_t id = ids[r];
    if (has_prev[r] || id < 0 || id >= vocab) continue;
    float sum = 0.f;
    for (int64_t s = r; s < n; s = next[s]) sum += dy[s * d + c];
    dt[id * d + c] = sum;
  }
}

// The block's sums of a and b (one partial each per thread) by a fixed tree, in
// every thread.
struct Plus2 {
  __device__ float2 operator()(float2 x, float2 y) const { return make_float2(x.x + y.x, x.y + y.y); }
};
__device__ float2 block_sum2(float a, float b) { return block_reduce(make_float2(a, b), Plus2{}); }

struct Norm {
  int64_t rows, d;
  float eps;
  const float *x, *g, *b, *mean, *rstd, *dy;  // b: bias (forward); mean: nullptr for RMS norm
  float *y, *mean_out, *rstd_out, *dx, *dg, *db;
  unsigned* amax;  // forward fused with a quantize: max |y| bits (bind.h's fused_amax), else nullptr
};

__device__ float xhat(const Norm& p, int64_t r, int64_t c) {
  return (p.x[r * p.d + c] - (p.mean ? p.mean[r] : 0.f)) * p.rstd[r];
}

// y = (x - mean) rstd g (+ b); layer == false: RMS norm (mean 0, no bias).
// With p.amax, also max |y| as quantize's amax_kernel takes it: the bits of |y|
// ordered as integers (NaN above inf), a block's maximum then one atomic.
template <bool kLayer>
__global__ void norm_forward_kernel(Norm p) {
  unsigned amax = 0u;
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const float* xr = p.x + r * p.d;
    float m = 0.f;
    if constexpr (kLayer) {
      float s = 0.f;
      for (int64_t c = threadIdx.x; c < p.d; c += kThreads) s += xr[c];
      m = block_sum2(s, 0.f).x / static_cast<float>(p.d);
    }
    float v = 0.f;
    for (int64_t c = threadIdx.x; c < p.d; c += kThreads) v += (xr[c] - m) * (xr[c] - m);
    float rs = 1.f / sqrtf(block_sum2(v, 0.f).x / static_cast<float>(p.d) + p.eps);
    for (int64_t c = threadIdx.x; c < p.d; c += kThreads) {
      const float y = (xr[c] - m) * rs * p.g[c] + (kLayer ? p.b[c] : 0.f);
      p.y[r * p.d + c] = y;
      amax = max(amax, __float_as_uint(fabsf(y)));
    }
    if (threadIdx.x == 0) {
      if constexpr (kLayer) p.mean_out[r] = m;
      p.rstd_out[r] = rs;
    }
  }
  if (p.amax) {  // the same for the whole block
    __shared__ unsigned block_amax;
    if (threadIdx.x == 0) block_amax = 0u;
    __syncthreads();
    atomicMax(&block_amax, amax);
    __syncthreads();
    if (threadIdx.x == 0) atomicMax(p.amax, block_amax);
  }
}

// The forward launch; a fused quantize's amax starts from 0 each step.
template <bool kLayer>
Status norm_forward(const Norm& p, unsigned rows, cudaStream_t s) {
  if (p.amax) SG_CUDA(cudaMemsetAsync(p.amax, 0, sizeof(unsigned), s));
  norm_forward_kernel<kLayer><<<rows, kThreads, 0, s>>>(p);
  return launched(kLayer ? "layer_norm forward" : "rms_norm forward");
}

// dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dy g (RMS
// norm drops the mean(dxhat) term).
__global__ void norm_dx_kernel(Norm p) {
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const float* dyr = p.dy + r * p.d;
    float sum = 0.f, dot = 0.f;
    for (int64_t c = threadIdx.x; c < p.d; c += kThreads) {
      float dh = dyr[c] * p.g[c];
      sum += dh;
      dot += dh * xhat(p, r, c);
    }
    float2 s = block_sum2(sum, dot);
    float inv_d = 1.f / static_cast<float>(p.d);
    float mean_dh = p.mean ? s.x * inv_d : 0.f, mean_dot = s.y * inv_d;
    for (int64_t c = threadIdx.x; c < p.d; c += kThreads)
      p.dx[r * p.d + c] = p.rstd[r] * (dyr[c] * p.g[c] - mean_dh - xhat(p, r, c) * mean_dot);
  }
}

// dgain = sum over rows of dy xhat, dbias = sum of dy, in two passes
// (sgrt/column_sums.h): here one thread a column and chunk of rows, in order,
// each batch of rows loaded before it is added (a column waits on memory once
// per batch), into part (dgain's plane, then dbias's: [2][chunks][d]); then
// launch_column_totals adds each column's chunk sums.
constexpr int kRowBatch = 8;
__global__ void norm_column_chunk_kernel(Norm p, float* part) {
  const int64_t chunks = (p.rows + kColumnChunk - 1) / kColumnChunk;
  SG_GRID_STRIDE(i, p.d * chunks) {
    const int64_t c = i % p.d, end = min(p.rows, i / p.d * kColumnChunk + kColumnChunk);
    float g = 0.f, b = 0.f;
    int64_t r = i / p.d * kColumnChunk;
    for (; r + kRowBatch <= end; r += kRowBatch) {
      float dy[kRowBatch], xh[kRowBatch];
#pragma unroll
      for (int u = 0; u < kRowBatch; ++u) dy[u] = p.dy[(r + u) * p.d + c], xh[u] = xhat(p, r + u, c);
#pragma unroll
      for (int u = 0; u < kRowBatch; ++u) g += dy[u] * xh[u], b += dy[u];
    }
    for (; r < end; ++r) {
      float dy = p.dy[r * p.d + c];
      g += dy * xhat(p, r, c);
      b += dy;
    }
    part[i] = g;
    part[chunks * p.d + i] = b;
  }
}

// x [B, T, H*Dh]: pair i < Dh/2 of each head, elements (i, i + Dh/2) or,
// interleaved, (2i, 2i + 1), turns by (pos + t) base^(-2i/Dh) (sign -1: the
// other way); pos is 0 for rope, rope_at's i32 (a negative one is recorded as
// the op's error). One thread per (row, i), its heads in turn.
__global__ void rope_kernel(int64_t rows, int64_t T, int64_t H, int64_t Dh, double base, float sign, bool interleaved,
                            const int32_t* pos, const float* x, float* y, ErrorRecord* err, int32_t tag) {
  const int64_t half = Dh / 2, C = H * Dh, step = interleaved ? 2 : 1, other = interleaved ? 1 : half;
  const int32_t p0 = pos ? *pos : 0;
  if (p0 < 0) {
    if (blockIdx.x == 0 && threadIdx.x == 0) record_label_error(err, tag, p0, 0, 0);
    return;
  }
  SG_GRID_STRIDE(k, rows * half) {
    int64_t r = k / half, i = k % half;
    double angle = static_cast<double>(p0 + r % T) * pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(Dh));
    float c = static_cast<float>(cos(angle)), sn = sign * static_cast<float>(sin(angle));
    for (int64_t h = 0; h < H; ++h) {
      int64_t j = r * C + h * Dh + i * step;
      float x1 = x[j], x2 = x[j + other];
      y[j] = x1 * c - x2 * sn;
      y[j + other] = x1 * sn + x2 * c;
    }
  }
}

// Element i of step t kept when rng_uniform(seed, t, i) >= p.
__global__ void dropout_kernel(int64_t n, uint64_t seed, uint64_t offset, const int32_t* state, float p, float keep_scale,
                               const float* x, float* y) {
  const uint64_t step = static_cast<uint64_t>(state[kStep]);
  SG_GRID_STRIDE(i, n) y[i] = rng_uniform(seed, step, offset + static_cast<uint64_t>(i)) >= p ? x[i] * keep_scale : 0.f;
}

// Batch norm's running statistic (kernels/cpu/running_stat.cpp): mode 0
// evaluation, 1 training, 2 training with the in-place update.
__global__ void running_stat_kernel(int64_t n, int mode, float momentum, float unbias, const float* stat,
                                    float* running, float* used) {
  SG_GRID_STRIDE(c, n) {
    float st = stat[c], r = running[c];
    used[c] = mode == 0 ? r : st;
    if (mode == 2) running[c] = (1.f - momentum) * r + momentum * (unbias * st);
  }
}

Status bind_running_stat(const OpArgs& a, BindCtx& ctx, Launch* out) {
  int64_t n = a.in[0].n;
  const float* stat = a.in[0].f();
  float* running = a.out[1].f();
  float* used = a.out[0].f();
  int mode = !a.attrs->i("training") ? 0 : a.attrs->i("update", 1) ? 2 : 1;
  float momentum = static_cast<float>(a.attrs->f("momentum")), unbias = static_cast<float>(a.attrs->f("unbias"));
  unsigned grid = grid_for(n, ctx.dev);
  *out = [=](cudaStream_t s) {
    running_stat_kernel<<<grid, kThreads, 0, s>>>(n, mode, momentum, unbias, stat, running, used);
    return launched("running_stat_kernel");
  };
  return Status::Ok();
}

Status bind_embedding(const OpArgs& a, BindCtx& ctx, Launch* out) {
  ErrorRecord* err = ctx.errors;
  int32_t tag = ctx.tag;
  if (a.code == OpCode::Embedding) {
    int64_t vocab = a.in[0].shape()[0], d = a.in[0].shape()[1], n = a.in[1].n;
    const float* table = a.in[0].f();
    const int32_t* ids = a.in[1].i32();
    float* y = a.out[0].f();
    unsigned grid = grid_for(n * d, ctx.dev);
    *out = [=](cudaStream_t s) {
      embedding_kernel<<<grid, kThreads, 0, s>>>(n, d, vocab, table, ids, y, err, tag);
      return launched("embedding_kernel");
    };
    return Status::Ok();
  }
  int64_t vocab = a.out[0].shape()[0], d = a.out[0].shape()[1], n = a.in[0].n;
  const int32_t* ids = a.in[0].i32();
  const float* dy = a.in[1].f();
  float* dt = a.out[0].f();
  size_t bytes = sizeof(float) * static_cast<size_t>(a.out[0].n);
  int32_t* next = static_cast<int32_t*>(ctx.scratch->reserve(sizeof(int32_t) * 2 * n));
  int32_t* has_prev = next + n;
  const unsigned link_grid = grid_for(n, ctx.dev), chain_grid = grid_for(n * d, ctx.dev);
  *out = [=](cudaStream_t s) {
    SG_TRY(cuda_status(cudaMemsetAsync(dt, 0, bytes, s), "embedding_grad memset"));
    SG_TRY(cuda_status(cudaMemsetAsync(has_prev, 0, sizeof(int32_t) * n, s), "embedding_grad memset"));
    embedding_link_kernel<<<link_grid, kThreads, 0, s>>>(n, vocab, ids, next, has_prev, err, tag);
    SG_TRY(launched("embedding_link_kernel"));
    embedding_chain_kernel<<<chain_grid, kThreads, 0, s>>>(n, d, vocab, ids, next, has_prev, dy, dt);
    return launched("embedding_chain_kernel");
  };
  return Status::Ok();
}

Status bind_norm(const OpArgs& a, BindCtx& ctx, Launch* out) {
  Norm p{};
  p.d = a.in[0].shape().back();
  p.rows = a.in[0].n / p.d;
  p.eps = static_cast<float>(a.attrs->f("eps"));
  p.x = a.in[0].f();
  p.g = a.in[1].f();
  p.amax = ctx.fused_amax;
  unsigned rows = row_grid(p.rows);
  switch (a.code) {
    case OpCode::LayerNorm:  // (x, g, b) -> (y, mean, rstd)
      p.b = a.in[2].f();
      p.y = a.out[0].f(), p.mean_out = a.out[1].f(), p.rstd_out = a.out[2].f();
      *out = [=](cudaStream_t s) { return norm_forward<true>(p, rows, s); };
      return Status::Ok();
    case OpCode::RmsNorm:  // (x, g) -> (y, rstd)
      p.y = a.out[0].f(), p.rstd_out = a.out[1].f();
      *out = [=](cudaStream_t s) { return norm_forward<false>(p, rows, s); };
      return Status::Ok();
    case OpCode::LayerNormGrad:  // (x, g, mean, rstd, dy) -> (dx, dg, db)
    case OpCode::RmsNormGrad: {  // (x, g, rstd, dy) -> (dx, dg)
      bool layer = a.code == OpCode::LayerNormGrad;
      size_t k = layer ? 1 : 0;
      if (layer) p.mean = a.in[2].f(), p.db = a.out[2].f();
      p.rstd = a.in[2 + k].f(), p.dy = a.in[3 + k].f();
      p.dx = a.out[0].f(), p.dg = a.out[1].f();
      const int64_t chunks = (p.rows + kColumnChunk - 1) / kColumnChunk;
      float* part = static_cast<float*>(ctx.scratch->reserve(sizeof(float) * 2 * chunks * p.d));
      const Device dev = ctx.dev;
      const unsigned cols = grid_for(chunks * p.d, dev);
      *out = [=](cudaStream_t s) {
        norm_dx_kernel<<<rows, kThreads, 0, s>>>(p);
        norm_column_chunk_kernel<<<cols, kThreads, 0, s>>>(p, part);
        SG_TRY(launched("norm gradient"));
        return launch_column_totals(p.d, chunks, part, p.dg, p.db, dev, s);
      };
      return Status::Ok();
    }
    default: return Status::Runtime("cuda norm binder given " + std::string(op_info(a.code).name));
  }
}

Status bind_rope(const OpArgs& a, BindCtx& ctx, Launch* out) {
  const Shape& xs = a.in[0].shape();
  int64_t T = xs[1], H = a.attrs->i("n_head"), Dh = xs[2] / H, rows = xs[0] * T;
  double base = a.attrs->f("base");
  float sign = a.attrs->i("inverse", 0) ? -1.f : 1.f;
  bool interleaved = a.attrs->i("interleaved", 0) != 0;
  const int32_t* pos = a.code == OpCode::RopeAt ? a.in[1].i32() : nullptr;
  const float* x = a.in[0].f();
  float* y = a.out[0].f();
  ErrorRecord* err = ctx.errors;
  int32_t tag = ctx.tag;
  unsigned grid = grid_for(rows * (Dh / 2), ctx.dev);
  *out = [=](cudaStream_t s) {
    rope_kernel<<<grid, kThreads, 0, s>>>(rows, T, H, Dh, base, sign, interleaved, pos, x, y, err, tag);
    return launched("rope_kernel");
  };
  return Status::Ok();
}

Status bind_dropout(const OpArgs& a, BindCtx& ctx, Launch* out) {
  int64_t n = a.in[0].n;
  const float* x = a.in[0].f();
  float* y = a.out[0].f();
  float p = static_cast<float>(a.attrs->f("p"));
  if (!a.attrs->i("training") || p == 0.f) {  // x through
    *out = [=](cudaStream_t s) {
      if (y == x) return Status::Ok();
      return cuda_status(cudaMemcpyAsync(y, x, sizeof(float) * n, cudaMemcpyDeviceToDevice, s), "dropout copy");
    };
    return Status::Ok();
  }
  uint64_t seed = static_cast<uint64_t>(a.attrs->i("seed")), offset = static_cast<uint64_t>(a.attrs->i("offset"));
  const int32_t* state = a.in[1].i32();
  float keep_scale = 1.f / (1.f - p);
  unsigned grid = grid_for(n, ctx.dev);
  *out = [=](cudaStream_t s) {
    dropout_kernel<<<grid, kThreads, 0, s>>>(n, seed, offset, state, p, keep_scale, x, y);
    return launched("dropout_kernel");
  };
  return Status::Ok();
}

}  // namespace

Status bind_transformer(const OpArgs& a, BindCtx& ctx, Launch* out) {
  switch (a.code) {
    case OpCode::Embedding: case OpCode::EmbeddingGrad: return bind_embedding(a, ctx, out);
    case OpCode::LayerNorm: case OpCode::RmsNorm: case OpCode::LayerNormGrad: case OpCode::RmsNormGrad:
      return bind_norm(a, ctx, out);
    case OpCode::Rope: case OpCode::RopeAt: return bind_rope(a, ctx, out);
    case OpCode::Dropout: return bind_dropout(a, ctx, out);
    case OpCode::RunningStat: return bind_running_stat(a, ctx, out);
    default: return Status::Runtime("cuda transformer binder given " + std::string(op_info(a.code).name));
  }
}

}  // namespace sgrt::cuda
