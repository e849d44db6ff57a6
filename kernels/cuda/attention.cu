// Causal multi-head attention, forward and backward (definition and layout:
// kernels/cpu/attention.cpp). q, y, dy [B, T, H*Dh]; k, v [B, T, Hkv*Dh]; query
// head h reads kv head h / (H / Hkv); lse [B, H, T]; scale 1/sqrt(Dh).
//
// Flash-style: K and V stream through shared memory in tiles of 32 keys, one key
// per lane, and each query row keeps an online softmax (running max m, sum l, the
// unnormalized output), so no T x T matrix exists anywhere. The forward saves
// lse = m + log l; the backward recomputes P = exp(S - lse) from it, with
// D = rowsum(dy * y). Every output element is written by one thread that sums in
// a fixed order (dq: a query tile's thread over its keys; dk, dv: a key tile's
// thread over the group's heads, then the queries), so results repeat run to run
// without atomics.
//
// kv_attention (decoding) runs the forward over the caches [B, Tmax, Hkv*Dh]
// after appending this step's k, v at rows pos..: query row i is position pos + i
// and sees rows 0..pos+i; no lse. pos is read on the device; one out of the
// cache is recorded as the op's error and the kernels write nothing.
#include <cmath>
#include <string>

#include "common.cuh"

namespace sgrt::cuda {
namespace {

constexpr int kLanes = 32;
constexpr int kKeys = kLanes;              // keys per K/V tile: one per lane
constexpr int kWarps = kThreads / kLanes;  // 8
constexpr int kMaxDh = 128;                // head sizes up to this
// Each kernel is built for head sizes up to kDims = 64 (GPT's, SmolLM2's) or
// kMaxDh: its per-thread loops over a row's dims run kDims / 32 or kDims / 8
// times (a 64-wide head wasted half of them on the 128 build).
constexpr int kNarrowDh = 64;
template <int kDims>
constexpr int kLaneDims = kDims / kLanes;  // output elements of a row per lane
// Forward and dq: each warp owns kRowsPerWarp query rows of a kRows tile.
constexpr int kRowsPerWarp = 4;
constexpr int kRows = kWarps * kRowsPerWarp;  // 32
// dk, dv: query rows per step (two per warp when the scores are formed); each
// thread accumulates kDkDims dims of one key: kThreads / kKeys threads per key.
constexpr int kStepRows = 16;
constexpr int kKeyThreads = kThreads / kKeys;  // 8
template <int kDims>
constexpr int kDkDims = kDims / kKeyThreads;  // 8 or 16
constexpr unsigned kFull = 0xffffffffu;

struct Attn {
  int64_t B, T, H, Hkv, Dh, C, Ckv;  // C = H*Dh, Ckv = Hkv*Dh
  int64_t Tk;                        // rows per batch of k, v: T, or the caches' Tmax
  const int32_t* pos;                // kv_attention's first position (device); null: 0
  float scale;
  // Offset of head h's [T, Dh] slice of batch b (row stride C), of its kv head's (row stride Ckv).
  __host__ __device__ int64_t q_off(int64_t b, int64_t h) const { return b * T * C + h * Dh; }
  __host__ __device__ int64_t kv_off(int64_t b, int64_t h) const { return b * Tk * Ckv + h / (H / Hkv) * Dh; }
  __device__ int64_t first_pos() const { return pos ? *pos : 0; }
  __device__ bool pos_fits(int64_t p0) const { return p0 >= 0 && p0 + T <= Tk; }
  __host__ __device__ int64_t ld() const { return Dh + 1; }  // padded K/V tile row: lane j's row in its own bank
};

__device__ float warp_max(float x) {
  for (int w = kLanes / 2; w > 0; w >>= 1) x = fmaxf(x, __shfl_xor_sync(kFull, x, w));
  return x;
}

__device__ float warp_sum(float x) {
  for (int w = kLanes / 2; w > 0; w >>= 1) x += __shfl_xor_sync(kFull, x, w);
  return x;
}

__device__ float dot(const float* a, const float* b, int64_t n) {
  float s = 0.f;
  for (int d = 0; d < static_cast<int>(n); ++d) s += a[d] * b[d];
  return s;
}

// Rows r0 .. r0 + rows - 1 of a head's [T, Dh] slice (row stride `stride`) into
// dst [rows, ld], zeros past T. All threads of the block call it.
__device__ void load_rows(const float* src, int64_t stride, int64_t r0, int64_t rows, int64_t T, int64_t Dh,
                          int64_t ld, float* dst) {
  for (int64_t e = threadIdx.x; e < rows * Dh; e += kThreads) {
    int64_t r = e / Dh, d = e % Dh;
    dst[r * ld + d] = r0 + r < T ? src[(r0 + r) * stride + d] : 0.f;
  }
}

// Shared memory, in floats: K and V tiles (padded rows), then the query-side tiles.
__host__ __device__ int64_t kv_tiles(const Attn& p) { return 2 * kKeys * p.ld(); }
int64_t forward_floats(const Attn& p) { return kv_tiles(p) + kRows * p.Dh; }          // + q
int64_t dq_floats(const Attn& p) { return kv_tiles(p) + 2 * kRows * p.Dh; }           // + q, dy
int64_t dkdv_floats(const Attn& p) {                                                  // + q, dy, P, dS, lse, D
  return kv_tiles(p) + 2 * kStepRows * p.Dh + 2 * kStepRows * (kKeys + 1) + 2 * kStepRows;
}

// grid (B*H, ceil(T / kRows)): y and lse of one query tile of one head.
template <int kDims>
__global__ void attention_forward_kernel(Attn p, const float* q, const float* k, const float* v, float* y,
                                         float* lse) {
  extern __shared__ float smem[];
  const int64_t ld = p.ld();
  float *ks = smem, *vs = ks + kKeys * ld, *qs = vs + kKeys * ld;
  const int64_t bh = blockIdx.x, b = bh / p.H, h = bh % p.H, row0 = int64_t{blockIdx.y} * kRows;
  const int lane = threadIdx.x % kLanes, warp = threadIdx.x / kLanes;
  const int64_t pos = p.first_pos();  // query row i is position pos + i
  if (!p.pos_fits(pos)) return;       // recorded by kv_append_kernel
  const float* kh = k + p.kv_off(b, h);
  const float* vh = v + p.kv_off(b, h);
  load_rows(q + p.q_off(b, h), p.C, row0, kRows, p.T, p.Dh, p.Dh, qs);

  float m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][kLaneDims<kDims>];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.f;
#pragma unroll
    for (int c = 0; c < kLaneDims<kDims>; ++c) o[rr][c] = 0.f;
  }
  const int64_t last = pos + min(p.T, row0 + kRows) - 1;  // the tile's last row sees keys 0..last
  for (int64_t t0 = 0; t0 <= last; t0 += kKeys) {
    __syncthreads();  // the previous tile's readers are done
    load_rows(kh, p.Ckv, t0, kKeys, pos + p.T, p.Dh, ld, ks);
    load_rows(vh, p.Ckv, t0, kKeys, pos + p.T, p.Dh, ld, vs);
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr;
      const int64_t i = row0 + r;
      if (i >= p.T || pos + i < t0) continue;        // warp-uniform
      const int n = static_cast<int>(min(int64_t{kKeys}, pos + i - t0 + 1));  // causal: keys t0 .. t0+n-1 <= pos+i
      const float s = lane < n ? p.scale * dot(qs + r * p.Dh, ks + lane * ld, p.Dh) : -INFINITY;
      const float mn = fmaxf(m[rr], warp_max(s));   // finite: lane 0 always sees key t0 <= pos+i
      const float alpha = expf(m[rr] - mn);         // 0 on the first tile (m = -inf)
      const float e = lane < n ? expf(s - mn) : 0.f;
      l[rr] = l[rr] * alpha + warp_sum(e);
      m[rr] = mn;
#pragma unroll
      for (int c = 0; c < kLaneDims<kDims>; ++c) o[rr][c] *= alpha;
      for (int j = 0; j < n; ++j) {
        const float pj = __shfl_sync(kFull, e, j);
#pragma unroll
        for (int c = 0; c < kLaneDims<kDims>; ++c) {
          const int64_t d = lane + c * kLanes;
          if (d < p.Dh) o[rr][c] += pj * vs[j * ld + d];
        }
      }
    }
  }
  float* yh = y + p.q_off(b, h);
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t i = row0 + warp * kRowsPerWarp + rr;
    if (i >= p.T) continue;
    const float inv = 1.f / l[rr];
