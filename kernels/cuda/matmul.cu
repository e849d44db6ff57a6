// matmul (f32) and qmatmul (quantized operands) on cuBLASLt, FP32 accumulation.
// Semantics: kernels/cpu/matmul.cpp, quant_ops.cpp (k_qmatmul) and cpu/gemm.h.
//
// matmul: cuBLASLt in FP32 with CUBLAS_COMPUTE_32F (no TF32), any transposition.
//
// qmatmul picks one path at prepare, by operand dtypes, scale kinds and device:
//   fp8  both operands E4M3/E5M2/E2M1 (not both E5M2), scales per tensor or per
//        outer index, FP8 tensor cores (sm_89+), K % 16 == 0. Operands are packed
//        K-major when cuBLASLt's TN layout needs it (E2M1 becomes E4M3 on the way:
//        exact, the FP4 paper's "FP4 on FP8 tensor cores"); per-tensor scales go
//        through cuBLASLt's A/B scale pointers, per-outer scales through an epilogue.
//   bf16 all operands exact in BF16 (FP8, FP4, BF16): decoded to K-major BF16 with
//        every power-of-two / E8M0 / E4M3 block scale applied (products stay exact),
//        then a BF16 GEMM. Block scales (MX, NVFP4) and sm_87 (no FP8) land here;
//        native block-scaled MXFP8/NVFP4 GEMMs need sm_100+ and are not used.
//   f32  anything else (F16 or F32 operands): decoded to F32, F32 GEMM.
// A path cuBLASLt declines at prepare falls through to the next one.
// NVFP4's FP32 tensor scales are not exact in BF16: the epilogue applies them.
// Blockwise FP8 (fp8-block: 1x128 tiles / 128x128 blocks, FP32 scales per
// 128-chunk of K) has two paths of its own:
//   fp8_block  cuBLASLt's VEC128_32F / BLK128x128_32F scale modes (sm_90): the
//        scales rewritten into its layouts, the codes used in place. Needs M and
//        N multiples of 4, K of 16, and not two 128x128-block operands.
//   chunked  anything cuBLASLt declines: chunked_kernel, one thread per C
//        element, promotes its FP32 sum every 128 elements of K as
//        cpu/gemm_k_chunked.cpp (the CPU's order; correct, not fast).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "common.cuh"
#include "lt_gemm.h"
#include "scale.cuh"
#include "sgrt/quant.h"

