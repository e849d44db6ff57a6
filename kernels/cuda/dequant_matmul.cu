// A frozen quantized base (GGUF q8_0 / q4_1 blocks, kernels/formats/gguf_blocks.h)
// read in place: dequant_matmul decodes tiles of w into shared memory inside the
// GEMM (never a whole f32 copy of w), and embedding gathers rows of a block table.
//
// C[M, P] = x[M, Q] B[Q, P] with B[q][p] = w[p][q] (x @ w^T) or w[q][p]
// (transpose_w: x @ w), in FP32 (no tensor cores: the decoded values are f32, and
// an exact f32 product keeps the result within the f32-accumulation bound of the
// f64 reference). A w of up to kDecodedMax bytes decoded (every transformer
// projection) is decoded into scratch at each run, the CPU's values, and
// multiplied by cuBLASLt as matmul is: the tiled kernel below ran QLoRA's
// [256, 576] x [576, 1536] products at ~2.9 TFLOP/s on an H200, cuBLASLt's FP32
// reaches ~50 there. A larger w (a 49152-row tied head: 113 MB decoded), or
// SGRT_CUDA_DECODE_BASE=0, takes the tiled kernel, which decodes tiles into
// shared memory inside the GEMM (never a whole f32 copy of w): a 64x64 tile of C
// per 256-thread block, 4x4 per thread, 32 reduction indices per step (one block
// of w along its rows when the reduction runs along them); every C element sums q
// in order (deterministic).
//
// Decoding follows ggml's order (product, then sum) with explicit round-to-nearest
// intrinsics so nvcc does not contract q4_1's nibble * d + m into an FMA: the
// values match the CPU's decode bit for bit.
#include <cstdint>
#include <memory>

#include "bind.h"
#include "common.cuh"
#include "formats/gguf_blocks.h"

