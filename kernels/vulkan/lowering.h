// Internal to the kernel table (kernels.cpp): what an op's lowering sees, and
// the lowerings that live in their own files.
#pragma once
#include <vector>

#include "sgrt/column_sums.h"
#include "table.h"

namespace sgrt::vk {

constexpr uint32_t kLocal = 256;  // local size of the 1-D kernels

struct Ctx {
  const OpInfoLoaded& op;
  const std::vector<TensorInfo>& ts;
  const KernelOptions& opts;
  Scratch* scratch;
  const Epilogue& epi;
  const TensorInfo& in(size_t i) const { return ts[op.in[i]]; }
  const TensorInfo& out(size_t i) const { return ts[op.out[i]]; }
  uint32_t word(const TensorInfo& t) const { return static_cast<uint32_t>(t.offset / 4); }
};

// Workgroups of `local` invocations for n items, within the device's grid.
uint32_t groups_for(uint64_t n, const KernelOptions& o, uint32_t local = kLocal);

// gemm_tiled / gemm_coop / gemm_thin: sizes, transposes and the grid of C =
// op(A) op(B) for A and B of these shapes (matmul and qmatmul). `coop`: on
// cooperative matrices; else gemm_thin where C has a side of at most
// kThinSide, `thin` allows it and opts.gemm_thin is on; else tiled.
constexpr int64_t kThinSide = 16, kThinLong = 8;  // gemm_thin.comp's TMAX, LONG
constexpr uint32_t kThinN = 1u << 18;  // gemm_thin.comp's THIN_N
Status gemm_grid(const Ctx& c, const Shape& as, const Shape& bs, bool coop, bool thin, Dispatch* d);
// Split-K (gemm_tiled.glsl) for the tiled product *d once its push constants
// are complete: where its grid is under opts.split_k_grid and K is at least two
// pieces, K is summed in pieces of whole 128-chunks, at least kSplitPiece long,
// on a dispatch of its own that writes the partial sums to the scratch region
// (appended to *out); *d then adds them in order and applies the epilogue.
// The partial sums follow the region's first `region_used` words (the
// product's decoded operands).
constexpr int64_t kSplitPiece = 256;  // pieces are whole kFp8Tile chunks (sgrt/scale_spec.h)
constexpr uint32_t kSplitSums = 1u << 14, kSplitReduce = 1u << 15;  // gemm_tiled.glsl's SPLIT, REDUCE
Status split_k(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out, uint32_t region_used = 0);
// The product *d (its last dispatch, split-K's sums already appended) takes
// c.epi: it writes the fused op's output with gemm_operands.glsl's epilogue.
constexpr uint32_t kEpiScale = 1u << 19, kEpiAdd = 1u << 20;  // gemm_operands.glsl's EPI_SCALE, EPI_ADD
Status fuse_epilogue(const Ctx& c, Dispatch* d);

// Column sums in two passes (reduce_axes.comp, norm.comp: OP >> 8 = 1, 2) for
// *d, complete as one pass over `terms` rows of `outputs` columns: a copy of it
// as phase 1 (an invocation a column and chunk of kColumnChunk rows, writing
// `planes` sums to the scratch region: plane-major, then chunk, then column) is
// appended to *out; *d becomes phase 2 (each column's chunk sums added in chunk
// order): sgrt/column_sums.h's order, whose kColumnChunk is the shaders'
// kChunk. Workgroups of `local`. `first_word`, a field of d->push, gets the
// sums' first scratch word before the copy.
void column_chunks(const Ctx& c, int64_t terms, int64_t outputs, uint32_t planes, uint32_t local, uint32_t* first_word,
                   Dispatch* d, std::vector<Dispatch>* out);

// kernels_lowp.cpp: the low-precision ops.
Status quantize(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out);
Status qmatmul(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out);
Status dge_grad(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out);
Status clamp_outliers(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out);

// kernels_opt.cpp: optimizer updates over low-precision state, its working copies
// and gradients.
Status update(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out);
Status dequantize(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out);
Status quantize_grad(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out);

// lower_transformer.cpp: embedding, the norms, rope (and rope_at), dropout,
// batch norm's running statistics.
Status embedding(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out);
Status norm(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out);
Status rope(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out);
Status dropout(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out);
Status running_stat(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out);

// lower_blocks.cpp: a frozen quantized base. block_kind: blocks.glsl's code of a
// q8_0 / q4_1 table (0 for f32).
uint32_t block_kind(DType t);
Status dequant_matmul(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out);

// lower_attention.cpp: fused causal attention, its gradient, kv_attention.
Status attention(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out);

// lower_im2col.cpp: convolution patches (im2col) and their gradient (col2im).
Status im2col(const Ctx& c, Dispatch* d, std::vector<Dispatch>* out);

}  // namespace sgrt::vk