namespace sgrt::cuda {
namespace {

enum class ScaleKind : uint8_t { none, tensor, outer, inner, block, chunk };

// One qmatmul operand, its stored matrix seen as [rows, cols] row-major.
struct Operand {
  const void* data = nullptr;
  DType dt = DType::f32;
  int64_t ld = 0;          // stored cols
  bool rows_outer = true;  // stored row index is M (A) / N (B); else it is K
  ScaleKind kind = ScaleKind::none;
  const void* scale = nullptr;
  DType scale_dt = DType::i32;
  int64_t scale_ld = 0, block = 0;  // chunk: block = outer indices per scale row (1 or 128)
  const float* tensor_scale = nullptr;  // NVFP4: state[kStateTensorScale]
};

// Multiplier at index j of a scale tensor: i32 exponent e means 2^-e (quantize.h).
__device__ inline float scale_value(const Operand& p, int64_t j) {
  switch (p.scale_dt) {
    case DType::i32: return ldexpf(1.f, -static_cast<const int32_t*>(p.scale)[j]);
    case DType::f32: return static_cast<const float*>(p.scale)[j];
    default: return load_as_float(p.scale, p.scale_dt, j);  // E8M0 / E4M3 block scales
  }
}

// The multiplier of element (o, k) applied while decoding.
__device__ inline float decode_scale(const Operand& p, int64_t o, int64_t k) {
  switch (p.kind) {
    case ScaleKind::tensor: return scale_value(p, 0);
    case ScaleKind::outer: return scale_value(p, o);
    case ScaleKind::inner: return scale_value(p, k);
    case ScaleKind::block: return scale_value(p, o * p.scale_ld + k / p.block);
    default: return 1.f;
  }
}

enum class PackTo : uint8_t { fp8, bf16, f32 };

// dst[o, k] (K-major, [outer, K]) = op(X)[o, k]: codes (fp8; E2M1 -> E4M3), or
// decoded values times their scale (bf16 / f32).
template <PackTo P>
__global__ void pack_kernel(Operand p, int64_t outer, int64_t K, void* dst) {
  SG_GRID_STRIDE(t, outer * K) {
    const int64_t o = t / K, k = t % K, src = p.rows_outer ? o * p.ld + k : k * p.ld + o;
    if constexpr (P == PackTo::fp8) {
      const uint8_t* b = static_cast<const uint8_t*>(p.data);
      static_cast<uint8_t*>(dst)[t] = p.dt == DType::e2m1 ? fmt::e4m3_encode(load_as_float(p.data, p.dt, src)) : b[src];
    } else {
      const float v = load_as_float(p.data, p.dt, src) * decode_scale(p, o, k);
      if constexpr (P == PackTo::bf16) static_cast<uint16_t*>(dst)[t] = fmt::bf16_encode(v);
      else static_cast<float*>(dst)[t] = v;
    }
  }
}

// FP8 path: per-tensor multipliers for cuBLASLt's scale pointers, one per slot.
constexpr size_t kScaleSlot = 256;
__global__ void tensor_scales_kernel(Operand a, Operand b, float* out) {
  out[0] = a.kind == ScaleKind::tensor ? scale_value(a, 0) : 1.f;
  out[kScaleSlot / sizeof(float)] = b.kind == ScaleKind::tensor ? scale_value(b, 0) : 1.f;
}

// C[m, n] *= (tsA * outer A[m]) * (tsB * outer B[n]) for what the GEMM left out.
__global__ void epilogue_kernel(Operand a, Operand b, bool a_outer, bool b_outer, int64_t M, int64_t N, float* c) {
  const float ta = a.tensor_scale ? *a.tensor_scale : 1.f, tb = b.tensor_scale ? *b.tensor_scale : 1.f;
  SG_GRID_STRIDE(i, M * N) {
    const int64_t m = i / N, n = i % N;
    c[i] *= (a_outer ? ta * scale_value(a, m) : ta) * (b_outer ? tb * scale_value(b, n) : tb);
  }
}

// Blockwise FP8: C[m, n] = sum over 128-chunks c of (sum_k a[m, k] b[n, k]) *
// (sa(m, c) * sb(n, c)), both operands K-major codes.
__global__ void chunked_kernel(Operand a, Operand b, int64_t M, int64_t N, int64_t K, float* c) {
  SG_GRID_STRIDE(i, M * N) {
    const int64_t m = i / N, n = i % N;
    float y = 0.f;
    for (int64_t k0 = 0, chunk = 0; k0 < K; k0 += kFp8Tile, ++chunk) {
      const int64_t k1 = k0 + kFp8Tile < K ? k0 + kFp8Tile : K;
      float part = 0.f;
      for (int64_t k = k0; k < k1; ++k)
        part = fmaf(load_as_float(a.data, a.dt, m * a.ld + k), load_as_float(b.data, b.dt, n * b.ld + k), part);
      const float sa = static_cast<const float*>(a.scale)[(m / a.block) * a.scale_ld + chunk];
      const float sb = static_cast<const float*>(b.scale)[(n / b.block) * b.scale_ld + chunk];
      y = __fadd_rn(y, __fmul_rn(part, __fmul_rn(sa, sb)));
    }
    c[i] = y;
  }
}

// Blockwise FP8 on cuBLASLt: operand p's scales, stored [outer / block,
// scale_ld] row-major (K chunks fastest), in cuBLASLt's layout (cuBLAS's
// "Scaling factors layouts"): a 1x128 tile's (VEC128_32F) outer-major, [chunks,
// outer]; a 128x128 block's (BLK128x128_32F) K-major, [blocks, chunks4] with
// chunks4 = chunks rounded up to 4 and the padding 0.
__global__ void block_scale_layout_kernel(Operand p, int64_t outer, int64_t chunks, float* dst) {
  const float* src = static_cast<const float*>(p.scale);
  if (p.block == 1) {
    SG_GRID_STRIDE(i, outer * chunks) dst[i] = src[(i % outer) * p.scale_ld + i / outer];
  } else {
    const int64_t chunks4 = (chunks + 3) / 4 * 4, blocks = (outer + p.block - 1) / p.block;
    SG_GRID_STRIDE(i, blocks * chunks4) {
      const int64_t ch = i % chunks4;
      dst[i] = ch < chunks ? src[(i / chunks4) * p.scale_ld + ch] : 0.f;
    }
  }
}

// Floats of block_scale_layout_kernel's output for an operand of `outer` rows.
int64_t block_scale_words(const Operand& p, int64_t outer, int64_t chunks) {
  return p.block == 1 ? outer * chunks : (outer + p.block - 1) / p.block * ((chunks + 3) / 4 * 4);
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::e4m3: case DType::e2m1: return CUDA_R_8F_E4M3;  // E2M1 is packed to E4M3
    case DType::e5m2: return CUDA_R_8F_E5M2;
    default: return CUDA_R_32F;
  }
}

bool is_fp8ish(DType t) { return t == DType::e4m3 || t == DType::e5m2 || t == DType::e2m1; }

// Describes qmatmul operand `which` (0: A, 1: B); mirrors quant_ops.cpp's operand().
Status make_operand(const OpArgs& a, int which, Operand* o) {
  const Tensor& data = a.in[which * 3];
  const Tensor& scale = a.in[which * 3 + 1];
  bool trans = a.attrs->i(which == 0 ? "trans_a" : "trans_b");
  QuantGranularity g = a.quant[which].granularity;
  o->data = data.p;
  o->dt = data.dtype();
  o->ld = data.shape().back();
  o->rows_outer = which == 0 ? !trans : trans;
  o->scale = scale.p;
  o->scale_dt = scale.dtype();
  switch (g) {
    case QuantGranularity::tensor: o->kind = ScaleKind::tensor; break;
    case QuantGranularity::row: o->kind = o->rows_outer ? ScaleKind::outer : ScaleKind::inner; break;
    case QuantGranularity::column: o->kind = o->rows_outer ? ScaleKind::inner : ScaleKind::outer; break;
    case QuantGranularity::mx: case QuantGranularity::nvfp4:
      if (!o->rows_outer) return Status::Invalid("qmatmul: block scales must run along the contracting dimension");
      o->kind = ScaleKind::block;
      o->block = block_size(g);
      o->scale_ld = scale.shape().back();
      if (g == QuantGranularity::nvfp4) o->tensor_scale = a.in[which * 3 + 2].f() + kStateTensorScale;
      break;
    case QuantGranularity::nvfp4_16x16: return Status::Unsupported("qmatmul: nvfp4-train's 16x16 weight blocks on CUDA");
    case QuantGranularity::tile1x128: case QuantGranularity::block128x128:
      if (!o->rows_outer) return Status::Invalid("qmatmul: block scales must run along the contracting dimension");
      o->kind = ScaleKind::chunk;
      o->block = g == QuantGranularity::block128x128 ? kFp8Tile : 1;
      o->scale_ld = scale.shape().back();
      break;
  }
  return Status::Ok();
}

// The heuristic's first algorithm, or the fastest of its candidates when the backend tunes.
Status plan_gemm(BindCtx& ctx, const GemmSpec& s, std::unique_ptr<LtGemm>* g) {
  return ctx.autotune ? LtGemm::plan_fastest(ctx.lt, s, ctx.verbose, g) : LtGemm::plan(ctx.lt, s, g);
}

enum class Path : uint8_t { fp8, fp8_block, bf16, f32 };

struct Plan {
  Path path;
  std::unique_ptr<LtGemm> gemm;
  void* pa = nullptr;  // packed operands (nullptr: used in place)
  void* pb = nullptr;
  float* tensor_scales = nullptr;
  float* block_scales[2] = {};  // fp8_block: A's and B's scales in cuBLASLt's layout
};

// Plans `path` for C[M,N] = op(A) op(B); Unsupported when this path cannot run it.
Status plan_path(Path path, const Operand& A, const Operand& B, int64_t M, int64_t N, int64_t K, float* c, BindCtx& ctx,
                 Plan* plan) {
  plan->path = path;
  GemmSpec s;
  s.m = M, s.n = N, s.k = K;
  s.trans_a = false, s.trans_b = true;  // both K-major
  s.lda = K, s.ldb = K, s.ldc = N;
  size_t elem = path == Path::fp8 || path == Path::fp8_block ? 1 : path == Path::bf16 ? 2 : 4;
  if (path == Path::fp8) {
    bool ok = ctx.dev.fp8() && is_fp8ish(A.dt) && is_fp8ish(B.dt) && !(A.dt == DType::e5m2 && B.dt == DType::e5m2) &&
              K % 16 == 0;
    for (const Operand* o : {&A, &B}) ok = ok && (o->kind == ScaleKind::tensor || o->kind == ScaleKind::outer);
    if (!ok) return Status::Unsupported("not an FP8 GEMM");
    s.type_a = cuda_type(A.dt), s.type_b = cuda_type(B.dt);
    // One 256-byte slot each: cuBLASLt refuses (at run, NOT_SUPPORTED) a scale
    // pointer that is not 16-byte aligned, as the second float of a pair would be.
    plan->tensor_scales = static_cast<float*>(ctx.scratch->reserve(2 * kScaleSlot));
    s.scale_a = plan->tensor_scales, s.scale_b = plan->tensor_scales + kScaleSlot / sizeof(float);
  } else if (path == Path::fp8_block) {
    auto fp8 = [](const Operand& o) { return (o.dt == DType::e4m3 || o.dt == DType::e5m2) && o.rows_outer; };
    // Our A is cuBLASLt's B: with 1x128 scales its outer size must be a multiple
    // of 8 (Transformer Engine checks the same before calling cuBLASLt).
    bool ok = ctx.dev.fp8() && fp8(A) && fp8(B) && !(A.dt == DType::e5m2 && B.dt == DType::e5m2) && K % 16 == 0 &&
              M % (A.block == 1 ? 8 : 4) == 0 && N % 4 == 0 && !(A.block > 1 && B.block > 1);
    if (!ok)
      return Status::Unsupported("outside cuBLASLt's blockwise FP8 (N a multiple of 4, M of 8 with 1x128 scales (else 4), K of "
                                 "16, one 128x128 operand at most)");
    s.type_a = cuda_type(A.dt), s.type_b = cuda_type(B.dt);
    const int64_t chunks = (K + kFp8Tile - 1) / kFp8Tile;
    auto mode = [](const Operand& o) {
      return o.block == 1 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    };
    s.scale_mode_a = mode(A), s.scale_mode_b = mode(B);
    // Reserved for whole 128-row by 4-chunk tiles of scales (at least either
    // layout's words), should cuBLASLt's loads read whole tiles.
    const int64_t tile_words = (std::max(M, N) + 127) / 128 * 128 * ((chunks + 3) / 4 * 4);
    for (int i = 0; i < 2; ++i) plan->block_scales[i] = static_cast<float*>(ctx.scratch->reserve(sizeof(float) * tile_words));
    s.scale_a = plan->block_scales[0], s.scale_b = plan->block_scales[1];
  } else {
    auto exact_in_bf16 = [](DType t) { return is_fp8ish(t) || t == DType::bf16; };
    if (path == Path::bf16 && !(exact_in_bf16(A.dt) && exact_in_bf16(B.dt))) return Status::Unsupported("not a BF16 GEMM");
    s.type_a = s.type_b = path == Path::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  }
  // FP8 operands already K-major and stored as FP8 are used in place.
  auto in_place = [&](const Operand& o) {
    return (path == Path::fp8 || path == Path::fp8_block) && o.rows_outer && o.dt != DType::e2m1;
  };
  plan->pa = in_place(A) ? nullptr : ctx.scratch->reserve(elem * M * K);
  plan->pb = in_place(B) ? nullptr : ctx.scratch->reserve(elem * N * K);
  s.addr_a = reinterpret_cast<uintptr_t>(plan->pa ? plan->pa : A.data);
  s.addr_b = reinterpret_cast<uintptr_t>(plan->pb ? plan->pb : B.data);
  s.addr_c = reinterpret_cast<uintptr_t>(c);
  s.workspace_bytes = kLtWorkspaceBytes;
  s.workspace = ctx.scratch->reserve(s.workspace_bytes);
  return plan_gemm(ctx, s, &plan->gemm);
}

// The first path that can run the GEMM (f32 always can, unless cuBLASLt fails).
// A declined path's scratch stays reserved: a little waste at prepare, none at run time.
Status plan_first(const Operand& A, const Operand& B, int64_t M, int64_t N, int64_t K, float* c, BindCtx& ctx,
                  Plan* plan) {
  for (Path p : {Path::fp8, Path::bf16})
    if (plan_path(p, A, B, M, N, K, c, ctx, plan).ok()) return Status::Ok();
  return plan_path(Path::f32, A, B, M, N, K, c, ctx, plan);
}

template <PackTo P>
void pack(const Operand& o, int64_t outer, int64_t K, void* dst, const Device& dev, cudaStream_t s) {
  pack_kernel<P><<<grid_for(outer * K, dev), kThreads, 0, s>>>(o, outer, K, dst);
}

Status bind_qmatmul(const OpArgs& a, BindCtx& ctx, Launch* out) {
  Operand A, B;
  SG_TRY(make_operand(a, 0, &A));
  SG_TRY(make_operand(a, 1, &B));
  const Shape& as = a.in[0].shape();
  const Shape& bs = a.in[3].shape();
  int64_t ar = a.in[0].n / as.back(), ac = as.back(), br = a.in[3].n / bs.back(), bc = bs.back();
  int64_t M = A.rows_outer ? ar : ac, K = A.rows_outer ? ac : ar, N = B.rows_outer ? br : bc;
  float* c = a.out[0].f();
  const Device dev = ctx.dev;
  if ((A.kind == ScaleKind::chunk) != (B.kind == ScaleKind::chunk))
    return Status::Invalid("qmatmul: 1x128 / 128x128 operands go with each other only");
  auto plan = std::make_shared<Plan>();
  if (A.kind == ScaleKind::chunk) {
    Status lt = ctx.fp8_block == BindCtx::Fp8Block::chunked ? Status::Unsupported("SGRT_CUDA_FP8_BLOCK=chunked")
                                                            : plan_path(Path::fp8_block, A, B, M, N, K, c, ctx, plan.get());
    if (lt.ok()) {
      const int64_t chunks = (K + kFp8Tile - 1) / kFp8Tile;
      *out = [=](cudaStream_t s) {
        const Plan& p = *plan;
        block_scale_layout_kernel<<<grid_for(block_scale_words(A, M, chunks), dev), kThreads, 0, s>>>(A, M, chunks, p.block_scales[0]);
        block_scale_layout_kernel<<<grid_for(block_scale_words(B, N, chunks), dev), kThreads, 0, s>>>(B, N, chunks, p.block_scales[1]);
        SG_TRY(launched("qmatmul block_scale_layout_kernel"));
        return p.gemm->run(A.data, B.data, c, s);
      };
      return Status::Ok();
    }
    const std::string product = "fp8-block product M=" + std::to_string(M) + ", N=" + std::to_string(N) +
                                ", K=" + std::to_string(K);
    if (ctx.fp8_block == BindCtx::Fp8Block::cublaslt)
      return Status::Unsupported("qmatmul: SGRT_CUDA_FP8_BLOCK=cublaslt, but cuBLASLt's blockwise FP8 does not run the " +
                                 product + ": " + lt.message());
    if (ctx.verbose) std::fprintf(stderr, "sgrt cuda: %s on the chunked kernel: %s\n", product.c_str(), lt.message().c_str());
    *out = [=](cudaStream_t s) {
      if (M * N > 0) chunked_kernel<<<grid_for(M * N, dev), kThreads, 0, s>>>(A, B, M, N, K, c);
      return launched("qmatmul chunked_kernel");
    };
    return Status::Ok();
  }
  SG_TRY(plan_first(A, B, M, N, K, c, ctx, plan.get()));
  const bool fp8 = plan->path == Path::fp8;
  // The epilogue: NVFP4 tensor scales, and on the FP8 path per-outer scales.
  const bool a_outer = fp8 && A.kind == ScaleKind::outer, b_outer = fp8 && B.kind == ScaleKind::outer;
  const bool epilogue = a_outer || b_outer || A.tensor_scale || B.tensor_scale;
  *out = [=](cudaStream_t s) {
    const Plan& p = *plan;
    if (p.pa) {
      if (p.path == Path::fp8) pack<PackTo::fp8>(A, M, K, p.pa, dev, s);
      else if (p.path == Path::bf16) pack<PackTo::bf16>(A, M, K, p.pa, dev, s);
      else pack<PackTo::f32>(A, M, K, p.pa, dev, s);
    }
    if (p.pb) {
      if (p.path == Path::fp8) pack<PackTo::fp8>(B, N, K, p.pb, dev, s);
      else if (p.path == Path::bf16) pack<PackTo::bf16>(B, N, K, p.pb, dev, s);
      else pack<PackTo::f32>(B, N, K, p.pb, dev, s);
    }
    if (fp8) tensor_scales_kernel<<<1, 1, 0, s>>>(A, B, p.tensor_scales);
    SG_TRY(launched("qmatmul pack_kernel"));
    SG_TRY(p.gemm->run(p.pa ? p.pa : A.data, p.pb ? p.pb : B.data, c, s));
    if (epilogue) epilogue_kernel<<<grid_for(M * N, dev), kThreads, 0, s>>>(A, B, a_outer, b_outer, M, N, c);
    return launched("qmatmul epilogue_kernel");
  };
  return Status::Ok();
}

Status bind_matmul_f32(const OpArgs& a, BindCtx& ctx, Launch* out) {
  const Shape& as = a.in[0].shape();
  const Shape& bs = a.in[1].shape();
  int64_t ar = a.in[0].n / as.back(), ac = as.back(), br = a.in[1].n / bs.back(), bc = bs.back();
  GemmSpec s;
  s.trans_a = a.attrs->i("trans_a"), s.trans_b = a.attrs->i("trans_b");
  s.m = s.trans_a ? ac : ar, s.k = s.trans_a ? ar : ac, s.n = s.trans_b ? br : bc;
  s.lda = ac, s.ldb = bc, s.ldc = s.n;
  const float* A = a.in[0].f();
  const float* B = a.in[1].f();
  float* c = a.out[0].f();
  std::shared_ptr<const LtGemm> gemm;
  SG_TRY(plan_shared_gemm(ctx, s, A, B, c, &gemm));
  *out = [=](cudaStream_t st) { return gemm->run(A, B, c, st); };
  return Status::Ok();
}

}  // namespace

Status plan_shared_gemm(BindCtx& ctx, GemmSpec s, const void* a, const void* b, void* c,
                        std::shared_ptr<const LtGemm>* out) {
  s.addr_a = reinterpret_cast<uintptr_t>(a), s.addr_b = reinterpret_cast<uintptr_t>(b), s.addr_c = reinterpret_cast<uintptr_t>(c);
  s.workspace_bytes = kLtWorkspaceBytes;
  s.workspace = ctx.scratch->reserve(s.workspace_bytes);
  std::unique_ptr<LtGemm> g;
  SG_TRY(plan_gemm(ctx, s, &g));
  *out = std::move(g);
  return Status::Ok();
}

Status bind_matmul(const OpArgs& a, BindCtx& ctx, Launch* out) {
  return a.code == OpCode::QMatMul ? bind_qmatmul(a, ctx, out) : bind_matmul_f32(a, ctx, out);
}

}  // namespace sgrt::cuda