#pragma unroll
    for (int c = 0; c < kLaneDims<kDims>; ++c) {
      const int64_t d = lane + c * kLanes;
      if (d < p.Dh) yh[i * p.C + d] = o[rr][c] * inv;
    }
    if (lane == 0 && lse) lse[bh * p.T + i] = m[rr] + logf(l[rr]);
  }
}

// kv_attention: k, v [B, T, Ckv] into the caches [B, Tk, Ckv] at rows pos...
__global__ void kv_append_kernel(Attn p, const float* k, const float* v, float* kc, float* vc, ErrorRecord* err,
                                 int32_t tag) {
  const int64_t pos = p.first_pos(), rows = p.T * p.Ckv;
  if (!p.pos_fits(pos)) {
    if (blockIdx.x == 0 && threadIdx.x == 0) record_label_error(err, tag, static_cast<int32_t>(pos), 0, p.Tk - p.T + 1);
    return;
  }
  SG_GRID_STRIDE(e, p.B * rows) {
    const int64_t dst = (e / rows * p.Tk + pos) * p.Ckv + e % rows;
    kc[dst] = k[e];
    vc[dst] = v[e];
  }
}

// D [B, H, T] = rowsum(dy * y) per head row, summed in order as the CPU.
__global__ void attention_rowdot_kernel(Attn p, const float* y, const float* dy, float* D) {
  SG_GRID_STRIDE(e, p.B * p.H * p.T) {
    const int64_t bh = e / p.T, i = e % p.T, off = p.q_off(bh / p.H, bh % p.H) + i * p.C;
    D[e] = dot(dy + off, y + off, p.Dh);
  }
}

