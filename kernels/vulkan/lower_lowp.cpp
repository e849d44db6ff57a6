// The low-precision ops (semantics: kernels/cpu/quant_ops.cpp, fp4_ops.cpp):
// quantize in phases with per-op scratch counters (quantize.comp), qmatmul on
// gemm_tiled (or gemm_coop, opted in) with operands decoded as they load or,
// first, into scratch (gemm_decode.comp), the FP4 DGE and outlier clamping.
#include <algorithm>
#include <cmath>

#include "lowering.h"
#include "sgrt/quant.h"

namespace sgrt::vk {
namespace {

constexpr uint32_t kQuantScratchWords = 5;  // quantize.comp's S_WORDS
enum QuantPhase : uint32_t { kAmax, kScales, kEncode, kState };
// gemm_tiled.comp's SK_*: where an operand's scales apply (cpu/gemm.h's OperandScale).
enum ScaleKind : uint32_t { kNoScale, kTensorScale, kOuterScale, kInnerScale, kMxScale, kNvfp4Scale, kTileScale, kBlock2dScale };
constexpr int64_t kClampMaxCols = 4096;  // clamp_outliers.comp's kMaxCols
constexpr uint32_t kDecodedA = 1u << 16;     // gemm_tiled.glsl's DEC_A; DEC_B the next bit
constexpr uint64_t kDecodeFirstWords = 16u << 20;  // 64 MiB of decoded operands at most

bool is_code_format(DType t) {
  return t == DType::f16 || t == DType::bf16 || t == DType::e4m3 || t == DType::e5m2 || t == DType::e2m1;
}

// Whether an operand's every element, decoded with its inner or block scale, is
// an FP16 normal exactly (gemm_coop's products then equal the tiled shader's):
// E4M3 and E2M1 codes, times an NVFP4 block scale at most. Not E5M2, whose
// subnormals are FP16 subnormals a device may flush; not BF16, MX or per-K scales.
bool fp16_exact(DType t, uint32_t kind) {
  return (t == DType::e4m3 || t == DType::e2m1) &&
         (kind == kNoScale || kind == kTensorScale || kind == kOuterScale || kind == kNvfp4Scale);
}

// qmatmul's operand `which` (0: A, 1: B) as cpu/quant_ops.cpp's operand(): the
// scale kind from the granularity and whether the stored rows are the outer index.
constexpr const char* kNoNvfp4Train =
    "recipe nvfp4-train (16x16 weight blocks, Hadamard transform, stochastic rounding) is not implemented on Vulkan: "
    "use --backend cpu";

Status operand(const Ctx& c, int which, uint32_t* kind, uint32_t* scale_ld) {
  const TensorInfo& data = c.in(which * 3);
  const TensorInfo& scale = c.in(which * 3 + 1);
  bool trans = c.op.attrs.i(which == 0 ? "trans_a" : "trans_b");
  QuantGranularity g = c.op.quant[which].granularity;
  bool rows_outer = which == 0 ? !trans : trans;
  if (data.type.dtype != DType::f32 && !is_code_format(data.type.dtype))
    return Status::Unsupported("qmatmul: operand " + data.name + " is " + dtype_name(data.type.dtype));
  DType want = DType::i32;
  switch (g) {
    case QuantGranularity::tensor: *kind = kTensorScale; break;
    case QuantGranularity::row: *kind = rows_outer ? kOuterScale : kInnerScale; break;
    case QuantGranularity::column: *kind = rows_outer ? kInnerScale : kOuterScale; break;
    case QuantGranularity::mx: case QuantGranularity::nvfp4:
      if (!rows_outer) return Status::Unsupported("qmatmul: block scales must run along the contracting dimension");
      *kind = g == QuantGranularity::mx ? kMxScale : kNvfp4Scale;
      want = g == QuantGranularity::mx ? DType::e8m0 : DType::e4m3;
      *scale_ld = static_cast<uint32_t>(scale.type.shape.back());
      break;
    case QuantGranularity::nvfp4_16x16: return Status::Unsupported(kNoNvfp4Train);
    case QuantGranularity::tile1x128: case QuantGranularity::block128x128:
      if (!rows_outer) return Status::Unsupported("qmatmul: block scales must run along the contracting dimension");
      *kind = g == QuantGranularity::tile1x128 ? kTileScale : kBlock2dScale;
      want = DType::f32;
      *scale_ld = static_cast<uint32_t>(scale.type.shape.back());
      break;
  }
  if (scale.type.dtype != want)
    return Status::Unsupported("qmatmul: scale " + scale.name + " of granularity " + granularity_name(g) +
                               " is " + dtype_name(scale.type.dtype) + ", not " + dtype_name(want));
  return Status::Ok();
}

}  // namespace

Status quantize(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out) {
  const ScaleSpec& spec = c.op.quant[0];
  QuantGranularity g = spec.granularity;
  ScaleMode mode = spec.mode;
  DType fmt = spec.dtype;
  int64_t hist = spec.history;
  const Shape& xs = c.in(0).type.shape;
  uint64_t n = numel(xs), cols = xs.back(), rows = n / cols;
  bool blocks = is_block(g);
  if (g == QuantGranularity::nvfp4_16x16 || spec.hadamard || spec.stochastic) return Status::Unsupported(kNoNvfp4Train);
  if (!is_code_format(fmt) || (blocks && dtype_bits(fmt) != 8 && fmt != DType::e2m1))
    return Status::Unsupported(std::string("quantize to ") + dtype_name(fmt));
  if (g != QuantGranularity::tensor && (mode == ScaleMode::static_pow2 || mode == ScaleMode::delayed_amax))
    return Status::Unsupported("quantize: static and delayed scales are per tensor only");
  Push& p = d->push;
  p.off[0] = c.word(c.in(0));
  p.off[1] = c.word(c.out(0));
  p.off[2] = c.word(c.out(1));
  p.off[3] = c.word(c.out(2));
  p.n = static_cast<uint32_t>(n);
  p.p[0] = static_cast<uint32_t>(rows);
  p.p[1] = static_cast<uint32_t>(cols);
  p.p[2] = static_cast<uint32_t>(fmt);
  p.dim[0] = static_cast<uint32_t>(g);
  p.dim[1] = static_cast<uint32_t>(mode);
  p.dim[2] = static_cast<uint32_t>(hist);
  p.dim[3] = static_cast<uint32_t>(spec.margin);
  p.dim[4] = static_cast<uint32_t>(spec.static_log2);
  p.dim[5] = c.op.attrs.i("update", 1) != 0;
  p.dim[6] = c.scratch->take(kQuantScratchWords, d);
  d->shader = "quantize";
  auto phase = [&](QuantPhase ph, uint64_t invocations) {
    Dispatch e = *d;
    e.op = ph;
    e.groups[0] = groups_for(invocations, c.opts);
    out->push_back(std::move(e));
  };
  if (g == QuantGranularity::nvfp4 || (g == QuantGranularity::tensor && (mode != ScaleMode::static_pow2 || hist > 0)))
    phase(kAmax, n);
  uint64_t block = blocks ? static_cast<uint64_t>(block_size(g)) : 1, scale_words = (rows * ((cols + block - 1) / block) + 3) / 4;
  if (is_k_chunked(g)) scale_words = static_cast<uint64_t>(numel(quant_scale_type(g, xs).shape));  // one f32 each
  phase(kScales, g == QuantGranularity::tensor ? 1 : g == QuantGranularity::row ? rows
                 : g == QuantGranularity::column ? cols : scale_words);
  phase(kEncode, (n * dtype_bits(fmt) + 31) / 32);
  d->op = kState;
  return Status::Ok();
}

// Whether operand `which` is decoded in the GEMM's loads at all: codes, or f32
// with a scale per element of K.
bool needs_decoding(const TensorInfo& data, uint32_t kind) {
  return data.type.dtype != DType::f32 || kind == kInnerScale || kind == kMxScale || kind == kNvfp4Scale;
}

// Decode-first (KernelOptions::decode_first): a gemm_decode dispatch per operand
// that needs decoding writes its values to the scratch region (A's, then B's);
// the product *d reads them there. Returns the region's words taken.
uint32_t decode_first(const Ctx& c, const uint32_t kind[2], const uint32_t ld[2], Dispatch* d, std::vector<Dispatch>* out) {
  if (!c.opts.decode_first || d->shader == "gemm_coop") return 0;
  uint64_t count[2] = {};  // each operand's decoded words (0: read as stored)
  for (int w = 0; w < 2; ++w)
    if (needs_decoding(c.in(3 * w), kind[w])) count[w] = static_cast<uint64_t>(numel(c.in(3 * w).type.shape));
  if (count[0] + count[1] == 0 || count[0] + count[1] > kDecodeFirstWords) return 0;
  uint32_t used = 0;
  for (int w = 0; w < 2; ++w) {
    if (count[w] == 0) continue;
    const TensorInfo& data = c.in(3 * w);
    const TensorInfo& scale = c.in(3 * w + 1);
    const uint32_t n = static_cast<uint32_t>(count[w]);
    const bool trans = (d->op >> w & 1u) != 0;
    const bool rows_along_k = w == 0 ? trans : !trans;
    Dispatch e;
    e.shader = "gemm_decode";
    e.op = (rows_along_k ? 1u : 0u) | static_cast<uint32_t>(data.type.dtype) << 2 | kind[w] << 8;
    e.push.off[0] = c.word(data);
    e.push.off[3] = c.word(scale);
    e.push.n = n;
    e.push.p[0] = used;
    e.push.dim[0] = static_cast<uint32_t>(data.type.shape.back());
    e.push.dim[2] = ld[w];
    e.groups[0] = groups_for(n, c.opts);
    e.reads = {{data.offset, data.offset + data.bytes}, {scale.offset, scale.offset + scale.bytes}};
    const Range decoded{kScratchBase + 4ull * used, kScratchBase + 4ull * (used + n)};
    e.writes = {decoded};
    out->push_back(std::move(e));
    d->push.off[w] = used;
    d->op |= kDecodedA << w;
    d->reads.push_back(decoded);
    used += n;
  }
  c.scratch->take_region(used);
  return used;
}

Status qmatmul(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out) {
  uint32_t kind[2] = {}, ld[2] = {};
  for (int w = 0; w < 2; ++w) SG_TRY(operand(c, w, &kind[w], &ld[w]));
  if ((kind[0] >= kTileScale) != (kind[1] >= kTileScale))
    return Status::Unsupported("qmatmul: 1x128 / 128x128 operands go with each other only");
  const bool coop = c.opts.coop_codes && fp16_exact(c.in(0).type.dtype, kind[0]) && fp16_exact(c.in(3).type.dtype, kind[1]);
  // Blockwise FP8's chunked sums are gemm_tiled's alone.
  SG_TRY(gemm_grid(c, c.in(0).type.shape, c.in(3).type.shape, coop, kind[0] < kTileScale, d));
  d->op |= static_cast<uint32_t>(c.in(0).type.dtype) << 2 | static_cast<uint32_t>(c.in(3).type.dtype) << 5 |
           kind[0] << 8 | kind[1] << 11;
  d->push.off[1] = c.word(c.in(3));
  d->push.off[3] = c.word(c.in(1));
  d->push.off[4] = c.word(c.in(4));
  d->push.off[5] = c.word(c.in(2));
  d->push.dim[2] = ld[0];
  d->push.dim[3] = ld[1];
  d->push.dim[4] = c.word(c.in(5));
  const uint32_t decoded = decode_first(c, kind, ld, d, out);
  SG_TRY(split_k(c, d, out, decoded));
  return fuse_epilogue(c, d);
}

Status dge_grad(const Ctx& c, Dispatch* d, std::vector<Dispatch>*) {
  d->shader = "dge_grad";
  d->push.off[0] = c.word(c.in(0));
  d->push.off[1] = c.word(c.in(1));
  d->push.off[2] = c.word(c.out(0));
  d->push.off[3] = c.word(c.in(2));
  d->push.n = static_cast<uint32_t>(numel(c.in(1).type.shape));
  d->push.p[0] = static_cast<uint32_t>(c.in(1).type.shape[1]);
  d->groups[0] = groups_for(d->push.n, c.opts);
  return Status::Ok();
}

Status clamp_outliers(const Ctx& c, Dispatch* d, std::vector<Dispatch>*) {
  const Shape& xs = c.in(0).type.shape;
  int64_t cols = xs.back(), rows = numel(xs) / cols;
  if (cols > kClampMaxCols)
    return Status::Unsupported("clamp_outliers: rows of " + std::to_string(cols) + " elements; the vulkan kernel sorts a row in shared memory, at most " +
                               std::to_string(kClampMaxCols));
  int64_t hi_k = static_cast<int64_t>(std::floor(c.op.attrs.f("alpha") * static_cast<double>(cols - 1)));
  uint32_t size = 1;
  while (size < cols) size <<= 1;
  d->shader = "clamp_outliers";
  d->push.off[0] = c.word(c.in(0));
  d->push.off[2] = c.word(c.out(0));
  d->push.off[3] = c.word(c.out(1));
  d->push.p[0] = static_cast<uint32_t>(rows);
  d->push.p[1] = static_cast<uint32_t>(cols);
  d->push.p[2] = size;
  d->push.dim[0] = static_cast<uint32_t>(cols - 1 - hi_k);
  d->push.dim[1] = static_cast<uint32_t>(hi_k);
  d->groups[0] = static_cast<uint32_t>(std::min<int64_t>(std::max<int64_t>(rows, 1), c.opts.max_groups));
  return Status::Ok();
}

}  // namespace sgrt::vk
