// quantize: f32 -> FP8 / FP4 / FP16 / BF16 codes with power-of-two (or MX / NVFP4
// block) scales, amax, keep-previous rule, saturation / underflow counters and the
// delayed-scaling amax history (kernels/cpu/quant_ops.cpp and cpu/quantize.h are
// the definition; sgrt/quant.h has the conventions).
//
// Every granularity runs the same way, so scales are set before any element is
// encoded and the state is touched once:
//   1. zero the step's statistics (scratch)
//   2. scales: tensor: amax of all (or the one a fused norm reduced, bind.h's
//      fused_amax), then one thread picks exps[0] (static / history / current);
//      row: a block per row; column: a thread per column; MX / NVFP4: a
//      thread per block of 32 / 16 (NVFP4 after its FP32 tensor scale); 1x128
//      tiles / 128x128 blocks: a thread per FP32 scale (formats/fp8_tile.h)
//   3. encode every element with its multiplier (E2M1: one thread per byte, two codes)
//   4. one thread adds the counters to the state and appends amax to the history
// Maxima go through atomicMax on |x| bits (order-free, NaN-sticky as the CPU's
// nan_max); counts through integer atomics: results do not depend on scheduling.
#include "common.cuh"
#include "formats/fp8_tile.h"
#include "formats/nvfp4.h"
#include "scale.cuh"
#include "sgrt/quant.h"