// grid (B*H, ceil(T / kRows)): dq = scale sum_j dS_ij k_j for one query tile,
// dS = P (dP - D), P = exp(S - lse), dP = dy V^T.
template <int kDims>
__global__ void attention_dq_kernel(Attn p, const float* q, const float* k, const float* v, const float* lse,
                                    const float* dy, const float* D, float* dq) {
  extern __shared__ float smem[];
  const int64_t ld = p.ld();
  float *ks = smem, *vs = ks + kKeys * ld, *qs = vs + kKeys * ld, *dys = qs + kRows * p.Dh;
  const int64_t bh = blockIdx.x, b = bh / p.H, h = bh % p.H, row0 = int64_t{blockIdx.y} * kRows;
  const int lane = threadIdx.x % kLanes, warp = threadIdx.x / kLanes;
  const float* kh = k + p.kv_off(b, h);
  const float* vh = v + p.kv_off(b, h);
  load_rows(q + p.q_off(b, h), p.C, row0, kRows, p.T, p.Dh, p.Dh, qs);
  load_rows(dy + p.q_off(b, h), p.C, row0, kRows, p.T, p.Dh, p.Dh, dys);

  float acc[kRowsPerWarp][kLaneDims<kDims>], row_lse[kRowsPerWarp], row_d[kRowsPerWarp];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t i = row0 + warp * kRowsPerWarp + rr;
    row_lse[rr] = i < p.T ? lse[bh * p.T + i] : 0.f;
    row_d[rr] = i < p.T ? D[bh * p.T + i] : 0.f;
#pragma unroll
    for (int c = 0; c < kLaneDims<kDims>; ++c) acc[rr][c] = 0.f;
  }
  const int64_t last = min(p.T, row0 + kRows) - 1;
  for (int64_t t0 = 0; t0 <= last; t0 += kKeys) {
    __syncthreads();
    load_rows(kh, p.Ckv, t0, kKeys, p.T, p.Dh, ld, ks);
    load_rows(vh, p.Ckv, t0, kKeys, p.T, p.Dh, ld, vs);
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr;
      const int64_t i = row0 + r;
      if (i >= p.T || i < t0) continue;  // warp-uniform
      const int n = static_cast<int>(min(int64_t{kKeys}, i - t0 + 1));
      float ds = 0.f;
      if (lane < n) {
        const float pr = expf(p.scale * dot(qs + r * p.Dh, ks + lane * ld, p.Dh) - row_lse[rr]);
        ds = pr * (dot(dys + r * p.Dh, vs + lane * ld, p.Dh) - row_d[rr]);
      }
      for (int j = 0; j < n; ++j) {
        const float dsj = __shfl_sync(kFull, ds, j);
#pragma unroll
        for (int c = 0; c < kLaneDims<kDims>; ++c) {
          const int64_t d = lane + c * kLanes;
          if (d < p.Dh) acc[rr][c] += dsj * ks[j * ld + d];
        }
      }
    }
  }
  float* dqh = dq + p.q_off(b, h);
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t i = row0 + warp * kRowsPerWarp + rr;
    if (i >= p.T) continue;