namespace sgrt::cuda {
namespace {

constexpr int kTileM = 64, kTileP = 64, kTileQ = 32;
constexpr int64_t kDecodedMax = int64_t{32} << 20;  // bytes of a decoded w in scratch

// Element c of a row of blocks.
template <DType DT>
__device__ float block_value(const uint8_t* row, int64_t c) {
  constexpr int bytes = DT == DType::q8_0 ? fmt::kQ8_0Bytes : fmt::kQ4_1Bytes;
  const uint8_t* b = row + (c / fmt::kGgufBlock) * bytes;
  const int j = static_cast<int>(c % fmt::kGgufBlock);
  if constexpr (DT == DType::q8_0) return __fmul_rn(static_cast<float>(static_cast<int8_t>(b[2 + j])), fmt::f16_at(b));
  const uint8_t byte = b[4 + (j & 15)];
  const int nibble = j < 16 ? byte & 0xF : byte >> 4;
  return __fadd_rn(__fmul_rn(static_cast<float>(nibble), fmt::f16_at(b)), fmt::f16_at(b + 2));
}

// x [M, Q], w [N, K] as rows of `row_bytes`, y [M, P]; kTrans: Q = N, P = K.
template <DType DT, bool kTrans>
__global__ void __launch_bounds__(kThreads) dequant_matmul_kernel(int64_t M, int64_t Q, int64_t P, const float* x,
                                                                  const uint8_t* w, int64_t row_bytes, float* y) {
  __shared__ float xs[kTileQ][kTileM + 1];  // x tile, transposed (+1: no bank conflicts on the store)
  __shared__ float ws[kTileQ][kTileP];      // decoded B tile
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTileM, p0 = static_cast<int64_t>(blockIdx.x) * kTileP;
  float acc[4][4] = {};
  for (int64_t q0 = 0; q0 < Q; q0 += kTileQ) {
    for (int e = tid; e < kTileM * kTileQ; e += kThreads) {
      const int m = e / kTileQ, q = e % kTileQ;  // along x's rows: coalesced
      xs[q][m] = m0 + m < M && q0 + q < Q ? x[(m0 + m) * Q + q0 + q] : 0.f;
    }
    for (int e = tid; e < kTileP * kTileQ; e += kThreads) {
      // A warp reads 32 consecutive elements of one row of w: one block.
      const int p = kTrans ? e % kTileP : e / kTileQ, q = kTrans ? e / kTileP : e % kTileQ;
      const int64_t gp = p0 + p, gq = q0 + q;
      float v = 0.f;
      if (gp < P && gq < Q) v = kTrans ? block_value<DT>(w + gq * row_bytes, gp) : block_value<DT>(w + gp * row_bytes, gq);
      ws[q][p] = v;
    }
    __syncthreads();
#pragma unroll 8
    for (int q = 0; q < kTileQ; ++q) {
      float a[4], b[4];
      for (int i = 0; i < 4; ++i) a[i] = xs[q][ty + 16 * i];
      for (int j = 0; j < 4; ++j) b[j] = ws[q][tx + 16 * j];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i) {
    const int64_t m = m0 + ty + 16 * i;
    if (m >= M) continue;
    for (int j = 0; j < 4; ++j) {
      const int64_t p = p0 + tx + 16 * j;
      if (p < P) y[m * P + p] = acc[i][j];
    }
  }
}

// w [rows, width] as rows of `row_bytes` -> out f32 [rows, width].
template <DType DT>
__global__ void decode_kernel(int64_t rows, int64_t width, const uint8_t* w, int64_t row_bytes, float* out) {
  SG_GRID_STRIDE(i, rows * width) out[i] = block_value<DT>(w + (i / width) * row_bytes, i % width);
}

// table [V, D] as rows of `row_bytes`, ids [n] -> y [n, D]; a bad id leaves zeros
// and is recorded.
template <DType DT>
__global__ void block_embedding_kernel(int64_t n, int64_t d, int64_t vocab, const uint8_t* table, int64_t row_bytes,
                                       const int32_t* ids, float* y, ErrorRecord* err, int32_t tag) {
  SG_GRID_STRIDE(i, n * d) {
    const int64_t r = i / d;
    const int32_t id = ids[r];
    if (id >= 0 && id < vocab) {
      y[i] = block_value<DT>(table + id * row_bytes, i % d);
    } else {
      if (i % d == 0) record_label_error(err, tag, id, r, vocab);
      y[i] = 0.f;
    }
  }
}

template <DType DT>
Status bind_typed(const OpArgs& a, BindCtx& ctx, Launch* out) {
  const Tensor& w = a.in[a.code == OpCode::Embedding ? 0 : 1];
  const int64_t rows = w.shape()[0], width = w.shape()[1];
  const int64_t row_bytes = static_cast<int64_t>(dtype_bytes(DT, width));
  const uint8_t* wp = static_cast<const uint8_t*>(w.p);
  float* y = a.out[0].f();
  if (a.code == OpCode::Embedding) {
    const int64_t n = a.in[1].n;
    const int32_t* ids = a.in[1].i32();
    ErrorRecord* err = ctx.errors;
    const int32_t tag = ctx.tag;
    const unsigned grid = grid_for(n * width, ctx.dev);
    *out = [=](cudaStream_t s) {
      block_embedding_kernel<DT><<<grid, kThreads, 0, s>>>(n, width, rows, wp, row_bytes, ids, y, err, tag);
      return launched("block_embedding_kernel");
    };
    return Status::Ok();
  }
  const bool trans = a.attrs->i("transpose_w", 0) != 0;
  const int64_t Q = trans ? rows : width, P = trans ? width : rows, M = P > 0 ? a.out[0].n / P : 0;
  const float* x = a.in[0].f();
  const int64_t decoded_bytes = rows * width * static_cast<int64_t>(sizeof(float));
  if (ctx.decode_base && M > 0 && P > 0 && Q > 0 && decoded_bytes <= kDecodedMax) {
    float* wf = static_cast<float*>(ctx.scratch->reserve(static_cast<size_t>(decoded_bytes)));
    GemmSpec g;  // y[M, P] = x[M, Q] @ op(wf): wf is [P, Q] (x @ w^T) or [Q, P] (transpose_w)
    g.m = M, g.n = P, g.k = Q;
    g.trans_b = !trans;
    g.lda = Q, g.ldb = width, g.ldc = P;
    std::shared_ptr<const LtGemm> gemm;
    SG_TRY(plan_shared_gemm(ctx, g, x, wf, y, &gemm));
    const unsigned decode_grid = grid_for(rows * width, ctx.dev);
    *out = [=](cudaStream_t s) {
      decode_kernel<DT><<<decode_grid, kThreads, 0, s>>>(rows, width, wp, row_bytes, wf);
      SG_TRY(launched("dequant_matmul decode_kernel"));
      return gemm->run(x, wf, y, s);
    };
    return Status::Ok();
  }
  const dim3 grid(static_cast<unsigned>((P + kTileP - 1) / kTileP), static_cast<unsigned>((M + kTileM - 1) / kTileM));
  if ((M + kTileM - 1) / kTileM > 65535)
    return Status::Unsupported("dequant_matmul: " + std::to_string(M) + " rows of x exceed the launch grid");
  *out = [=](cudaStream_t s) {
    if (M == 0 || P == 0) return Status::Ok();  // an empty y: no launch (a zero grid is an error)
    if (trans) dequant_matmul_kernel<DT, true><<<grid, kThreads, 0, s>>>(M, Q, P, x, wp, row_bytes, y);
    else dequant_matmul_kernel<DT, false><<<grid, kThreads, 0, s>>>(M, Q, P, x, wp, row_bytes, y);
    return launched("dequant_matmul_kernel");
  };
  return Status::Ok();
}

}  // namespace

Status bind_block_formats(const OpArgs& a, BindCtx& ctx, Launch* out) {
  const DType dt = a.in[a.code == OpCode::Embedding ? 0 : 1].dtype();
  if (dt == DType::q8_0) return bind_typed<DType::q8_0>(a, ctx, out);
  if (dt == DType::q4_1) return bind_typed<DType::q4_1>(a, ctx, out);
  return Status::Unsupported("block kernels take q8_0 or q4_1, got " + std::string(dtype_name(dt)));
}

}  // namespace sgrt::cuda