namespace sgrt::cuda {
namespace {

struct Stats {
  unsigned amax;  // bits of max |x| over the whole tensor
  unsigned kept;  // scale groups that kept their previous scale
  unsigned long long saturated, underflow;
  float tensor_scale;  // NVFP4's second level for this step
  int current;         // per tensor / row / column: scales come from this step's amax
};

struct Q {
  const float* x;
  int64_t n, rows, cols;
  DType fmt;
  float fmax;
  int margin;
  QuantGranularity g;
  ScaleMode mode;
  int32_t static_log2;
  int64_t hist;
  bool update;
  void* q;        // codes
  void* scale;    // i32 exponents, E8M0 or E4M3 block scales (quant.h)
  float* state;   // f32[kStateHeader + hist]
  Stats* st;      // scratch
  int64_t nb;     // MX / NVFP4 / tiles: blocks per row
  int64_t block;  // MX: 32, NVFP4: 16, tiles: 128
  int64_t tile_rows;  // 1x128 tiles: 1; 128x128 blocks: 128
  const unsigned* fused_amax;  // per tensor after a fused norm: amax it reduced (else nullptr)
};

__device__ inline float nan_max(float m, float a) { return (a > m || a != a) ? a : m; }

__device__ inline float span_amax(const float* x, int64_t n) {
  float m = 0.f;
  for (int64_t i = 0; i < n; ++i) m = nan_max(m, fabsf(x[i]));
  return m;
}

__device__ inline int32_t* exps(const Q& q) { return static_cast<int32_t*>(q.scale); }
__device__ inline uint8_t* codes8(void* p) { return static_cast<uint8_t*>(p); }

__global__ void amax_kernel(Q q) {
  float m = 0.f;
  SG_GRID_STRIDE(i, q.n) m = nan_max(m, fabsf(q.x[i]));
  atomic_max_abs(&q.st->amax, m);
}

// The step's amax when a fused norm computed it instead of amax_kernel.
__device__ inline void take_fused_amax(const Q& q) {
  if (q.fused_amax) q.st->amax = *q.fused_amax;
}

// Static and delayed scaling set exps[0] (the CPU does the same for any granularity);
// otherwise scales are current, and a per-tensor scale comes from this step's amax.
__global__ void mode_kernel(Q q) {
  take_fused_amax(q);
  int current = 1;
  if (q.mode == ScaleMode::static_pow2) {
    exps(q)[0] = q.static_log2;
    current = 0;
  } else if (q.mode == ScaleMode::delayed_amax && q.hist > 0 && q.state[kStateHistoryPos] >= static_cast<float>(q.hist)) {
    float amax = 0.f;
    for (int64_t i = 0; i < q.hist; ++i) amax = amax < q.state[kStateHeader + i] ? q.state[kStateHeader + i] : amax;
    bool kept;
    exps(q)[0] = scale_exponent(amax, q.fmax, q.margin, exps(q)[0], &kept);
    current = 0;
  }
  if (current && q.g == QuantGranularity::tensor) {
    bool kept;
    exps(q)[0] = scale_exponent(__uint_as_float(q.st->amax), q.fmax, q.margin, exps(q)[0], &kept);
    q.st->kept += kept;
  }
  q.st->current = current;
}

// One block per row: the row's amax, and its exponent when scales are current.
__global__ void row_scale_kernel(Q q) {
  __shared__ unsigned row_amax;
  for (int64_t r = blockIdx.x; r < q.rows; r += gridDim.x) {
    if (threadIdx.x == 0) row_amax = 0u;
    __syncthreads();
    float m = 0.f;
    for (int64_t c = threadIdx.x; c < q.cols; c += blockDim.x) m = nan_max(m, fabsf(q.x[r * q.cols + c]));
    atomic_max_abs(&row_amax, m);
    __syncthreads();
    if (threadIdx.x == 0) {
      const float a = __uint_as_float(row_amax);
      atomic_max_abs(&q.st->amax, a);
      if (q.st->current) {
        bool kept;
        exps(q)[r] = scale_exponent(a, q.fmax, q.margin, exps(q)[r], &kept);
        atomicAdd(&q.st->kept, kept ? 1u : 0u);
      }
    }
    __syncthreads();  // row_amax is reused for the next row
  }
}

// One thread per column (reads coalesce across the warp).
__global__ void col_scale_kernel(Q q) {
  SG_GRID_STRIDE(c, q.cols) {
    float a = 0.f;
    for (int64_t r = 0; r < q.rows; ++r) a = nan_max(a, fabsf(q.x[r * q.cols + c]));
    atomic_max_abs(&q.st->amax, a);
    if (q.st->current) {
      bool kept;
      exps(q)[c] = scale_exponent(a, q.fmax, q.margin, exps(q)[c], &kept);
      atomicAdd(&q.st->kept, kept ? 1u : 0u);
    }
  }
}

// MX: a block's E8M0 scale stores 2^-e for e from the block's amax (0 when kept);
// a block holding a NaN or an infinity gets OCP's NaN scale 0xFF.
__global__ void mx_scale_kernel(Q q) {
  SG_GRID_STRIDE(b, q.rows * q.nb) {
    const int64_t r = b / q.nb, c0 = (b % q.nb) * q.block;
    const float a = span_amax(q.x + r * q.cols + c0, q.cols - c0 < q.block ? q.cols - c0 : q.block);
    atomic_max_abs(&q.st->amax, a);
    bool kept;
    const int32_t e = scale_exponent(a, q.fmax, q.margin, 0, &kept);
    atomicAdd(&q.st->kept, kept ? 1u : 0u);
    codes8(q.scale)[b] = kept && a != 0.f ? 0xFFu : static_cast<uint8_t>(127 - e);
  }
}

__device__ inline bool k_chunked(const Q& q) {
  return q.g == QuantGranularity::tile1x128 || q.g == QuantGranularity::block128x128;
}

// Blockwise FP8: a tile's (block's) FP32 scale amax / fmax, NaN for a NaN or inf
// in it, 1 when that is not a normal float (formats/fp8_tile.h).
__global__ void fp8_tile_scale_kernel(Q q) {
  const int64_t groups = (q.rows + q.tile_rows - 1) / q.tile_rows;
  SG_GRID_STRIDE(t, groups * q.nb) {
    const int64_t r0 = (t / q.nb) * q.tile_rows, c0 = (t % q.nb) * q.block, n = q.cols - c0 < q.block ? q.cols - c0 : q.block;
    const int64_t r1 = r0 + q.tile_rows < q.rows ? r0 + q.tile_rows : q.rows;
    float a = 0.f;
    for (int64_t r = r0; r < r1; ++r) a = nan_max(a, span_amax(q.x + r * q.cols + c0, n));
    atomic_max_abs(&q.st->amax, a);
    bool kept;
    static_cast<float*>(q.scale)[t] = fmt::fp8_tile_scale(a, q.fmax, &kept);
    atomicAdd(&q.st->kept, kept ? 1u : 0u);
  }
}

// NVFP4's FP32 tensor scale (formats/nvfp4.h): amax / (6 * 256), or the previous one.
__global__ void nvfp4_tensor_kernel(Q q) {
  take_fused_amax(q);
  bool kept;
  q.st->tensor_scale = fmt::nvfp4_tensor_scale(__uint_as_float(q.st->amax), q.state[kStateTensorScale], &kept);
  q.st->kept += kept;
}

// A block's E4M3 scale, four over six (formats/nvfp4.h).
__global__ void nvfp4_scale_kernel(Q q) {
  const float ts = q.st->tensor_scale;
  SG_GRID_STRIDE(b, q.rows * q.nb) {
    const int64_t r = b / q.nb, c0 = (b % q.nb) * q.block, n = q.cols - c0 < q.block ? q.cols - c0 : q.block;
    const float* xb = q.x + r * q.cols + c0;
    codes8(q.scale)[b] = static_cast<uint8_t>(fmt::nvfp4_block_scale(xb, n, span_amax(xb, n), ts));
  }
}

// Element i's multiplier under the scales set above.
__device__ inline float multiplier(const Q& q, int64_t i) {
  const int64_t r = i / q.cols, c = i % q.cols;
  switch (q.g) {
    case QuantGranularity::tensor: return fmt::exp2i(exps(q)[0]);
    case QuantGranularity::row: return fmt::exp2i(exps(q)[r]);
    case QuantGranularity::column: return fmt::exp2i(exps(q)[c]);
    case QuantGranularity::mx: {  // a NaN-scaled block encodes with 2^0, as the CPU
      const uint32_t code = codes8(q.scale)[r * q.nb + c / q.block];
      return code == 0xFFu ? 1.f : fmt::exp2i(127 - static_cast<int>(code));
    }
    case QuantGranularity::tile1x128: case QuantGranularity::block128x128:
      return fmt::fp8_tile_mult(static_cast<const float*>(q.scale)[(r / q.tile_rows) * q.nb + c / q.block]);
    default: return fmt::nvfp4_mult(codes8(q.scale)[r * q.nb + c / q.block], q.st->tensor_scale);
  }
}

// The code of element i; counts saturation (|x m| > max) and underflow (x != 0 -> ±0).
__device__ inline uint32_t encode_one(const Q& q, int64_t i, unsigned long long* sat, unsigned long long* uf) {
  const float x = q.x[i], v = x * multiplier(q, i);
  *sat += fabsf(v) > q.fmax && !k_chunked(q);  // tiles: only 1 / scale's rounding
  const uint32_t code = encode_as(q.fmt, v);
  const uint32_t mag = q.fmt == DType::e2m1 ? code & 0x7u : dtype_bits(q.fmt) == 16 ? code & 0x7FFFu : code & 0x7Fu;
  *uf += x != 0.f && mag == 0u;
  return code;
}

__global__ void encode_kernel(Q q) {
  unsigned long long sat = 0, uf = 0;
  if (q.fmt == DType::e2m1) {  // one byte, two codes, low nibble first
    SG_GRID_STRIDE(j, (q.n + 1) / 2) {
      uint32_t lo = encode_one(q, 2 * j, &sat, &uf);
      // An odd count's last byte keeps its high nibble, as the CPU's and Vulkan's
      // quantize leave the bits past a tensor's last code.
      uint32_t hi = 2 * j + 1 < q.n ? encode_one(q, 2 * j + 1, &sat, &uf) : codes8(q.q)[j] >> 4;
      codes8(q.q)[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  } else if (dtype_bits(q.fmt) == 16) {
    SG_GRID_STRIDE(i, q.n) static_cast<uint16_t*>(q.q)[i] = static_cast<uint16_t>(encode_one(q, i, &sat, &uf));
  } else {
    SG_GRID_STRIDE(i, q.n) codes8(q.q)[i] = static_cast<uint8_t>(encode_one(q, i, &sat, &uf));
  }
  if (sat) atomicAdd(&q.st->saturated, sat);
  if (uf) atomicAdd(&q.st->underflow, uf);
}

__global__ void finish_kernel(Q q) {
  float* s = q.state;
  // NVFP4's tensor scale goes with the codes just written: every program stores it.
  if (q.g == QuantGranularity::nvfp4) s[kStateTensorScale] = q.st->tensor_scale;
  if (!q.update) return;  // eval and infer programs leave the counters alone
  s[kStateSaturated] += static_cast<float>(q.st->saturated);
  s[kStateKept] += static_cast<float>(q.st->kept);
  s[kStateUnderflow] += static_cast<float>(q.st->underflow);
  const float amax = __uint_as_float(q.st->amax);
  if (q.hist > 0 && isfinite(amax)) {
    const int64_t pos = static_cast<int64_t>(s[kStateHistoryPos]);
    s[kStateHeader + pos % q.hist] = amax;
    s[kStateHistoryPos] = static_cast<float>(pos + 1);
  }
}

}  // namespace

Status bind_quantize(const OpArgs& a, BindCtx& ctx, Launch* out) {
  const ScaleSpec& spec = a.quant[0];
  Q q{};
  q.x = a.in[0].f();
  q.n = a.in[0].n;
  q.cols = a.in[0].shape().back();
  q.rows = q.cols ? q.n / q.cols : 0;
  q.fmt = spec.dtype;
  q.fmax = format_max(q.fmt);
  q.margin = spec.margin;
  q.g = spec.granularity;
  q.mode = spec.mode;
  q.static_log2 = spec.static_log2;
  q.hist = spec.history;
  q.update = a.attrs->i("update", 1) != 0;
  q.q = a.out[0].p;
  q.scale = a.out[1].p;
  q.state = a.out[2].f();
  if (q.g == QuantGranularity::nvfp4_16x16 || spec.hadamard || spec.stochastic)
    return Status::Unsupported(
        "recipe nvfp4-train (16x16 weight blocks, Hadamard transform, stochastic rounding) is not implemented on CUDA: "
        "use --backend cpu");
  const bool tiles = is_k_chunked(q.g);
  q.block = q.g == QuantGranularity::mx ? kMxBlock : tiles ? kFp8Tile : kNvfp4Block;
  q.nb = (q.cols + q.block - 1) / q.block;
  q.tile_rows = q.g == QuantGranularity::block128x128 ? kFp8Tile : 1;
  bool is_fp = q.fmt == DType::e4m3 || q.fmt == DType::e5m2 || q.fmt == DType::e2m1;
  if (q.g == QuantGranularity::mx && !is_fp) return Status::Invalid("mx blocks need e4m3, e5m2 or e2m1");
  if (tiles && q.fmt != DType::e4m3 && q.fmt != DType::e5m2) return Status::Invalid("1x128 / 128x128 tiles need e4m3 or e5m2");
  if (q.fmax == 0) return Status::Invalid("the target dtype must be e4m3, e5m2, e2m1, f16 or bf16");
  q.st = static_cast<Stats*>(ctx.scratch->reserve(sizeof(Stats)));
  if (ctx.fused_amax && q.g != QuantGranularity::tensor && q.g != QuantGranularity::nvfp4)
    return Status::Runtime("cuda quantize: a fused norm's amax given to a quantize with per-group scales");
  q.fused_amax = ctx.fused_amax;
  const Device dev = ctx.dev;
  const unsigned grid = grid_for(q.n, dev), rows_grid = grid_for(q.rows * kThreads, dev),
                 cols_grid = grid_for(q.cols, dev), blocks_grid = grid_for(q.rows * q.nb, dev),
                 tiles_grid = grid_for(((q.rows + q.tile_rows - 1) / q.tile_rows) * q.nb, dev);
  *out = [=](cudaStream_t s) {
    SG_CUDA(cudaMemsetAsync(q.st, 0, sizeof(Stats), s));
    switch (q.g) {
      case QuantGranularity::tensor:
        // A static scale without a history takes no amax at run time.
        if (!q.fused_amax && (q.mode != ScaleMode::static_pow2 || q.hist > 0)) amax_kernel<<<grid, kThreads, 0, s>>>(q);
        mode_kernel<<<1, 1, 0, s>>>(q);
        break;
      case QuantGranularity::row:
        mode_kernel<<<1, 1, 0, s>>>(q);
        row_scale_kernel<<<rows_grid, kThreads, 0, s>>>(q);
        break;
      case QuantGranularity::column:
        mode_kernel<<<1, 1, 0, s>>>(q);
        col_scale_kernel<<<cols_grid, kThreads, 0, s>>>(q);
        break;
      case QuantGranularity::mx:
        mx_scale_kernel<<<blocks_grid, kThreads, 0, s>>>(q);
        break;
      case QuantGranularity::nvfp4:
        if (!q.fused_amax) amax_kernel<<<grid, kThreads, 0, s>>>(q);
        nvfp4_tensor_kernel<<<1, 1, 0, s>>>(q);
        nvfp4_scale_kernel<<<blocks_grid, kThreads, 0, s>>>(q);
        break;
      case QuantGranularity::tile1x128: case QuantGranularity::block128x128:
        fp8_tile_scale_kernel<<<tiles_grid, kThreads, 0, s>>>(q);
        break;
      case QuantGranularity::nvfp4_16x16: break;  // refused above
    }
    encode_kernel<<<grid, kThreads, 0, s>>>(q);
    finish_kernel<<<1, 1, 0, s>>>(q);
    return launched("quantize kernels");
  };
  return Status::Ok();
}

}  // namespace sgrt::cuda