#pragma unroll
    for (int c = 0; c < kLaneDims<kDims>; ++c) {
      const int64_t d = lane + c * kLanes;
      if (d < p.Dh) dqh[i * p.C + d] = p.scale * acc[rr][c];
    }
  }
}

// grid (B*Hkv, ceil(T / kKeys)): dk, dv of one key tile of one kv head, summed
// over the group's query heads in order, each over its queries i >= the tile's
// first key in steps of kStepRows: dv_j = sum P_ij dy_i, dk_j = scale sum dS_ij q_i.
template <int kDims>
__global__ void attention_dkdv_kernel(Attn p, const float* q, const float* k, const float* v, const float* lse,
                                      const float* dy, const float* D, float* dk, float* dv) {
  extern __shared__ float smem[];
  const int64_t ld = p.ld(), pld = kKeys + 1;
  float *ks = smem, *vs = ks + kKeys * ld, *qs = vs + kKeys * ld, *dys = qs + kStepRows * p.Dh;
  float *ps = dys + kStepRows * p.Dh, *dss = ps + kStepRows * pld, *lse_s = dss + kStepRows * pld,
        *d_s = lse_s + kStepRows;  // ps, dss [kStepRows, pld]; lse_s, d_s [kStepRows]
  const int64_t b = blockIdx.x / p.Hkv, kvh = blockIdx.x % p.Hkv, k0 = int64_t{blockIdx.y} * kKeys;
  const int64_t group = p.H / p.Hkv;
  const int lane = threadIdx.x % kLanes, warp = threadIdx.x / kLanes;
  const int key = threadIdx.x / kKeyThreads, part = threadIdx.x % kKeyThreads;  // accumulation: dims part + 8c
  const int64_t kv = p.kv_off(b, kvh * group);
  load_rows(k + kv, p.Ckv, k0, kKeys, p.T, p.Dh, ld, ks);
  load_rows(v + kv, p.Ckv, k0, kKeys, p.T, p.Dh, ld, vs);

  float dk_acc[kDkDims<kDims>], dv_acc[kDkDims<kDims>];
#pragma unroll
  for (int c = 0; c < kDkDims<kDims>; ++c) dk_acc[c] = dv_acc[c] = 0.f;
  for (int64_t g = 0; g < group; ++g) {
    const int64_t h = kvh * group + g, bh = b * p.H + h, off = p.q_off(b, h);
    for (int64_t i0 = k0; i0 < p.T; i0 += kStepRows) {  // queries before k0 see none of these keys
      __syncthreads();  // the previous step's readers are done (and ks, vs are loaded)
      load_rows(q + off, p.C, i0, kStepRows, p.T, p.Dh, p.Dh, qs);
      load_rows(dy + off, p.C, i0, kStepRows, p.T, p.Dh, p.Dh, dys);
      if (threadIdx.x < kStepRows) {
        const int64_t i = i0 + threadIdx.x;
        lse_s[threadIdx.x] = i < p.T ? lse[bh * p.T + i] : 0.f;
        d_s[threadIdx.x] = i < p.T ? D[bh * p.T + i] : 0.f;
      }
      __syncthreads();
      for (int r = warp; r < kStepRows; r += kWarps) {  // P and dS of (query r, key lane)
        const int64_t i = i0 + r, j = k0 + lane;
        float pr = 0.f, ds = 0.f;
        if (i < p.T && j <= i) {  // j <= i < T: a real, visible key
          pr = expf(p.scale * dot(qs + r * p.Dh, ks + lane * ld, p.Dh) - lse_s[r]);
          ds = pr * (dot(dys + r * p.Dh, vs + lane * ld, p.Dh) - d_s[r]);
        }
        ps[r * pld + lane] = pr;
        dss[r * pld + lane] = ds;
      }
      __syncthreads();
      for (int r = 0; r < kStepRows; ++r) {
        const float pr = ps[r * pld + key], ds = dss[r * pld + key];
#pragma unroll
        for (int c = 0; c < kDkDims<kDims>; ++c) {
          const int64_t d = part + c * kKeyThreads;
          if (d < p.Dh) {
            dv_acc[c] += pr * dys[r * p.Dh + d];
            dk_acc[c] += ds * qs[r * p.Dh + d];
          }
        }
      }
    }
  }
  const int64_t j = k0 + key;
  if (j >= p.T) return;
#pragma unroll
  for (int c = 0; c < kDkDims<kDims>; ++c) {
    const int64_t d = part + c * kKeyThreads;
    if (d < p.Dh) {
      dk[kv + j * p.Ckv + d] = p.scale * dk_acc[c];
      dv[kv + j * p.Ckv + d] = dv_acc[c];
    }
  }
}

// Lets `kernel` take `floats` of dynamic shared memory: past the 48 KiB default
// it opts in to the most any head size up to kMaxDh needs (the attribute is per
// kernel, so a later bind with a smaller head never lowers it below an earlier one's).
Status allow_smem(const void* kernel, int64_t floats, int64_t max_floats, const Device& dev, const std::string& op) {
  const size_t bytes = sizeof(float) * static_cast<size_t>(floats);
  if (bytes > dev.smem_optin)
    return Status::Unsupported(op + ": needs " + std::to_string(bytes) + " bytes of shared memory, the device gives " +
                               std::to_string(dev.smem_optin));
  if (bytes <= 48 * 1024) return Status::Ok();
  const size_t most = std::min(sizeof(float) * static_cast<size_t>(max_floats), dev.smem_optin);
  return cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(most)),
                     "cudaFuncSetAttribute (attention shared memory)");
}

}  // namespace

Status bind_attention(const OpArgs& a, BindCtx& ctx, Launch* out) {
  const std::string op(op_info(a.code).name);
  const Shape& qs = a.in[0].shape();
  Attn p{};
  p.B = qs[0], p.T = qs[1], p.C = qs[2], p.H = a.attrs->i("n_head");
  p.Dh = p.C / p.H, p.Ckv = a.in[1].shape()[2], p.Hkv = p.Ckv / p.Dh;  // Hkv from k's width, as the CPU
  const bool kv = a.code == OpCode::KvAttention;
  p.Tk = kv ? a.in[3].shape()[1] : p.T;
  p.pos = kv ? a.in[5].i32() : nullptr;
  p.scale = 1.f / std::sqrt(static_cast<float>(p.Dh));
  if (p.Dh > kMaxDh)
    return Status::Unsupported(op + ": head size " + std::to_string(p.Dh) + " exceeds the " +
                               std::to_string(kMaxDh) + " the cuda kernel supports");
  const int64_t tiles = (p.T + kRows - 1) / kRows;  // kRows == kKeys: also the key tiles
  if (tiles > 65535 || p.B * p.H > INT32_MAX)
    return Status::Unsupported(op + ": sequence or batch too long for the cuda kernel's grid");
  Attn widest = p;
  widest.Dh = kMaxDh;
  const dim3 q_grid(static_cast<unsigned>(p.B * p.H), static_cast<unsigned>(tiles));
  const float *q = a.in[0].f(), *k = a.in[1].f(), *v = a.in[2].f();
  const bool narrow = p.Dh <= kNarrowDh;
  if (a.code != OpCode::AttentionGrad) {
    const int64_t fl = forward_floats(p);
    auto* forward = narrow ? attention_forward_kernel<kNarrowDh> : attention_forward_kernel<kMaxDh>;
    SG_TRY(allow_smem(reinterpret_cast<const void*>(forward), fl, forward_floats(widest), ctx.dev, op));
    const size_t smem = sizeof(float) * fl;
    float* y = a.out[0].f();
    if (!kv) {
      float* lse = a.out[1].f();
      *out = [=](cudaStream_t s) {
        forward<<<q_grid, kThreads, smem, s>>>(p, q, k, v, y, lse);
        return launched("attention_forward_kernel");
      };
      return Status::Ok();
    }
    // (q, k, v, k_cache, v_cache, pos) -> (y, k_cache, v_cache): append, then attend over the caches
    float *kc = a.out[1].f(), *vc = a.out[2].f();
    const unsigned append_grid = grid_for(p.B * p.T * p.Ckv, ctx.dev);
    ErrorRecord* err = ctx.errors;
    const int32_t tag = ctx.tag;
    *out = [=](cudaStream_t s) {
      kv_append_kernel<<<append_grid, kThreads, 0, s>>>(p, k, v, kc, vc, err, tag);
      forward<<<q_grid, kThreads, smem, s>>>(p, q, kc, vc, y, nullptr);
      return launched("kv_attention kernels");
    };
    return Status::Ok();
  }
  const int64_t dq_fl = dq_floats(p), dkdv_fl = dkdv_floats(p);
  auto* dq_kernel = narrow ? attention_dq_kernel<kNarrowDh> : attention_dq_kernel<kMaxDh>;
  auto* dkdv_kernel = narrow ? attention_dkdv_kernel<kNarrowDh> : attention_dkdv_kernel<kMaxDh>;
  SG_TRY(allow_smem(reinterpret_cast<const void*>(dq_kernel), dq_fl, dq_floats(widest), ctx.dev, op));
  SG_TRY(allow_smem(reinterpret_cast<const void*>(dkdv_kernel), dkdv_fl, dkdv_floats(widest), ctx.dev, op));
  const float *y = a.in[3].f(), *lse = a.in[4].f(), *dy = a.in[5].f();
  float *dq = a.out[0].f(), *dk = a.out[1].f(), *dv = a.out[2].f();
  float* D = static_cast<float*>(ctx.scratch->reserve(sizeof(float) * static_cast<size_t>(p.B * p.H * p.T)));
  const dim3 kv_grid(static_cast<unsigned>(p.B * p.Hkv), static_cast<unsigned>(tiles));
  const unsigned rowdot_grid = grid_for(p.B * p.H * p.T, ctx.dev);
  const size_t dq_smem = sizeof(float) * dq_fl, dkdv_smem = sizeof(float) * dkdv_fl;
  *out = [=](cudaStream_t s) {
    attention_rowdot_kernel<<<rowdot_grid, kThreads, 0, s>>>(p, y, dy, D);
    dq_kernel<<<q_grid, kThreads, dq_smem, s>>>(p, q, k, v, lse, dy, D, dq);
    dkdv_kernel<<<kv_grid, kThreads, dkdv_smem, s>>>(p, q, k, v, lse, dy, D, dk, dv);
    return launched("attention backward kernels");
  };
  return Status::Ok();
}

}  // namespace sgrt::cuda
